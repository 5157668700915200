"""``anyrope bench``: the CPU benchmark of :mod:`anyrope.tools._benchmark`, from the command line.

Adds to the measurement a progress bar (``rich``, when installed), the machine
description, ``bench.json`` and the ``bench.png`` chart of each candidate's time as a
multiple of the copy's (``matplotlib``, when installed).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ._benchmark import (
    CASES,
    DTYPES,
    CaseResult,
    format_case,
    load_average,
    measure_case,
    write_json,
)
from ._stdout import EXIT_MISSING_PACKAGE, add_output, fail


class _Progress:
    """Case k of n, the round being timed, the time elapsed and the time left: a rich
    progress bar when rich is installed, else one line per case on standard error."""

    def __init__(self, cases: int, rounds: int, bar: Any) -> None:
        self.cases, self.steps, self.bar = cases, rounds + 1, bar
        self.task = None if bar is None else bar.add_task("", total=cases * self.steps)
        self.start = time.monotonic()
        self.done = 0

    def case(self, index: int, name: str) -> Callable[[str], None]:
        """The callback of ``measure_case`` for case ``index`` (from 0) named ``name``."""
        head = f"case {index + 1} of {self.cases}"
        if self.bar is None:
            minutes, seconds = divmod(round(time.monotonic() - self.start), 60)
            print(f"{head}: {name} ({minutes}:{seconds:02d} elapsed)", file=sys.stderr, flush=True)
            return lambda step: None
        first = index * self.steps

        def step(text: str) -> None:
            # measure_case reports a warm-up, then each of the rounds: one step each.
            self.bar.update(self.task, description=f"{head}: {text}", completed=self.done)
            self.done = min(self.done + 1, first + self.steps)

        self.done = first
        return step


@contextlib.contextmanager
def _progress(cases: int, rounds: int) -> Iterator[_Progress]:
    if importlib.util.find_spec("rich") is None:
        yield _Progress(cases, rounds, None)
        return
    from rich import progress
    from rich.console import Console

    columns = (
        progress.TextColumn("{task.description}"),
        progress.BarColumn(),
        progress.MofNCompleteColumn(),
        progress.TextColumn("elapsed"),
        progress.TimeElapsedColumn(),
        progress.TextColumn("left"),
        progress.TimeRemainingColumn(),
    )
    with progress.Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        yield _Progress(cases, rounds, bar)


def _overloaded(*loads: float | None) -> bool:
    """Whether timings taken under ``loads`` mislead: a load average above the cores."""
    return max(load or 0.0 for load in loads) > (os.cpu_count() or 1)


def chart(results: list[CaseResult], target: Path, title: str) -> None:
    """One panel per case: each candidate's time as a multiple of the copy's (log scale),
    a bar per dtype; the copy's line at 1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys(r.case for r in results))
    dtypes = list(dict.fromkeys(r.dtype for r in results))
    names = list(dict.fromkeys(t.name for r in results for t in r.timings if t.name != "copy"))
    fig, axes = plt.subplots(
        len(cases),
        1,
        figsize=(9, 0.22 * len(names) * len(dtypes) * len(cases) + 2),
        layout="constrained",
        squeeze=False,
    )
    height = 0.8 / len(dtypes)
    for ax, case in zip(axes[:, 0], cases, strict=True):
        for j, dtype in enumerate(dtypes):
            by_name = {
                t.name: t.x_copy
                for r in results
                if r.case == case and r.dtype == dtype
                for t in r.timings
            }
            rows = [i + j * height for i in range(len(names))]
            values = [by_name.get(name, float("nan")) for name in names]
            ax.barh(rows, values, height=height, label=dtype)
        ax.set_yticks([i + 0.4 - height / 2 for i in range(len(names))], names)
        ax.axvline(1.0, color="0.4", linewidth=1)
        ax.set_xscale("log")
        ax.invert_yaxis()
        ax.set_title(case, fontsize=9, loc="left")
    axes[-1, 0].set_xlabel(
        "time per call / time of a copy of q and k (1 = the copy; lower is faster)"
    )
    axes[0, 0].legend(fontsize=8, loc="lower right")
    fig.suptitle(title, fontsize=10)
    fig.savefig(target, dpi=100)
    plt.close(fig)


def _choices(text: str, allowed: tuple[str, ...], option: str) -> tuple[str, ...]:
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [c for c in chosen if c not in allowed]
    if unknown or not chosen:
        raise ValueError(
            f"{option} takes a comma-separated list of {', '.join(allowed)}; got {text!r}"
        )
    return chosen


def run(args: argparse.Namespace) -> int:
    try:
        if args.repeats <= 0:
            raise ValueError(f"--repeats must be positive; got {args.repeats}")
        cases = _choices(args.cases, tuple(CASES), "--cases")
        dtypes = _choices(args.dtypes, DTYPES, "--dtypes")
    except ValueError as error:
        return fail("bench", str(error))
    if "bfloat16" in dtypes and importlib.util.find_spec("ml_dtypes") is None:
        # NumPy has no bfloat16 of its own: the arrays are ml_dtypes'.
        dtypes = tuple(d for d in dtypes if d != "bfloat16")
        print(
            "anyrope bench: bfloat16 left out: it needs ml_dtypes (pip install ml_dtypes)",
            file=sys.stderr,
        )
        if not dtypes:
            return EXIT_MISSING_PACKAGE
    load, cores = load_average(), os.cpu_count() or 1
    if _overloaded(load):
        print(
            f"anyrope bench: warning: the load average ({load:.2f}) exceeds the {cores} cores: "
            "other processes share them, so the timings are slower and noisier than this "
            "machine's (torch.compile most of all)",
            file=sys.stderr,
        )
    todo = [(case, dtype) for case in cases for dtype in dtypes]
    results = []
    with _progress(len(todo), args.repeats) as progress:
        for index, (case, dtype) in enumerate(todo):
            result = measure_case(
                case, dtype, args.repeats, progress.case(index, f"{case} {dtype}")
            )
            print(format_case(result), flush=True)
            if _overloaded(result.load_before, result.load_after):
                print(f"  (the load average exceeded the {cores} cores: slower and noisier)")
            results.append(result)

    output: Path = args.output
    report = {"command": " ".join(["anyrope", *sys.argv[1:]]), "rounds": args.repeats}
    record = write_json(output / "bench.json", {**report, "results": [asdict(r) for r in results]})
    print(f"wrote {output / 'bench.json'}")
    if importlib.util.find_spec("matplotlib") is None:
        print("bench.png not written: matplotlib is not installed (pip install matplotlib)")
        return 0
    title = f"anyrope bench, median of {args.repeats} rounds\n{record['machine']['processor']}"
    chart(results, output / "bench.png", title)
    print(f"wrote {output / 'bench.png'}")
    return 0


def register(commands: Any) -> None:
    """Add the ``bench`` subcommand to the CLI's sub-parsers."""
    parser = commands.add_parser(
        "bench",
        help="time RoPE on the CPU next to a copy of the same arrays and its peers",
        description=(
            "For q (batch, seq, 32, 128) and k (batch, seq, 8, 128) of each case and dtype, "
            "time a copy of q and k into fresh arrays (the floor), the naive Hugging Face "
            "expression in NumPy, eager PyTorch, torch.compile and jax.jit (those "
            "installed), and anyrope on NumPy and PyTorch CPU, round-robin in the same "
            "rounds; print the median time per call, the interquartile range, the load "
            "average and each time as a multiple of the copy's; write bench.json and "
            "bench.png. bfloat16 needs ml_dtypes and is left out, with a note, without it. "
            f"Exit codes: 0 done, 2 bad arguments, {EXIT_MISSING_PACKAGE} ml_dtypes "
            "missing for bfloat16 alone."
        ),
    )
    parser.add_argument("--repeats", type=int, default=15, help="rounds (15)")
    for option, names in (("--cases", tuple(CASES)), ("--dtypes", DTYPES)):
        every = ",".join(names)
        said = f"comma-separated {option[2:]} (default all: {every})"
        parser.add_argument(option, default=every, help=said)
    add_output(parser, "folder for bench.json and bench.png, checked before any timing (.)")
    parser.set_defaults(run=run)
