"""Where the command line writes: a stdout that may be a pipe closed early
(``python -m anyrope info | head``), and the ``--output`` folders of ``bench`` and ``plot``."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

# The exit status when stdout is a pipe whose reader has gone (``anyrope info | head``):
# 141 = 128 + SIGPIPE, what a shell reports for ``cat`` or ``ls`` killed by SIGPIPE in the
# same place, so ``set -o pipefail`` scripts see anyrope as they see coreutils. Python
# ignores SIGPIPE and raises BrokenPipeError instead; we end quietly, without a traceback.
EXIT_BROKEN_PIPE = 141

# The exit status when an optional package a subcommand needs is missing (matplotlib for
# ``plot``; ml_dtypes for ``bench`` when bfloat16 is the only dtype asked for).
EXIT_MISSING_PACKAGE = 3


def quiet_on_broken_pipe(run: Callable[[], int]) -> int:
    """Run ``run`` and flush stdout; a closed stdout pipe ends it with status 141, quietly.

    The recipe of Python's documentation (:mod:`signal`, "Note on SIGPIPE"): flush inside
    the ``try`` so that buffered output fails here and not at exit, then point stdout at
    os.devnull so that the interpreter's own flush at exit cannot fail again. Used by
    ``anyrope.tools._cli.main`` (``python -m anyrope`` and the ``anyrope`` script) and
    ``python -m anyrope.check``.
    """
    try:
        try:
            code = run()
        finally:  # also after argparse's SystemExit, which follows --help
            if sys.stdout is not None:
                sys.stdout.flush()
    except BrokenPipeError:
        # The rest of stdout (the flush at interpreter exit) goes to os.devnull.
        with contextlib.suppress(AttributeError, OSError, ValueError):  # e.g. an io.StringIO
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        return EXIT_BROKEN_PIPE
    return code


def fail(command: str, message: str, code: int = 2) -> int:
    """Say ``anyrope COMMAND: error: MESSAGE`` on standard error; returns ``code``."""
    print(f"anyrope {command}: error: {message}", file=sys.stderr)
    return code


def add_output(parser: argparse.ArgumentParser, help: str) -> None:
    """Add ``--output``, the folder the subcommand writes its files into (default: .)."""
    parser.add_argument("--output", default=".", type=_output_folder, help=help)


def _output_folder(text: str) -> Path:
    """The ``--output`` folder, made now: argparse's ``type`` for the option, so that a
    path that cannot take the files fails with the usage and exit 2 before any work."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise argparse.ArgumentTypeError(
            f"cannot make the folder {text}: {error.strerror or error}"
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write into the folder {text}")
    return path
