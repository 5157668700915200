"""``anyrope bench``: the CPU benchmark of :mod:`anyrope._benchmark`, from the command line.

Adds to the measurement a progress bar (``rich``, when installed), the machine
description, ``bench.json`` and the ``bench.png`` chart of GB/s per path next to the
copy's (``matplotlib``, when installed).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from . import __version__
from ._benchmark import K_SHAPE, Q_SHAPE, Timing, format_timings, run_cpu_benchmark


@contextlib.contextmanager
def _progress() -> Iterator[Callable[[str], None] | None]:
    """A callback that shows the path being timed in a rich progress bar, if rich exists."""
    if importlib.util.find_spec("rich") is None:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("timing {task.description}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("", total=None)
        yield lambda name: bar.update(task, description=name)


def _cpu_name() -> str:
    """The CPU model (Linux reports it in /proc/cpuinfo; elsewhere the architecture)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "processor": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "anyrope": __version__,
        "numpy": importlib.metadata.version("numpy"),
    }
    if importlib.util.find_spec("torch") is not None:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    return info


def chart(timings: list[Timing], target: Path, title: str) -> None:
    """Horizontal bars of GB/s per path; the copy drawn in grey."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [t.name for t in timings]
    colors = ["0.6" if name.startswith("copy") else "tab:blue" for name in names]
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(timings) + 1.5), layout="constrained")
    bars = ax.barh(names, [t.gbytes_per_s for t in timings], color=colors)
    labels = [f"{t.gbytes_per_s:.1f} GB/s ({t.copy_ratio:.2f} of copy)" for t in timings]
    ax.bar_label(bars, labels=labels, padding=3, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("GB/s (q and k read once and written once)")
    ax.set_xlim(0, max(t.gbytes_per_s for t in timings) * 1.45)
    ax.set_title(title, fontsize=10)
    fig.savefig(target, dpi=110)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    if args.repeats <= 0:
        print(
            f"anyrope bench: error: --repeats must be positive; got {args.repeats}", file=sys.stderr
        )
        return 2
    with _progress() as progress:
        timings = run_cpu_benchmark(args.repeats, progress)
    print(f"float32 q {Q_SHAPE} + k {K_SHAPE}, median of {args.repeats} runs")
    print(format_timings(timings))

    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    report = {
        "command": " ".join(["anyrope", *sys.argv[1:]]),
        "machine": machine(),
        "dtype": "float32",
        "q_shape": list(Q_SHAPE),
        "k_shape": list(K_SHAPE),
        "repeats": args.repeats,
        "timings": [t.as_dict() for t in timings],
    }
    (output / "bench.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {output / 'bench.json'}")
    if importlib.util.find_spec("matplotlib") is None:
        print("bench.png not written: matplotlib is not installed (pip install 'anyrope[cli]')")
        return 0
    title = f"anyrope bench: float32 q {Q_SHAPE} + k {K_SHAPE}\n{report['machine']['processor']}"
    chart(timings, output / "bench.png", title)
    print(f"wrote {output / 'bench.png'}")
    return 0


def register(commands: Any) -> None:
    """Add the ``bench`` subcommand to the CLI's sub-parsers."""
    parser = commands.add_parser(
        "bench",
        help="time RoPE on the CPU next to a copy of the same arrays",
        description=(
            "Time a copy of q and k (the floor), the naive NumPy and PyTorch expressions, "
            "and anyrope on NumPy and PyTorch CPU; print medians, GB/s and each path's "
            "speed as a fraction of the copy's; write bench.json and bench.png. "
            "Exit codes: 0 done, 2 bad arguments."
        ),
    )
    parser.add_argument("--repeats", type=int, default=15, help="timed runs per path (15)")
    parser.add_argument("--output", default=".", help="folder for bench.json and bench.png (.)")
    parser.set_defaults(run=run)
