"""The ``anyrope`` command line (``python -m anyrope``).

Its exit codes are :data:`EXIT_CODES`, the table that ``--help`` prints and that
docs/cli.rst repeats (tests/test_cli.py checks that the two agree).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from .. import __version__
from . import _benchmark, _cli_info, _cli_plot
from ._stdout import EXIT_BROKEN_PIPE, EXIT_MISSING_PACKAGE, quiet_on_broken_pipe

EXIT_CODES: tuple[tuple[int, str], ...] = (
    (0, "success"),
    (
        1,
        "check found a mismatch: a backend differs from the reference bits shipped in "
        "the package or from NumPy, or is out of the accuracy bound",
    ),
    (
        2,
        "bad arguments (unknown option, bad value, missing or unreadable config, an "
        "--output that cannot be written); the usage and the problem go to standard error",
    ),
    (
        EXIT_MISSING_PACKAGE,
        "an optional package the subcommand needs is missing (matplotlib for plot; "
        "ml_dtypes for bench when bfloat16 is the only dtype asked for)",
    ),
    (
        EXIT_BROKEN_PIPE,
        "the pipe that standard output writes to was closed by its reader "
        "(as in anyrope info | head)",
    ),
)
"""(exit code, meaning) of every way the command line ends."""


def _exit_codes_text() -> str:
    lines = ["exit codes:"]
    for code, meaning in EXIT_CODES:
        first, *rest = textwrap.wrap(meaning, width=72)
        lines += [f"  {code:<4} {first}", *(f"       {line}" for line in rest)]
    return "\n".join(lines)


def _numba_compiles_first() -> bool:
    """Whether numba is installed and its disk cache holds no compiled anyrope kernel yet.

    numba caches beside the source (``__pycache__``), under ``NUMBA_CACHE_DIR``, or in
    the user's cache folder when the source's folder is read-only. A cache written by
    another numba version also misses, which this cheap look does not see.
    """
    if importlib.util.find_spec("numba") is None:
        return False
    kernels = importlib.util.find_spec("anyrope._paths.numba_cpu.kernels")
    if kernels is None or kernels.origin is None:
        return False
    user_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "numba"
    folders = [Path(kernels.origin).parent / "__pycache__", user_cache]
    if os.environ.get("NUMBA_CACHE_DIR"):
        folders.append(Path(os.environ["NUMBA_CACHE_DIR"]))
    return not any(
        next(folder.rglob("kernels.rotate-*.nbi"), None) for folder in folders if folder.is_dir()
    )


def _check(args: argparse.Namespace) -> int:
    from . import check

    if _numba_compiles_first():
        print(
            "compiling anyrope's numba kernels for this machine: the first run takes some "
            "seconds more; later runs load them from numba's cache",
            file=sys.stderr,
            flush=True,
        )
    rows = check.run_check()
    settings = f"x of shape {check.SHAPE}, rotary_dim={check.ROTARY_DIM}, base={check.BASE}"
    print(f"anyrope {__version__}: {settings}")
    print("inputs: positions 0 .. 2**31 - 1 and near 2**53; subnormals, +-0, +-inf, NaN")
    print(f"reference: bits shipped in anyrope/{check.REFERENCE_FILE} (NaN payloads aside)")
    print(check.format_rows(rows))
    for name, reason in check.unavailable_backends():
        print(f"not checked: {name} ({reason})")
    failed = [r for r in rows if not r.ok]
    if failed:
        print(
            f"FAILED: {len(failed)} of {len(rows)} rows differ from the shipped reference or "
            f"from NumPy here, or exceed {check.HALF_BOUND} ulp (half types)",
            file=sys.stderr,
        )
        return 1
    print(
        f"all {len(rows)} rows: the same bits as the shipped reference and as NumPy here; "
        f"half types within {check.HALF_BOUND} ulp"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-parser per subcommand."""
    parser = argparse.ArgumentParser(
        prog="anyrope",
        description="Rotary position embedding with the same bits on every array library.",
        epilog=_exit_codes_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"anyrope {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check = commands.add_parser(
        "check",
        help=(
            "compare every installed backend with the reference bits shipped in anyrope, "
            "with NumPy (bits) and with a float64 oracle (ulps)"
        ),
        description=(
            "Apply RoPE on every installed backend (NumPy, PyTorch, array-api-strict, CuPy, "
            "JAX, dask), compare each bit for bit with the reference shipped in the package "
            "(the same bits on every machine) and with NumPy here, and with a float64 "
            "oracle; list the backends not checked; exit 1 on any mismatch."
        ),
    )
    check.set_defaults(run=_check)
    for module in (_cli_info, _benchmark, _cli_plot):
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (141 when stdout's pipe was closed)."""

    def run() -> int:
        args = build_parser().parse_args(argv)  # --help and --version print too
        code: int = args.run(args)
        return code

    return quiet_on_broken_pipe(run)
