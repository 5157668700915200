"""The ``anyrope`` command line (``python -m anyrope``).

Exit codes: 0 success; 1 a check found a mismatch or an accuracy failure;
2 bad command-line arguments (argparse); 141 stdout is a pipe closed by its reader.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .. import __version__
from . import _cli_bench, _cli_info, _cli_plot
from ._stdout import quiet_on_broken_pipe


def _check(args: argparse.Namespace) -> int:
    from .check import (
        BASE,
        HALF_BOUND,
        REFERENCE_FILE,
        ROTARY_DIM,
        SHAPE,
        format_rows,
        run_check,
        unavailable_backends,
    )

    rows = run_check()
    print(f"anyrope {__version__}: x of shape {SHAPE}, rotary_dim={ROTARY_DIM}, base={BASE}")
    print("inputs: positions 0 .. 2**31 - 1 and near 2**53; subnormals, +-0, +-inf, NaN")
    print(f"reference: bits shipped in anyrope/{REFERENCE_FILE} (NaN payloads aside)")
    print(format_rows(rows))
    for name, reason in unavailable_backends():
        print(f"not checked: {name} ({reason})")
    failed = [r for r in rows if not r.ok]
    if failed:
        print(
            f"FAILED: {len(failed)} of {len(rows)} rows differ from the shipped reference or "
            f"from NumPy here, or exceed {HALF_BOUND} ulp (half types)",
            file=sys.stderr,
        )
        return 1
    print(
        f"all {len(rows)} rows: the same bits as the shipped reference and as NumPy here; "
        f"half types within {HALF_BOUND} ulp"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-parser per subcommand."""
    parser = argparse.ArgumentParser(
        prog="anyrope",
        description="Rotary position embedding with the same bits on every array library.",
        epilog=(
            "Exit codes: 0 success, 1 check failed, 2 bad arguments, "
            "3 an optional package the subcommand needs is missing, "
            "141 the pipe stdout writes to was closed (as `anyrope info | head`)."
        ),
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
    for module in (_cli_info, _cli_bench, _cli_plot):
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (141 when stdout's pipe was closed)."""

    def run() -> int:
        args = build_parser().parse_args(argv)  # --help and --version print too
        code: int = args.run(args)
        return code

    return quiet_on_broken_pipe(run)
