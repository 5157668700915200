"""Writing to a stdout that may be a pipe closed early (``python -m anyrope info | head``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

__all__ = ["EXIT_BROKEN_PIPE", "quiet_on_broken_pipe"]

# The exit status when stdout is a pipe whose reader has gone (``anyrope info | head``):
# 141 = 128 + SIGPIPE, what a shell reports for ``cat`` or ``ls`` killed by SIGPIPE in the
# same place, so ``set -o pipefail`` scripts see anyrope as they see coreutils. Python
# ignores SIGPIPE and raises BrokenPipeError instead; we end quietly, without a traceback.
EXIT_BROKEN_PIPE = 141


def _point_stdout_at_devnull() -> None:
    """Send the rest of stdout (the flush at interpreter exit) to os.devnull."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # stdout replaced, e.g. by an io.StringIO
        pass


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
        _point_stdout_at_devnull()
        return EXIT_BROKEN_PIPE
    return code
