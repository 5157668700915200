"""benchmarks/gpu_proof.py without a GPU: its refusal, its steps, its summaries."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import anyrope
from benchmark_scripts import BENCHMARKS, load

SCRIPT = BENCHMARKS / "gpu_proof.py"

proof = load("gpu_proof")
bench_gpu = load("bench_gpu")
bench_gpu_launch = load("bench_gpu_launch")


def test_without_a_gpu_it_says_so_in_one_line(tmp_path: Path) -> None:
    if proof.gpu_absent() is None:
        pytest.skip("a GPU is here: run benchmarks/gpu_proof.py itself")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == proof.EXIT_NO_GPU
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("gpu_proof.py: no CUDA GPU on this machine (")
    assert not (tmp_path / "out").exists()


def test_gpu_absent_names_what_is_missing() -> None:
    reason = proof.gpu_absent(find_spec=lambda name: None)
    assert reason == "torch is not installed; CuPy is not installed"


def test_print_download_needs_no_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert proof.main(["--print-download", "--wheels", ".whl"]) == 0
    command = capsys.readouterr().out.strip()
    assert command.startswith("pip download --no-deps --only-binary=:all: --python-version 3.12")
    assert "-d .whl" in command
    assert all(wheel in command.split() for wheel in proof.WHEELS)


def test_arguments() -> None:
    args = proof.parse([])
    assert args.steps == list(proof.STEPS)
    assert not args.full_tests
    assert args.wheels == proof.ROOT / ".whl"
    args = proof.parse(["--steps", "memcheck", "tests-cupy", "--full-tests", "--timeout", "60"])
    assert args.steps == ["memcheck", "tests-cupy"]
    assert args.full_tests
    assert args.timeout == 60.0
    with pytest.raises(SystemExit):
        proof.parse(["--steps", "tests-everything"])


def test_step_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proof.shutil, "which", lambda tool: None)
    monkeypatch.setattr(proof, "_in_cuda_home", lambda tool: None)
    commands = proof.step_commands(proof.STEPS, out=tmp_path, full_tests=False, python="py")
    assert list(commands) == list(proof.STEPS)
    torch_cuda, extra = commands["tests-torch-cuda"]
    assert torch_cuda[:3] == ["py", "-m", "pytest"]
    assert torch_cuda[torch_cuda.index("--backend") + 1] == "torch-cuda"
    assert "tests/test_cuda_kernel.py" in torch_cuda
    assert extra == {}
    cupy, _ = commands["tests-cupy"]
    assert cupy[cupy.index("--backend") + 1] == "cupy-cuda"
    jax, extra = commands["tests-jax-gpu"]
    assert jax[-1] == "tests/test_jax.py"
    assert extra == {"JAX_PLATFORMS": "cuda,cpu"}
    assert commands["memcheck"] == ([], {})
    full, _ = proof.step_commands(["tests-cupy"], out=tmp_path, full_tests=True)["tests-cupy"]
    assert not any(arg.startswith("tests/") for arg in full)

    monkeypatch.setattr(proof.shutil, "which", lambda tool: f"/opt/cuda/bin/{tool}")
    memcheck, _ = proof.step_commands(["memcheck"], out=tmp_path, full_tests=False)["memcheck"]
    assert memcheck[:3] == ["/opt/cuda/bin/compute-sanitizer", "--tool", "memcheck"]
    assert memcheck[memcheck.index("--run") + 1] == "launches"


def test_run_step_statuses_and_figures(tmp_path: Path) -> None:
    env = proof.environment(None)
    (tmp_path / "decode-graphs.json").write_text(json.dumps({"decode": []}))
    ok = proof.run_step(
        "decode-graphs", [sys.executable, "-c", "print('fine')"], env, timeout=60, out=tmp_path
    )
    assert (ok.status, ok.tail.strip(), ok.data) == ("pass", "fine", {"decode": []})
    bad = proof.run_step(
        "tests-cupy", [sys.executable, "-c", "raise SystemExit(3)"], env, timeout=60, out=tmp_path
    )
    assert (bad.status, bad.data) == ("fail", {})
    slow = proof.run_step(
        "tests-cupy",
        [sys.executable, "-c", "import time; print('begun', flush=True); time.sleep(30)"],
        env,
        timeout=2,
        out=tmp_path,
    )
    assert slow.status == "timeout"
    assert "killed after 2 s" in slow.tail
    assert proof.run_step("memcheck", [], env, timeout=1, out=tmp_path).status == "skipped"


def test_environment_puts_src_and_wheels_first(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "fake_pkg-1.0-py3-none-any.whl", "w") as archive:
        archive.writestr("fake_pkg/__init__.py", "VALUE = 42\n")
    site = proof.unpack_wheels(wheels)
    assert site == wheels / "site"
    assert proof.unpack_wheels(tmp_path / "none") is None
    env = proof.environment(site)
    assert env["PYTHONPATH"].split(":")[:2] == [str(proof.ROOT / "src"), str(site)]
    done = subprocess.run(
        [sys.executable, "-c", "import fake_pkg, anyrope; print(fake_pkg.VALUE, anyrope.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    value, where = done.stdout.split()
    assert value == "42"
    assert where.startswith(str(proof.ROOT / "src"))


def test_summaries_from_fake_results(tmp_path: Path) -> None:
    bench = {
        "results": [
            {
                "case": "prefill",
                "dtype": "bf16",
                "impl": "copy (floor)",
                "us": 119.0,
                "fraction_of_copy": 1.0,
                "host_us": None,
            },
            {
                "case": "decode b64",
                "dtype": "bf16",
                "impl": "anyrope kernel (torch)",
                "us": 8.0,
                "fraction_of_copy": 0.9875,
                "host_us": 11.5,
            },
        ],
        "targets": ["PASS prefill bf16: 0.980 of the copy (target >= 0.97)"],
    }
    decode = {
        "decode": [
            {"form": "torch int offset", "host_us": 12.5, "device_us": 4.25, "graph": "same bits"}
        ],
        "scale": [{"line": "torch q.add_(1)", "host_us": 6.25}],
        "targets": ["PASS decode int offset: torch through the kernel +1.0 % vs CuPy"],
    }
    launch = {
        "device": "stand-in",
        "rows": [
            {
                "config": "interleaved pairs split",
                "case": "prefill interleaved",
                "dtype": "fp32",
                "registers": 48,
                "blocks per SM": 5,
                "fraction of copy": 0.9712,
            }
        ],
    }
    results = [
        proof.StepResult("tests-torch-cuda", "pass", ["pytest"], 61.0, "300 passed"),
        proof.StepResult("bench-prefill", "pass", ["bench"], 90.0, "", bench),
        proof.StepResult("decode-graphs", "pass", ["graphs"], 20.0, "", decode),
        proof.StepResult("bench-launch", "pass", ["launch"], 120.0, "", launch),
        proof.StepResult("memcheck", "fail", ["sanitizer"], 30.0, "Invalid __global__ read"),
    ]
    proof.write_summaries(tmp_path, results, {"device": "stand-in", "driver": "13000"})
    record = json.loads((tmp_path / "proof.json").read_text())
    assert record["passed"] is False
    assert record["machine"] == {"device": "stand-in", "driver": "13000"}
    assert [s["name"] for s in record["steps"]] == [r.name for r in results]
    assert record["steps"][1]["data"] == bench
    text = (tmp_path / "proof.md").read_text()
    assert "- device: stand-in" in text
    assert "| tests-torch-cuda | PASS | 61.0 |" in text
    assert "| memcheck | FAIL | 30.0 |" in text
    assert "| prefill | bf16 | copy (floor) | 119.0 | 1.00 | - |" in text
    assert "| decode b64 | bf16 | anyrope kernel (torch) | 8.0 | 0.99 | 11.5 |" in text
    assert "- PASS prefill bf16: 0.980 of the copy (target >= 0.97)" in text
    assert "| torch int offset | 12.5 | 4.25 | same bits |" in text
    assert "| for scale: torch q.add_(1) | 6.2 |  |  |" in text
    assert "- PASS decode int offset: torch through the kernel +1.0 % vs CuPy" in text
    assert "| interleaved pairs split | prefill interleaved | fp32 | 48 | 5 | 0.971 |" in text
    assert "## memcheck: fail" in text
    assert "Invalid __global__ read" in text
    assert "300 passed" not in text  # the output of a step that passed stays in the JSON


def test_gpu_benchmark_makes_its_rope_as_the_docs_say() -> None:
    """With ``max_positions`` (the decode cases draw their positions below it): a
    positions tensor on the device is then never read on the host (no synchronisation
    per call)."""
    for case in bench_gpu.CASES:
        rope = bench_gpu.make_rope(anyrope, case)
        assert rope.max_positions == (bench_gpu.MAX_POSITIONS if case.decode else case.seq)
        assert rope.rotary_dim == case.rotary_dim
    assert any(case.decode for case in bench_gpu.CASES)


def test_launch_configurations_edit_the_kernel_as_it_is() -> None:
    """Every edit a configuration of bench_gpu_launch.py makes finds its text in the
    kernel source (else that configuration would fail on the GPU machine)."""
    from anyrope._paths.cuda import _module

    source = _module.kernel_source()
    edits = [edit for config in bench_gpu_launch.CONFIGS for edit in config.edits]
    assert edits
    for text, replacement in edits:
        assert text in source
        assert replacement not in source


@pytest.mark.parametrize("tokens", [4, 8])
@pytest.mark.parametrize(
    ("units", "heads", "seq", "per_thread"),
    [(8, 40, 4096, 2), (16, 40, 4096, 4), (16, 40, 1, 4), (32, 3, 5, 1), (256, 40, 4096, 2)],
    ids=["bf16", "fp32", "fp32-decode", "few-heads", "wide-rows"],
)
def test_tokens_first_blocks_fit_a_launch(
    tokens: int, units: int, heads: int, seq: int, per_thread: int
) -> None:
    """The block shapes of the "tokens per block" configurations fit the kernel's
    ``__launch_bounds__`` and take as many tokens as asked where the rows let them."""
    from anyrope._paths.cuda import geometry

    x, y, z = bench_gpu_launch._tokens_first(geometry, tokens)(units, heads, seq, per_thread)
    assert x * y * z <= geometry.BLOCK
    assert z == max(1, min(seq, tokens, geometry.BLOCK // x))
    assert 1 <= y <= -(-heads // per_thread)  # no row of heads that no head needs


def test_launches_take_a_case_by_name() -> None:
    """``--launches`` runs one case of bench_gpu.py, named as that file names it."""
    with pytest.raises(SystemExit) as refused:
        bench_gpu_launch.main(["--launches", "1", "--case", "prefill bshd"])
    assert refused.value.code == 2


def test_a_later_run_keeps_the_steps_it_did_not_repeat(tmp_path: Path) -> None:
    """A machine lent a few minutes at a time runs a few steps per call into one folder."""
    first = [
        proof.StepResult("memcheck", "fail", ["sanitizer"], 30.0, "Invalid read"),
        proof.StepResult("tests-cupy", "pass", ["pytest"], 50.0),
    ]
    proof.write_summaries(tmp_path, proof.merged(tmp_path, first), {})
    again = [proof.StepResult("memcheck", "pass", ["sanitizer"], 31.0)]
    steps = proof.merged(tmp_path, again)
    assert [(s.name, s.status) for s in steps] == [("tests-cupy", "pass"), ("memcheck", "pass")]
    proof.write_summaries(tmp_path, steps, {})
    record = json.loads((tmp_path / "proof.json").read_text())
    assert record["passed"] is False  # steps are missing: not proven yet
    every = [proof.StepResult(name, "pass", [], 1.0) for name in proof.STEPS]
    proof.write_summaries(tmp_path, proof.merged(tmp_path, every), {})
    assert json.loads((tmp_path / "proof.json").read_text())["passed"] is True


def test_decode_targets_compare_the_libraries_in_device_time() -> None:
    rows = [
        {"form": "torch int offset", "host_us": 20.0, "device_us": 2.10},
        {"form": "torch positions tensor", "host_us": 21.0, "device_us": 2.40},
        {"form": "cupy int offset", "host_us": 29.0, "device_us": 2.05},
        {"form": "cupy positions tensor", "host_us": 30.0, "device_us": 2.20},
    ]
    assert proof.decode_targets(rows) == [
        "PASS decode int offset: torch through the kernel +2.4 % vs CuPy in device time "
        "(target <= +5 %)",
        "FAIL decode positions tensor: torch through the kernel +9.1 % vs CuPy in device "
        "time (target <= +5 %)",
    ]
    assert proof.decode_targets(rows[:2]) == []  # no CuPy


def test_gpu_targets_compare_the_libraries_on_prefill_only() -> None:
    # Decode timed call by call moves with the host: its libraries are compared in the
    # proof's decode-graphs step.
    results = [
        bench_gpu.Result(case, "fp16", impl, us, 1.0, None)
        for case in ("prefill", "decode b64")
        for impl, us in (
            (bench_gpu.COPY, 100.0),
            (bench_gpu.COMPILED, 110.0),
            (bench_gpu.KERNEL_TORCH, 101.0),
            (bench_gpu.KERNEL_CUPY, 100.0),
        )
    ]
    lines = bench_gpu._targets(results)
    assert [line for line in lines if "vs CuPy" in line] == [
        "PASS prefill fp16: torch through the kernel +1.0 % vs CuPy (target <= +5 %)"
    ]
