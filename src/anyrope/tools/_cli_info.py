"""``anyrope info``: versions, installed backends, devices and fast paths.

Libraries are looked up with :func:`importlib.util.find_spec` and imported only to ask
for their devices, so the command works with NumPy alone.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import platform
import sys
from typing import Any

from .. import __version__
from ._backends import extra_backends, known_backends

LIBRARIES = (
    "numpy",
    "array-api-compat",
    "torch",
    "cupy",
    "jax",
    "array-api-strict",
    "dask",
    "ml_dtypes",
    "numba",
)
"""The distribution name on PyPI of every library anyrope can use (its module's name has
``_`` for ``-``)."""


def installed_version(distribution: str) -> str | None:
    """The version of ``distribution`` when its module can be imported, else ``None``."""
    if importlib.util.find_spec(distribution.replace("-", "_")) is None:
        return None
    if distribution == "cupy":  # CuPy's wheels are named per CUDA version (cupy-cuda12x)
        try:
            import cupy
        except Exception as error:  # a broken install is reported, not raised
            return f"installed, but import fails ({type(error).__name__})"
        return str(cupy.__version__)
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def libraries() -> dict[str, str | None]:
    """Installed version of every library anyrope can use (``None``: not installed)."""
    return {name: installed_version(name) for name in LIBRARIES}


def devices(why_not: dict[str, str | None]) -> list[str]:
    """Accelerators the installed libraries can see, one line each (``why_not``: the
    reason each backend, by id, is not usable, or ``None``)."""
    seen: list[str] = []
    if why_not["torch-cuda"] is None:
        import torch

        seen.extend(
            f"torch cuda:{i}: {torch.cuda.get_device_name(i)}"
            for i in range(torch.cuda.device_count())
        )
    if why_not["cupy-cuda"] is None:
        import cupy

        for i in range(cupy.cuda.runtime.getDeviceCount()):
            name = cupy.cuda.runtime.getDeviceProperties(i)["name"]
            seen.append(f"cupy cuda:{i}: {name.decode() if isinstance(name, bytes) else name}")
    if importlib.util.find_spec("jax") is not None:
        import jax

        seen.extend(f"jax {d.platform}:{d.id}: {d.device_kind}" for d in jax.devices())
    return seen


def fast_paths(why_not: dict[str, str | None]) -> list[dict[str, Any]]:
    """Each fast path, whether this machine can take it, and why not (``why_not``: as
    :func:`devices` takes it)."""
    numba = importlib.util.find_spec("numba") is None
    cupy = why_not["cupy-cuda"]
    paths = (
        (
            "numba (compiled CPU kernel, NumPy and PyTorch CPU)",
            "numba is not installed (pip install numba)" if numba else None,
            "numba is installed",
        ),
        ("blocked (cache-blocked CPU, NumPy)", None, "always available with NumPy"),
        ("blocked (cache-blocked CPU, PyTorch)", why_not["torch-cpu"], "PyTorch CPU tensors"),
        ("CUDA kernel (CuPy arrays)", cupy, "CuPy with a CUDA device"),
        (
            "CUDA kernel (PyTorch CUDA tensors, launched through CuPy)",
            why_not["torch-cuda"] or cupy,
            "PyTorch CUDA and CuPy with a CUDA device",
        ),
    )
    return [{"path": p, "available": no is None, "reason": no or yes} for p, no, yes in paths]


def gather() -> dict[str, Any]:
    """Everything ``info`` reports, as plain data."""
    why_not = {b.id: b.unavailable for b in [*known_backends(), *extra_backends()]}
    return {
        "anyrope": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "libraries": libraries(),
        "backends": [
            {"backend": b, "usable": no is None, "reason": no} for b, no in why_not.items()
        ],
        "devices": devices(why_not),
        "fast_paths": fast_paths(why_not),
    }


def format_report(report: dict[str, Any]) -> str:
    """The human-readable form of :func:`gather`'s result."""
    usable = {True: "usable", False: "not usable: "}
    sections = {
        "libraries": [
            f"{name:<18} {v or 'not installed'}" for name, v in report["libraries"].items()
        ],
        "backends": [
            f"{row['backend']:<22} {usable[row['usable']]}{row['reason'] or ''}"
            for row in report["backends"]
        ],
        "devices": report["devices"] or ["none (CPU only)"],
        "fast paths": [
            f"{'yes' if row['available'] else 'no '} {row['path']}: {row['reason']}"
            for row in report["fast_paths"]
        ],
    }
    lines = [f"anyrope {report['anyrope']} on Python {report['python']} ({report['platform']})"]
    for title, rows in sections.items():
        lines += ["", f"{title}:", *(f"  {row}" for row in rows)]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    report = gather()
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def register(commands: Any) -> None:
    """Add the ``info`` subcommand to the CLI's sub-parsers."""
    parser = commands.add_parser(
        "info",
        help="versions, installed backends, devices and available fast paths",
        description=(
            "Print the versions of anyrope and the array libraries, which backends are "
            "usable, the devices they see, and which fast paths this machine can take "
            "(and why not). Exit code 0."
        ),
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.set_defaults(run=run)
