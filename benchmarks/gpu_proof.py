"""One command that proves the CUDA path on a machine with a GPU, without a package index.

    python benchmarks/gpu_proof.py [--out benchmarks/results/gpu-proof] [--wheels .whl]
                                   [--steps STEP ...] [--full-tests] [--timeout SECONDS]
                                   [--deadline SECONDS] [--workers N]

Runs from a checkout of the repository (``src/`` is put on ``PYTHONPATH``: nothing is
installed), with what a GPU machine typically has (PyTorch with CUDA, CuPy, JAX with
CUDA, numba, pytest, compute-sanitizer) and the wheels of :data:`WHEELS`,
fetched beforehand on a machine that has an index into the ignored folder ``.whl``:

    python benchmarks/gpu_proof.py --print-download   # prints the pip download command

The wheels are unpacked into ``.whl/site`` (a wheel unpacked is a wheel installed)
and put on ``PYTHONPATH`` too. The steps, each in its own process, each with its time
limit; the timed ones (``bench-prefill``, ``decode-graphs``, ``bench-launch``) first and
alone on the device, then the others side by side (``--jobs``), each test step on
``--workers`` pytest-xdist processes where pytest-xdist is installed; a step still
waiting when ``--deadline`` seconds have passed is reported as skipped, so a machine
lent for a fixed time still gets its summaries:

- ``tests-torch-cuda``, ``tests-cupy``: the device tests (the golden bits, the kernel
  against the array-API path on NumPy) with ``--backend torch-cuda`` / ``cupy-cuda``;
  ``--full-tests`` runs every test file rather than the device-facing ones;
- ``tests-jax-gpu``: ``tests/test_jax.py`` with ``JAX_PLATFORMS=cuda,cpu`` (the GPU is
  JAX's default device; host callbacks need the CPU);
- ``bench-prefill``: ``benchmarks/bench_gpu.py`` (prefill for each dtype, layout and
  partial width against a device copy, decode, the peers);
- ``decode-graphs``: decode host time per call (beside a bare ``q.add_(1)`` and two
  ``torch.empty_like``, timed alike, for scale) and device time per call, and a CUDA
  graph captured and replayed for the int-offset and the positions-tensor forms, the
  replayed bits compared with eager calls;
- ``bench-launch``: ``benchmarks/bench_gpu_launch.py``, the prefill cases under every
  launch configuration and kernel edit it lists (the leads not shipped yet), each
  against a device copy;
- ``memcheck``: ``compute-sanitizer --tool memcheck`` on a few launches of every kind.

Writes ``proof.json`` (every step: command, exit status, seconds, the tail of its output
and its figures), ``proof.md`` (the same for a reader) and ``steps.log`` (every step's
whole output) under ``--out``, and exits 0
when every step of the run passed. Steps of an earlier run into the same ``--out`` that
this run did not repeat are kept: the proof can be run a few steps at a time. On a
machine without a CUDA GPU it says so in one line and exits 2, before running anything.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_gpu  # noqa: E402  (this file's folder, put on the path above)

#: The wheels the tests need that a GPU machine may lack (the pins of the CI machine;
#: ``numpy``, ``pytest``, ``ml_dtypes`` and ``mpmath`` come with torch and JAX). All are
#: pure Python but hypothesis, whose optional compiled wheel pip picks for the platform
#: it runs on (``--platform manylinux2014_aarch64`` fetches it for an ARM machine).
WHEELS = (
    "array-api-compat==1.16.0",
    "array-api-strict==2.6.1",
    "hypothesis==6.170.17",
    "sortedcontainers==2.4.0",
)

STEPS = (
    "tests-torch-cuda",
    "tests-cupy",
    "tests-jax-gpu",
    "bench-prefill",
    "decode-graphs",
    "bench-launch",
    "memcheck",
)

#: The steps that time the device: each runs alone, before the others.
TIMED = ("bench-prefill", "decode-graphs", "bench-launch")
#: The file each timed step writes its figures to, under ``--out`` (the others: NAME.json).
FIGURES = {"bench-prefill": "gpu.json", "bench-launch": "gpu-launch.json"}

# The test files that put arrays on a device; --full-tests runs them all.
DEVICE_TESTS = (
    "tests/test_cuda_kernel.py",
    "tests/test_golden.py",
    "tests/test_rope.py",
    "tests/test_errors.py",
    "tests/test_pipeline.py",
    "tests/test_axial.py",
    "tests/test_examples.py",
)

EXIT_NO_GPU = 2
TAIL_CHARS = 4000


@dataclass
class StepResult:
    """What one step did: ``status`` is pass, fail, timeout or skipped."""

    name: str
    status: str
    command: list[str]
    seconds: float
    tail: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    full: str = field(default="", repr=False, compare=False)


def download_command(folder: str = ".whl") -> str:
    """The pip command that fetches :data:`WHEELS` for Python 3.12 into ``folder``."""
    return (
        f"pip download --no-deps --only-binary=:all: --python-version 3.12 -d {folder} "
        + " ".join(WHEELS)
    )


def gpu_absent(find_spec: Callable[[str], Any] = importlib.util.find_spec) -> str | None:
    """Why this machine cannot run the proof (no CUDA GPU that torch or CuPy sees), or
    ``None`` when it can."""
    seen = []
    if find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            return None
        seen.append(f"torch {torch.__version__}: torch.cuda.is_available() is False")
    else:
        seen.append("torch is not installed")
    if find_spec("cupy") is not None:
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() > 0:
                return None
            seen.append("CuPy sees no device")
        except Exception as error:  # no driver, no libcuda: no GPU as far as CuPy goes
            seen.append(f"CuPy: {type(error).__name__}")
    else:
        seen.append("CuPy is not installed")
    return "; ".join(seen)


def unpack_wheels(folder: Path) -> Path | None:
    """Unpack every ``*.whl`` of ``folder`` into ``folder/site`` (once per wheel); the
    site folder, or ``None`` when there is no wheel."""
    wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    if not wheels:
        return None
    site = folder / "site"
    site.mkdir(exist_ok=True)
    for wheel in wheels:
        marker = site / f".{wheel.name}.unpacked"
        if not marker.exists():
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(site)
            marker.touch()
    return site


def environment(site: Path | None) -> dict[str, str]:
    """The environment of every step: ``src`` and the unpacked wheels first on the path."""
    paths = [str(ROOT / "src"), *([str(site)] if site is not None else [])]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [env.get("PYTHONPATH")])])
    # JAX takes 75 % of the device's memory at its first array unless told otherwise.
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    return env


def step_commands(
    names: Sequence[str],
    *,
    out: Path,
    full_tests: bool,
    python: str = sys.executable,
    workers: int = 0,
) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The command of each step in ``names`` and what it adds to the environment; a step
    that cannot run here (no compute-sanitizer) gets an empty command. ``workers`` > 0
    spreads each test step over that many pytest-xdist processes."""
    # pytest-benchmark, where installed, warns under xdist, and the tests turn warnings
    # into errors.
    pytest = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:benchmark", "-rfE"]
    if workers > 0:
        pytest += ["-n", str(workers)]
    tests = [] if full_tests else list(DEVICE_TESTS)
    script = str(Path(__file__).resolve())
    sanitizer = shutil.which("compute-sanitizer") or _in_cuda_home("compute-sanitizer")
    commands: dict[str, tuple[list[str], dict[str, str]]] = {
        "tests-torch-cuda": ([*pytest, "--backend", "torch-cuda", *tests], {}),
        "tests-cupy": ([*pytest, "--backend", "cupy-cuda", *tests], {}),
        # The CPU stays listed: host callbacks need a CPU device.
        "tests-jax-gpu": ([*pytest, "tests/test_jax.py"], {"JAX_PLATFORMS": "cuda,cpu"}),
        "bench-prefill": (
            [python, str(ROOT / "benchmarks" / "bench_gpu.py"), "--out", str(out)],
            {},
        ),
        "decode-graphs": ([python, script, "--run", "decode-graphs", "--out", str(out)], {}),
        "bench-launch": (
            [python, str(ROOT / "benchmarks" / "bench_gpu_launch.py"), "--out", str(out)],
            {},
        ),
        "memcheck": (
            []
            if sanitizer is None
            else [
                sanitizer,
                "--tool",
                "memcheck",
                # Memory errors only: torch and CuPy probe the driver with calls that fail.
                "--report-api-errors",
                "no",
                "--error-exitcode",
                "1",
                python,
                script,
                "--run",
                "launches",
                "--out",
                str(out),
            ],
            {},
        ),
    }
    return {name: commands[name] for name in names}


def _in_cuda_home(tool: str) -> str | None:
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / tool).is_file():
            return str(Path(home) / "bin" / tool)
    return None


def run_step(
    name: str, command: list[str], env: dict[str, str], *, timeout: float, out: Path
) -> StepResult:
    """Run one step in its own process, in the repository root; its figures are the JSON
    it wrote as ``out/NAME.json`` (or the file :data:`FIGURES` names)."""
    if not command:
        return StepResult(name, "skipped", [], 0.0, "compute-sanitizer not found on PATH")
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command,
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        status = "pass" if done.returncode == 0 else "fail"
        text = done.stdout + done.stderr
    except subprocess.TimeoutExpired as expired:
        status = "timeout"
        text = _text(expired.stdout) + _text(expired.stderr) + f"\n(killed after {timeout} s)"
    seconds = time.perf_counter() - start
    figures = out / FIGURES.get(name, f"{name}.json")
    data = json.loads(figures.read_text()) if figures.is_file() else {}
    return StepResult(name, status, command, round(seconds, 1), text[-TAIL_CHARS:], data, text)


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def machine() -> dict[str, str]:
    """The device, driver and library versions (what a figure needs beside it)."""
    info = {"python": platform.python_version(), "host": platform.node()}
    if importlib.util.find_spec("torch") is not None:
        import torch

        info["torch"] = torch.__version__
        info["torch cuda"] = str(torch.version.cuda)
        if torch.cuda.is_available():
            info["device"] = torch.cuda.get_device_name()
            major, minor = torch.cuda.get_device_capability()
            info["compute capability"] = f"{major}.{minor}"
    for name in ("cupy", "jax", "numba", "numpy"):
        if importlib.util.find_spec(name) is not None:
            module = __import__(name)
            info[name] = str(module.__version__)
    if "cupy" in info:
        import cupy

        try:
            info["driver"] = str(cupy.cuda.runtime.driverGetVersion())
            info["nvrtc"] = ".".join(map(str, cupy.cuda.nvrtc.getVersion()))
        except Exception as error:  # reported, never fatal: the steps say what failed
            info["driver"] = f"unknown ({type(error).__name__})"
    return info


def summary_markdown(results: Sequence[StepResult], info: dict[str, str]) -> str:
    """The proof for a reader: the machine, one line per step, the figures, the failures."""
    lines = ["# anyrope GPU proof", ""]
    lines += [f"- {key}: {value}" for key, value in info.items()]
    lines += [
        "",
        *_table(
            ("step", "status", "seconds"),
            [(r.name, r.status.upper(), f"{r.seconds:.1f}") for r in results],
        ),
    ]
    for r in results:
        if not r.data:
            continue
        if r.name == "bench-prefill":
            lines += ["", "## Prefill and decode against a device copy", ""]
            lines += [bench_gpu.table([bench_gpu.Result(**d) for d in r.data.get("results", [])])]
        elif r.name == "decode-graphs":
            lines += ["", "## Decode host and device time, CUDA graphs", ""]
            rows = [
                (d["form"], f"{d['host_us']:.1f}", f"{d['device_us']:.2f}", d["graph"])
                for d in r.data.get("decode", [])
            ]
            rows += [
                (f"for scale: {d['line']}", f"{d['host_us']:.1f}", "", "")
                for d in r.data.get("scale", [])
            ]
            header = ("form", "host us per call", "device us per call", "graph replay")
            lines += _table(header, rows)
        elif r.name == "bench-launch":
            lines += ["", "## Launch configurations against a device copy", ""]
            header = ("configuration", "case", "dtype", "registers", "blocks per SM", "fraction")
            lines += _table(
                header,
                [
                    (
                        d["config"],
                        d["case"],
                        d["dtype"],
                        d["registers"],
                        d["blocks per SM"],
                        f"{d['fraction of copy']:.3f}",
                    )
                    for d in r.data.get("rows", [])
                ],
            )
        if r.data.get("targets"):
            lines += ["", *[f"- {t}" for t in r.data["targets"]]]
    failed = [r for r in results if r.status != "pass"]
    for r in failed:
        lines += ["", f"## {r.name}: {r.status}", "", "```", r.tail.strip(), "```"]
    return "\n".join(lines) + "\n"


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A Markdown table, line by line."""
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(map(str, row)) + " |" for row in rows),
    ]


def merged(out: Path, results: Sequence[StepResult]) -> list[StepResult]:
    """``results`` with the steps of an earlier run into the same folder that this run
    did not repeat (a machine lent for a few minutes at a time runs some steps per
    call), in the order of :data:`STEPS`."""
    earlier = out / "proof.json"
    steps = (
        {}
        if not earlier.is_file()
        else {s["name"]: StepResult(**s) for s in json.loads(earlier.read_text())["steps"]}
    )
    steps.update({r.name: r for r in results})
    return sorted(steps.values(), key=lambda r: STEPS.index(r.name))


def write_summaries(out: Path, results: Sequence[StepResult], info: dict[str, str]) -> None:
    """``out/proof.json`` and ``out/proof.md``."""
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "command": " ".join(["python", *sys.argv]),
        "machine": info,
        "passed": all(r.status == "pass" for r in results) and len(results) == len(STEPS),
        "steps": [{k: v for k, v in asdict(r).items() if k != "full"} for r in results],
    }
    (out / "proof.json").write_text(json.dumps(record, indent=2) + "\n")
    (out / "proof.md").write_text(summary_markdown(results, info))


# The steps run in this file's own processes (--run NAME): they import torch and CuPy.

DECODE = {"batch": 64, "q_heads": 32, "k_heads": 8, "head_dim": 128, "max_positions": 4096}
GRAPH_CALLS = 32  # calls captured in one graph, for the device time per call


def decode_graphs(out: Path) -> None:
    """Decode as the docs tell users to call it (``RoPE(128, max_positions=4096)``),
    torch bfloat16 and CuPy float16: host time per call (back to back, no sync), device
    time per call (a graph of :data:`GRAPH_CALLS` calls replayed), and a graph captured
    once and replayed with new inputs, its bits compared with an eager call; and the
    host time of a bare torch operation and of two outputs' allocation, for scale."""
    import torch

    import anyrope

    rope = anyrope.RoPE(DECODE["head_dim"], max_positions=DECODE["max_positions"])
    b, h, kh, d = (DECODE[k] for k in ("batch", "q_heads", "k_heads", "head_dim"))
    generator = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(b, 1, h, d, generator=generator).to(torch.bfloat16).cuda()
    k = torch.randn(b, 1, kh, d, generator=generator).to(torch.bfloat16).cuda()
    p = torch.randint(0, DECODE["max_positions"], (b, 1), generator=generator).cuda()
    forms: list[tuple[str, Callable[[], Any], Callable[[], None]]] = [
        ("torch int offset", lambda: rope(q, k, positions=1000, impl="cuda"), _no_change),
        ("torch positions tensor", lambda: rope(q, k, positions=p, impl="cuda"), _refill(p, q)),
    ]
    if importlib.util.find_spec("cupy") is not None:
        import cupy

        qc = cupy.asarray(q.float().half())
        kc = cupy.asarray(k.float().half())
        pc = cupy.asarray(p)
        forms += [
            ("cupy int offset", lambda: rope(qc, kc, positions=1000, impl="cuda"), _no_change),
            (
                "cupy positions tensor",
                lambda: rope(qc, kc, positions=pc, impl="cuda"),
                _refill(pc, qc),
            ),
        ]
    rows = [_decode_form(name, call, change) for name, call, change in forms]
    # What any call from Python pays on this host, timed as the forms are: the scale that
    # their host time is read against (it varies from one machine, and day, to another).
    bare = torch.zeros_like(q)
    scale = [
        {"line": "torch q.add_(1)", "host_us": bench_gpu.host_us(torch, lambda: bare.add_(1), 500)},
        {
            "line": "two torch.empty_like (q, k)",
            "host_us": bench_gpu.host_us(
                torch, lambda: (torch.empty_like(q), torch.empty_like(k)), 500
            ),
        },
    ]
    record = {"decode": rows, "scale": scale, "targets": decode_targets(rows), **DECODE}
    (out / "decode-graphs.json").write_text(json.dumps(record, indent=2))
    failed = [r["form"] for r in rows if r["graph"] != "same bits"]
    if failed:
        sys.exit(f"graph replay differs from eager calls for: {', '.join(failed)}")


def decode_targets(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Torch tensors within 5 % of CuPy arrays through the kernel, per form, in device
    time per call (a graph replayed: a decode kernel of a few microseconds timed call by
    call moves with the host that launches it)."""
    device = {row["form"]: row["device_us"] for row in rows}
    lines = []
    for form in ("int offset", "positions tensor"):
        torch_us, cupy_us = device.get(f"torch {form}"), device.get(f"cupy {form}")
        if torch_us is None or cupy_us is None:
            continue
        gap = torch_us / cupy_us - 1.0
        lines.append(
            f"{'PASS' if gap <= 0.05 else 'FAIL'} decode {form}: torch through the kernel "
            f"{100 * gap:+.1f} % vs CuPy in device time (target <= +5 %)"
        )
    return lines


def _no_change() -> None:
    """The int-offset form's replay reads the same q and k."""


def _refill(positions: Any, q: Any) -> Callable[[], None]:
    """New positions and a new q written in place: the replay must read them."""

    def change() -> None:
        positions[...] = (positions + 7) % DECODE["max_positions"]
        q[...] = q * 0.5 + 1

    return change


def _decode_form(name: str, call: Callable[[], Any], change: Callable[[], None]) -> dict[str, Any]:
    """Host and device time per call of one form, and whether its graph replays right."""
    import torch

    library = "cupy" if name.startswith("cupy") else "torch"
    host = bench_gpu.host_us(torch, call, 500)
    profile = _host_profile(call, 500)
    capture, replay, elapsed = _graph_api(library)
    graph, outputs = capture(lambda: [call() for _ in range(GRAPH_CALLS)])
    device_us = 1000.0 * elapsed(replay, graph) / GRAPH_CALLS
    change()
    # The change ran on the caller's stream; the replay may be on another (CuPy's capture
    # stream does not wait for the legacy default stream).
    torch.cuda.synchronize()
    replay(graph)
    torch.cuda.synchronize()
    want = call()
    got = outputs[-1]
    same = all(_bits(a) == _bits(b) for a, b in zip(got, want, strict=True))
    return {
        "form": name,
        "host_us": host,
        "device_us": device_us,
        "graph": "same bits" if same else "DIFFERENT bits",
        "host profile": profile,
    }


def _host_profile(call: Callable[[], Any], calls: int, rows: int = 30) -> list[str]:
    """Where the host time of ``calls`` calls goes: the ``rows`` functions that spend the
    most time themselves (cProfile, so each figure is inflated alike)."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        call()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(rows)
    return [line for line in text.getvalue().splitlines() if line.strip()]


def _bits(x: Any) -> bytes:
    if type(x).__module__.startswith("torch"):
        return bytes(x.view(torch_uint(x)).cpu().numpy().tobytes())
    return bytes(x.get().tobytes())


def torch_uint(x: Any) -> Any:
    import torch

    return {2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]


def _graph_api(
    library: str,
) -> tuple[Callable[..., Any], Callable[[Any], None], Callable[..., float]]:
    """(capture, replay, milliseconds of one replay) for torch or CuPy graphs."""
    import torch

    if library == "torch":

        def capture(body: Callable[[], Any]) -> tuple[Any, Any]:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                body()  # warm up on a side stream, as torch asks before a capture
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                outputs = body()
            return graph, outputs

        def replay(graph: Any) -> None:
            graph.replay()

        def elapsed(run: Callable[[Any], None], graph: Any) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            run(graph)
            start.record()
            for _ in range(10):
                run(graph)
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) / 10

        return capture, replay, elapsed
    import cupy

    def cupy_capture(body: Callable[[], Any]) -> tuple[Any, Any]:
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            body()
            stream.synchronize()
            stream.begin_capture()
            outputs = body()
            graph = stream.end_capture()
        return (graph, stream), outputs

    def cupy_replay(handle: Any) -> None:
        graph, stream = handle
        graph.launch(stream)
        stream.synchronize()

    def cupy_elapsed(run: Callable[[Any], None], handle: Any) -> float:
        graph, stream = handle
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        graph.launch(stream)
        start.record(stream)
        for _ in range(10):
            graph.launch(stream)
        end.record(stream)
        end.synchronize()
        return float(cupy.cuda.get_elapsed_time(start, end)) / 10

    return cupy_capture, cupy_replay, cupy_elapsed


def launches(out: Path) -> None:
    """A few launches of every kind for compute-sanitizer: vector and scalar variants,
    interleaved, partial rotary, strided views, a positions tensor with a position past
    the tables (NaN, never an out-of-bounds read), torch and CuPy."""
    import torch

    import anyrope

    rope = anyrope.RoPE(64, rotary_dim=32, max_positions=256)
    pairs = anyrope.RoPE(64, interleaved=True, max_positions=256)
    x = torch.randn(2, 16, 4, 64, device="cuda")
    positions = torch.arange(32, device="cuda").reshape(2, 16) * 11  # some past 256
    done = []
    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
        xd = x.to(dtype).contiguous()
        unaligned = torch.zeros(2, 16, 4, 65, dtype=dtype, device="cuda")[..., 1:]
        unaligned.copy_(xd)
        done.append(rope(xd, xd[:, :, :2], positions, impl="cuda"))
        done.append(pairs.rotate(xd, 5, impl="cuda"))
        done.append(rope.rotate(xd[:, ::2], 3, impl="cuda"))
        done.append(rope.rotate(xd.transpose(1, 2), positions, layout="bhsd", impl="cuda"))
        done.append(rope.rotate(unaligned, positions, impl="cuda"))  # rows off 16-byte boundaries
        done.append(pairs.rotate(xd.clone(), positions, inplace=True, impl="cuda"))
    if importlib.util.find_spec("cupy") is not None:
        import cupy

        xc = cupy.asarray(x)
        done.append(rope(xc, xc[:, :, :2], cupy.asarray(positions), impl="cuda"))
    torch.cuda.synchronize()
    (out / "launches.json").write_text(json.dumps({"launches": len(done)}) + "\n")


INTERNAL = {"decode-graphs": decode_graphs, "launches": launches}


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu-proof")
    parser.add_argument("--wheels", type=Path, default=ROOT / ".whl")
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS))
    parser.add_argument("--full-tests", action="store_true", help="every test file")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per step")
    parser.add_argument(
        "--deadline", type=float, default=None, help="seconds for the whole run (none by default)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="pytest-xdist processes per test step (0: none, as without pytest-xdist)",
    )
    parser.add_argument("--jobs", type=int, default=4, help="untimed steps run side by side")
    parser.add_argument("--print-download", action="store_true", help="print the pip command")
    parser.add_argument("--run", choices=sorted(INTERNAL), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.print_download:
        print(download_command(os.path.relpath(args.wheels)))
        return 0
    absent = gpu_absent()
    if absent is not None:
        print(f"gpu_proof.py: no CUDA GPU on this machine ({absent})", file=sys.stderr)
        return EXIT_NO_GPU
    args.out.mkdir(parents=True, exist_ok=True)
    if args.run:
        INTERNAL[args.run](args.out)
        return 0
    env = environment(unpack_wheels(args.wheels))
    workers = args.workers if importlib.util.find_spec("xdist") is not None else 0
    commands = step_commands(args.steps, out=args.out, full_tests=args.full_tests, workers=workers)
    end = None if args.deadline is None else time.monotonic() + args.deadline
    log = args.out / "steps.log"
    log.write_text("")

    def step(name: str) -> StepResult:
        command, extra = commands[name]
        left = args.timeout if end is None else min(args.timeout, end - time.monotonic())
        if left <= 0:
            return StepResult(name, "skipped", command, 0.0, "the run's --deadline had passed")
        print(f"gpu_proof.py: {name} ...", flush=True)
        result = run_step(name, command, env | extra, timeout=left, out=args.out)
        print(f"gpu_proof.py: {name} {result.status} in {result.seconds:.0f} s", flush=True)
        with log.open("a") as f:
            f.write(f"===== {name}: {result.status} =====\n{result.full}\n")
        return result

    results = [step(name) for name in commands if name in TIMED]
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results += pool.map(step, [name for name in commands if name not in TIMED])
    write_summaries(args.out, merged(args.out, results), machine())
    print(f"wrote {args.out / 'proof.json'}, {args.out / 'proof.md'} and {log}")
    return 0 if all(r.status == "pass" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
