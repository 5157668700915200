"""The ``anyrope`` command line (``python -m anyrope``): its subcommands ``check``,
``info``, ``bench`` and ``plot``, where they write (a stdout that may be a pipe closed
early, as in ``anyrope info | head``, and the ``--output`` folders of ``bench`` and
``plot``), and ``python -m anyrope.check --write-reference``.

Its exit codes are :data:`EXIT_CODES`, the table that ``--help`` prints and that
docs/cli.rst repeats (tests/test_cli.py checks that the two agree).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import itertools
import json
import math
import os
import platform
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..scaling import HFRopeConfig, RopeScaling, from_hf_config
from ..scaling.hf import layer_types
from . import _benchmark, check
from ._backends import extra_backends, installed_version, known_backends

# The exit status when stdout is a pipe whose reader has gone (``anyrope info | head``):
# 141 = 128 + SIGPIPE, what a shell reports for ``cat`` or ``ls`` killed by SIGPIPE in the
# same place, so ``set -o pipefail`` scripts see anyrope as they see coreutils. Python
# ignores SIGPIPE and raises BrokenPipeError instead; we end quietly, without a traceback.
EXIT_BROKEN_PIPE = 141

# The exit status when an optional package a subcommand needs is missing (matplotlib for
# ``plot``; ml_dtypes for ``bench`` when bfloat16 is the only dtype asked for).
EXIT_MISSING_PACKAGE = 3


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
    rows = (
        textwrap.fill(m, 79, initial_indent=f"  {c:<4} ", subsequent_indent=" " * 7)
        for c, m in EXIT_CODES
    )
    return "\n".join(["exit codes:", *rows])


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
    if _numba_compiles_first():
        _stderr(
            "compiling anyrope's numba kernels for this machine: the first run takes some "
            "seconds more; later runs load them from numba's cache"
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
        _stderr(
            f"FAILED: {len(failed)} of {len(rows)} rows differ from the shipped reference or "
            f"from NumPy here, or exceed {check.HALF_BOUND} ulp (half types)"
        )
        return 1
    print(
        f"all {len(rows)} rows: the same bits as the shipped reference and as NumPy here; "
        f"half types within {check.HALF_BOUND} ulp"
    )
    return 0


# anyrope info: versions, installed backends, devices and fast paths. Libraries are looked
# up with importlib.util.find_spec and imported only to ask for their devices, so the
# command works with NumPy alone.

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
    missing = importlib.util.find_spec("numba") is None
    numba = "numba is not installed (pip install numba)" if missing else None
    cupy = why_not["cupy-cuda"]
    paths = (
        ("numba (compiled CPU kernel, NumPy and PyTorch CPU)", numba, "numba is installed"),
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
        "libraries": {name: installed_version(name) for name in LIBRARIES},
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


def _info(args: argparse.Namespace) -> int:
    report = gather()
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


# anyrope plot: frequencies and wavelengths of a model config, scaled and unscaled.


def _plot(args: argparse.Namespace) -> int:
    """Read a Hugging Face ``config.json`` with :func:`anyrope.scaling.from_hf_config` and
    draw, per pair index, the frequency ``theta_i`` and the wavelength ``2 pi / theta_i``
    in tokens, for the config's scaling method next to the unscaled frequencies. The title
    and the line printed say which layers it draws: the ``--layer-type`` asked for
    (required where the config, in its current or an older format, gives settings per
    layer type), or every layer."""
    try:
        config = json.loads(Path(args.config).read_text())
    except OSError as error:
        return fail(args, f"cannot read --config {args.config}: {error.strerror}")
    except json.JSONDecodeError as error:
        return fail(args, f"--config {args.config} is not valid JSON: {error}")
    try:
        kinds = layer_types(config) if isinstance(config, dict) else None
        if kinds is None or args.layer_type is not None:
            settings = from_hf_config(config, layer_type=args.layer_type)
    except (TypeError, ValueError) as error:
        return fail(args, f"--config {args.config}: {error}")
    if kinds is not None and args.layer_type is None:
        return fail(
            args,
            f"--config {args.config} gives RoPE settings per layer type; pass --layer-type, "
            f"one of: {', '.join(kinds)}",
        )
    if args.seq_len is not None and args.seq_len <= 0:
        return fail(args, f"--seq-len must be positive; got {args.seq_len}")
    try:
        import matplotlib
    except ImportError:
        return fail(args, "plotting needs matplotlib: pip install matplotlib", EXIT_MISSING_PACKAGE)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    content = describe_plot(settings, args.seq_len)
    pairs = np.arange(settings.rotary_dim // 2)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True, layout="constrained")
    for freq, label, color in content.curves:
        top.semilogy(pairs, freq, ".-", color=color, label=label, markersize=3)
        bottom.semilogy(pairs, 2 * math.pi / freq, ".-", color=color, label=label, markersize=3)
    for length, label, style in content.contexts:
        bottom.axhline(length, color="tab:red", linestyle=style, linewidth=1, label=label)
    for index, (first, stop, name) in enumerate(content.sections):
        for ax in (top, bottom):
            ax.axvspan(first - 0.5, stop - 0.5, color=("0.94", "0.86")[index % 2], zorder=0)
        top.annotate(
            name,
            xy=((first + stop - 1) / 2, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(0, -12),
            textcoords="offset points",
            ha="center",
            fontsize=9,
        )
    top.set_ylabel("theta_i (radians per token)")
    bottom.set_ylabel("wavelength 2 pi / theta_i (tokens)")
    bottom.set_xlabel("pair index i")
    top.legend(fontsize=9, loc="lower left")
    bottom.legend(fontsize=9, loc="upper left")
    drawn = _drawn_layers(config, args.layer_type)
    fig.suptitle(f"{Path(args.config).name} [{drawn}]\n{content.title}")
    target = args.output / (
        "frequencies.png" if args.layer_type is None else f"frequencies-{args.layer_type}.png"
    )
    fig.savefig(target, dpi=110)
    plt.close(fig)
    print(f"wrote {target}: {drawn}, {content.title}")
    return 0


def _drawn_layers(config: Any, layer_type: str | None) -> str:
    """Which layers the plot shows: the layer type asked for, or every layer."""
    if layer_type is not None:
        return f"layer type {layer_type}"
    declared = config.get("layer_types") if isinstance(config, dict) else None
    if declared and len(set(declared)) > 1:
        return f"every layer type ({', '.join(dict.fromkeys(declared))}): one set of settings"
    return "every layer"


@dataclass(frozen=True)
class PlotContent:
    """What the plot of one config shows, as plain data (tested without matplotlib)."""

    title: str
    curves: list[tuple[Any, str, str]]
    """(frequencies, legend label, color) per curve: the unscaled ones, then the scaled."""
    contexts: list[tuple[int, str, str]]
    """(tokens, legend label, line style) per context length drawn on the wavelengths."""
    sections: list[tuple[int, int, str]]
    """(first pair, stop pair, name) of each M-RoPE or axial section; empty otherwise."""


def describe_plot(settings: HFRopeConfig, seq_len: int | None) -> PlotContent:
    """The title, curves, context lines and sections of the plot of ``settings``."""
    scaling = settings.scaling
    rotary, base = settings.rotary_dim, settings.base
    length = seq_len or settings.max_position_embeddings
    scaled, factor = scaling.frequencies(rotary, base, seq_len=length)
    plain, _ = RopeScaling().frequencies(rotary, base)
    method, sections = _streams(scaling, rotary)
    curves: list[tuple[Any, str, str]] = [(plain, "unscaled", "0.5")]
    if scaling.rope_type != "default":
        label = f"{method}, seq_len={length}" if scaling.depends_on_length else method
        still = int(np.count_nonzero(scaled == 0.0))
        if still:
            # Pairs of frequency 0 do not turn: no point on a log axis, no wavelength.
            label += f" ({still} pairs from {len(scaled) - still} on do not turn)"
            scaled = np.where(scaled == 0.0, np.nan, scaled)
        curves.append((scaled, label, "tab:blue"))
    title = f"head_dim={settings.head_dim}, rotary_dim={rotary}, base={base:g}, {method}"
    if sections:
        title += " (" + ", ".join(f"{name} {stop - first}" for first, stop, name in sections)
        title += " pairs)"
    if factor != 1.0:
        title += f", attention factor {factor:.4g}"
    return PlotContent(title, curves, _contexts(settings), sections)


def _streams(scaling: RopeScaling, rotary: int) -> tuple[str, list[tuple[int, int, str]]]:
    """The scaling method's name, with M-RoPE or axial said when it has position streams,
    and the (first pair, stop pair, name) of each stream."""
    pairs = scaling.sections(rotary)
    if pairs is None:
        return scaling.rope_type, []
    if scaling.rope_type == "axial":
        method, names = "axial", [f"axis {i}" for i in range(len(pairs))]
    else:
        method = "M-RoPE" if scaling.rope_type == "default" else f"M-RoPE, {scaling.rope_type}"
        names = ["temporal", "height", "width"][: len(pairs)]
    stops = list(itertools.accumulate(pairs, initial=0))
    return method, list(zip(stops[:-1], stops[1:], names, strict=True))


def _contexts(settings: HFRopeConfig) -> list[tuple[int, str, str]]:
    """The trained (original) context and the context the scaling reaches.

    The target is ``max_position_embeddings`` when it exceeds the original context
    (Llama 3.1: 8192 and 131072); when a config repeats the original there (Qwen2.5 with
    YaRN: 32768 and 32768, factor 4), the target is ``factor`` x the original.
    """
    scaling = settings.scaling
    original = scaling.original_max_position_embeddings
    longest = settings.max_position_embeddings
    if original is None or scaling.rope_type == "default":
        return [] if longest is None else [(longest, f"max_position_embeddings = {longest}", "--")]
    lines = [(original, f"original context = {original}", ":")]
    if longest is not None and longest > original:
        lines.append((longest, f"target context = {longest} (max_position_embeddings)", "--"))
    elif scaling.factor is not None and scaling.factor != 1.0:
        target = round(scaling.factor * original)
        lines.append(
            (target, f"target context = {target} (factor {scaling.factor:g} x original)", "--")
        )
    return lines


def quiet_on_broken_pipe(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse ``argv`` with ``parser``, run the ``run`` it sets and flush stdout; a closed
    stdout pipe ends it with status 141, quietly.

    The recipe of Python's documentation (:mod:`signal`, "Note on SIGPIPE"): flush inside
    the ``try`` so that buffered output fails here and not at exit, then point stdout at
    os.devnull so that the interpreter's own flush at exit cannot fail again. Used by
    ``anyrope.tools._cli.main`` (``python -m anyrope`` and the ``anyrope`` script) and
    ``python -m anyrope.check``.
    """
    try:
        try:
            args = parser.parse_args(argv)  # --help and --version print too
            code: int = args.run(args)
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


def _stderr(text: str) -> None:
    """Print ``text`` on standard error, flushed (the notes, warnings and errors)."""
    print(text, file=sys.stderr, flush=True)


def fail(args: argparse.Namespace, message: str, code: int = 2) -> int:
    """Say ``anyrope COMMAND: error: MESSAGE`` on standard error, after the subcommand's
    usage for bad arguments (exit 2), as argparse does; returns ``code``."""
    if code == 2:
        _stderr(args.usage.rstrip())
    _stderr(f"anyrope {args.command}: error: {message}")
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


class _Progress:
    """Case k of n, the round being timed, the time elapsed and the time left: a rich
    progress bar when rich is installed, else one line per case on standard error."""

    def __init__(self, cases: int, rounds: int, bar: Any) -> None:
        self.cases, self.steps, self.bar = cases, rounds + 1, bar
        self.task = None if bar is None else bar.add_task("", total=cases * self.steps)
        self.start = time.monotonic()

    def case(self, index: int, name: str) -> Callable[[str], None]:
        """The callback of ``measure_case`` for case ``index`` (from 0) named ``name``."""
        head = f"case {index + 1} of {self.cases}"
        if self.bar is None:
            minutes, seconds = divmod(round(time.monotonic() - self.start), 60)
            _stderr(f"{head}: {name} ({minutes}:{seconds:02d} elapsed)")
            return lambda step: None
        # _benchmark.measure_case reports a warm-up, then each of the rounds: one step each.
        done = itertools.count(index * self.steps)

        def step(text: str) -> None:
            self.bar.update(self.task, description=f"{head}: {text}", completed=next(done))

        return step


def _bar() -> contextlib.AbstractContextManager[Any]:
    """A rich progress bar on standard error; without rich, a context that gives None."""
    if importlib.util.find_spec("rich") is None:
        return contextlib.nullcontext()
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
    return progress.Progress(*columns, console=Console(stderr=True), transient=True)


def _overloaded(*loads: float | None) -> bool:
    """Whether timings taken under ``loads`` mislead: a load average above the cores."""
    return max(load or 0.0 for load in loads) > (os.cpu_count() or 1)


def chart(results: list[_benchmark.CaseResult], target: Path, title: str) -> None:
    """One panel per case: each candidate's time as a multiple of the copy's (log scale),
    a bar per dtype; the copy's line at 1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys(r.case for r in results))
    dtypes = list(dict.fromkeys(r.dtype for r in results))
    names = list(dict.fromkeys(t.name for r in results for t in r.timings if t.name != "copy"))
    bars = len(names) * len(dtypes) * len(cases)
    fig, axes = plt.subplots(
        len(cases), figsize=(9, 0.22 * bars + 2), layout="constrained", squeeze=False
    )
    x_copy = {(r.case, r.dtype, t.name): t.x_copy for r in results for t in r.timings}
    height = 0.8 / len(dtypes)
    for ax, case in zip(axes[:, 0], cases, strict=True):
        for j, dtype in enumerate(dtypes):
            rows = [i + j * height for i in range(len(names))]
            values = [x_copy.get((case, dtype, name), math.nan) for name in names]
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


def _bench(args: argparse.Namespace) -> int:
    """Time the cases with a progress bar (``rich``, when installed), the machine
    description, ``bench.json`` and the ``bench.png`` chart of each candidate's time as a
    multiple of the copy's (``matplotlib``, when installed)."""
    try:
        if args.repeats <= 0:
            raise ValueError(f"--repeats must be positive; got {args.repeats}")
        cases = _choices(args.cases, tuple(_benchmark.CASES), "--cases")
        dtypes = _choices(args.dtypes, _benchmark.DTYPES, "--dtypes")
    except ValueError as error:
        return fail(args, str(error))
    if "bfloat16" in dtypes and importlib.util.find_spec("ml_dtypes") is None:
        # NumPy has no bfloat16 of its own: the arrays are ml_dtypes'.
        dtypes = tuple(d for d in dtypes if d != "bfloat16")
        _stderr("anyrope bench: bfloat16 left out: it needs ml_dtypes (pip install ml_dtypes)")
        if not dtypes:
            return EXIT_MISSING_PACKAGE
    load, cores = _benchmark.load_average(), os.cpu_count() or 1
    if _overloaded(load):
        _stderr(
            f"anyrope bench: warning: the load average ({load:.2f}) exceeds the {cores} cores: "
            "other processes share them, so the timings are slower and noisier than this "
            "machine's (torch.compile most of all)"
        )
    todo = [(case, dtype) for case in cases for dtype in dtypes]
    results = []
    with _bar() as bar:
        progress = _Progress(len(todo), args.repeats, bar)
        for index, (case, dtype) in enumerate(todo):
            result = _benchmark.measure_case(
                case, dtype, args.repeats, progress.case(index, f"{case} {dtype}")
            )
            print(_benchmark.format_case(result), flush=True)
            if _overloaded(result.load_before, result.load_after):
                print(f"  (the load average exceeded the {cores} cores: slower and noisier)")
            results.append(result)
    command = " ".join(["anyrope", *sys.argv[1:]])
    report = {"command": command, "rounds": args.repeats, "results": [asdict(r) for r in results]}
    record = _benchmark.write_json(args.output / "bench.json", report)
    print(f"wrote {args.output / 'bench.json'}")
    if importlib.util.find_spec("matplotlib") is None:
        print("bench.png not written: matplotlib is not installed (pip install matplotlib)")
        return 0
    title = f"anyrope bench, median of {args.repeats} rounds\n{record['machine']['processor']}"
    chart(results, args.output / "bench.png", title)
    print(f"wrote {args.output / 'bench.png'}")
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
    commands.add_parser(
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
    ).set_defaults(run=_check)
    info = commands.add_parser(
        "info",
        help="versions, installed backends, devices and available fast paths",
        description=(
            "Print the versions of anyrope and the array libraries, which backends are "
            "usable, the devices they see, and which fast paths this machine can take "
            "(and why not). Exit code 0."
        ),
    )
    info.add_argument("--json", action="store_true", help="print one JSON object instead")
    info.set_defaults(run=_info)
    bench = commands.add_parser(
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
    bench.add_argument("--repeats", type=int, default=15, help="rounds (15)")
    for option, names in (("--cases", tuple(_benchmark.CASES)), ("--dtypes", _benchmark.DTYPES)):
        every = ",".join(names)
        said = f"comma-separated {option[2:]} (default all: {every})"
        bench.add_argument(option, default=every, help=said)
    add_output(bench, "folder for bench.json and bench.png, checked before any timing (.)")
    bench.set_defaults(run=_bench, usage=bench.format_usage())
    plot = commands.add_parser(
        "plot",
        help="plot the frequencies and wavelengths of a model config (scaled and unscaled)",
        description=(
            "Draw theta_i and the wavelength 2 pi / theta_i of every rotary pair for a "
            "Hugging Face config.json, with its frequency scaling next to the unscaled "
            "frequencies. Exit codes: 0 written, 2 bad arguments or config, "
            f"{EXIT_MISSING_PACKAGE} matplotlib missing."
        ),
    )
    plot.add_argument("--config", required=True, help="path to a Hugging Face config.json")
    add_output(
        plot,
        "folder for frequencies.png (frequencies-LAYER_TYPE.png with --layer-type; default: .)",
    )
    plot.add_argument(
        "--layer-type",
        help="the layer type to draw, for configs with RoPE settings per layer type "
        "(Gemma 3 and 4: full_attention, sliding_attention)",
    )
    plot.add_argument(
        "--seq-len",
        type=int,
        help="sequence length for length-dependent methods (dynamic, longrope); "
        "default: max_position_embeddings",
    )
    plot.set_defaults(run=_plot, usage=plot.format_usage())
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (141 when stdout's pipe was closed)."""
    return quiet_on_broken_pipe(build_parser(), argv)


def check_main(argv: Sequence[str] | None = None) -> int:
    """``python -m anyrope.check --write-reference PATH`` (maintainers); the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m anyrope.check",
        description="Write the reference digests of `python -m anyrope check` (maintainers).",
    )
    parser.add_argument("--write-reference", metavar="PATH", required=True, type=Path)
    parser.set_defaults(run=_write_reference)
    return quiet_on_broken_pipe(parser, argv)


def _write_reference(args: argparse.Namespace) -> int:
    check.write_reference(args.write_reference)
    print(f"wrote {args.write_reference}")
    return 0
