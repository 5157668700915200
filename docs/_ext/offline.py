"""Fail the build when a page would fetch a script, style sheet or image from the network.

The site must read the same offline: every asset a page loads is in the build.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

REMOTE_ASSET = re.compile(r'<(?:script|link|img)\b[^>]*\b(?:src|href)="(?:https?:)?//[^"]*"')


def check_offline(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    remote = [
        f"{page.relative_to(app.outdir)}: {match.group(0)}"
        for page in sorted(Path(app.outdir).rglob("*.html"))
        for match in REMOTE_ASSET.finditer(page.read_text(encoding="utf-8"))
    ]
    if remote:
        raise ExtensionError("pages load assets from the network:\n" + "\n".join(remote))


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("build-finished", check_offline)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
