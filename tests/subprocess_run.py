"""Run Python in a fresh process that imports the same anyrope as the tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyrope

SOURCE = str(Path(anyrope.__file__).parents[1])


def run_python(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python ARGS...`` with anyrope's import location first on ``PYTHONPATH``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SOURCE, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
