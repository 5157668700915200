"""The ``info``, ``bench`` and ``plot`` subcommands, each run in a subprocess."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from anyrope.scaling import from_hf_config
from anyrope.tools import _benchmark, _cli
from anyrope.tools._cli import describe_plot
from subprocess_run import SOURCE, run_python

CONFIGS = Path(__file__).parent / "configs"
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def anyrope_cli(*args: str):
    return run_python("-m", "anyrope", *args)


@pytest.mark.parametrize("command", ["info", "bench", "plot"])
def test_help(command):
    result = anyrope_cli(command, "--help")
    assert result.returncode == 0, result.stderr
    assert f"usage: anyrope {command}" in result.stdout
    assert "Exit code" in result.stdout


def test_top_level_help_lists_subcommands():
    result = anyrope_cli("--help")
    assert result.returncode == 0
    for command in ("check", "info", "bench", "plot"):
        assert command in result.stdout


def test_info_text():
    result = anyrope_cli("info")
    assert result.returncode == 0, result.stderr
    for section in ("libraries:", "backends:", "devices:", "fast paths:"):
        assert section in result.stdout
    assert "numpy-cpu              usable" in result.stdout
    assert "blocked (cache-blocked CPU, NumPy): always available" in result.stdout


def test_info_json_agrees_with_this_process():
    result = anyrope_cli("info", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    libraries = report["libraries"]
    assert libraries["numpy"] == importlib.import_module("numpy").__version__
    torch_installed = importlib.util.find_spec("torch") is not None
    assert (libraries["torch"] is not None) == torch_installed
    backends = {row["backend"]: row for row in report["backends"]}
    assert backends["numpy-cpu"]["usable"]
    assert backends["torch-cpu"]["usable"] == torch_installed
    if not torch_installed:
        assert backends["torch-cpu"]["reason"] == "PyTorch is not installed"
    paths = {row["path"]: row for row in report["fast_paths"]}
    assert paths["blocked (cache-blocked CPU, PyTorch)"]["available"] == torch_installed


def test_bench_writes_json_and_chart(tmp_path):
    args = ("--repeats", "2", "--cases", "decode-1", "--dtypes", "float32,bfloat16")
    result = anyrope_cli("bench", *args, "--output", str(tmp_path))
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["command"] == f"anyrope bench {' '.join(args)} --output {tmp_path}"
    assert report["machine"]["cpu_count"] >= 1
    assert [(r["case"], r["dtype"]) for r in report["results"]] == [
        ("decode-1", "float32"),
        ("decode-1", "bfloat16"),
    ]
    torch_installed = importlib.util.find_spec("torch") is not None
    for case in report["results"]:
        assert case["q_shape"] == [1, 1, 32, 128]
        assert case["k_shape"] == [1, 1, 8, 128]
        assert case["rounds"] == 2
        names = [row["name"] for row in case["timings"]]
        assert names[0] == "copy"
        assert "anyrope numpy" in names
        assert ("anyrope torch" in names) == torch_installed
        assert case["timings"][0]["x_copy"] == 1.0
        for row in case["timings"]:
            assert row["q1_ms"] <= row["median_ms"] <= row["q3_ms"]
            assert row["calls"] >= 1
    assert "numpy naive" in report["results"][1]["left_out"]
    assert "anyrope numpy" in result.stdout
    assert "x copy" in result.stdout
    assert (tmp_path / "bench.png").exists() == HAS_MATPLOTLIB


def test_bench_refuses_unknown_cases(tmp_path):
    result = anyrope_cli("bench", "--cases", "prefill", "--output", str(tmp_path))
    assert result.returncode == 2
    assert "--cases takes a comma-separated list of prefill-1x4096," in result.stderr
    assert "got 'prefill'" in result.stderr
    assert not (tmp_path / "bench.json").exists()


@pytest.mark.parametrize("repeats", ["0", "-1"])
def test_bench_bad_repeats(repeats, tmp_path):
    result = anyrope_cli("bench", "--repeats", repeats, "--output", str(tmp_path))
    assert result.returncode == 2
    assert f"--repeats must be positive; got {repeats}" in result.stderr
    assert result.stderr.startswith("usage: anyrope bench")
    assert not (tmp_path / "bench.json").exists()


def test_bench_repeats_must_be_an_integer():
    result = anyrope_cli("bench", "--repeats", "many")
    assert result.returncode == 2
    assert "invalid int value: 'many'" in result.stderr


@pytest.mark.parametrize(
    "config",
    [
        "llama-3.1-8b.json",
        "gpt-neox-20b.json",
        "qwen2-vl-7b-instruct.json",
        "qwen2.5-7b-instruct-yarn.json",
    ],
)
def test_plot_config(config, tmp_path):
    result = anyrope_cli("plot", "--config", str(CONFIGS / config), "--output", str(tmp_path))
    if not HAS_MATPLOTLIB:
        assert result.returncode == 3
        assert "matplotlib" in result.stderr
        return
    assert result.returncode == 0, result.stderr
    png = tmp_path / "frequencies.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_missing_config(tmp_path):
    result = anyrope_cli("plot", "--config", str(tmp_path / "nope.json"))
    assert result.returncode == 2
    assert "cannot read --config" in result.stderr
    assert result.stderr.startswith("usage: anyrope plot")  # as docs/cli.rst says


def test_plot_invalid_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    result = anyrope_cli("plot", "--config", str(path))
    assert result.returncode == 2
    assert "is not valid JSON" in result.stderr
    assert result.stderr.startswith("usage: anyrope plot")


def test_plot_config_with_a_bad_value(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 4, "rope_theta": -1}))
    result = anyrope_cli("plot", "--config", str(path))
    assert result.returncode == 2
    assert "`base` must be a finite number greater than 1; got -1" in result.stderr


def test_plot_bad_seq_len():
    config = str(CONFIGS / "llama-3.1-8b.json")
    result = anyrope_cli("plot", "--config", config, "--seq-len", "0")
    assert result.returncode == 2
    assert "--seq-len must be positive; got 0" in result.stderr
    assert result.stderr.startswith("usage: anyrope plot")


def test_plot_needs_config():
    result = anyrope_cli("plot")
    assert result.returncode == 2
    assert "--config" in result.stderr


@pytest.mark.parametrize("args", [("info", "--json"), ("--help",)])
@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_stdout_pipe_closed_early_exits_quietly(args, unbuffered):
    """``anyrope info --json | head``: the reader goes away; exit 141 without a traceback.

    The read end is closed before the command prints: reading a few bytes first would
    race with a command that writes all it has in one write (and then never sees EPIPE).
    Block-buffered stdout fails at the final flush, unbuffered stdout at the print.
    """
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([SOURCE, os.environ.get("PYTHONPATH", "")]),
        "PYTHONUNBUFFERED": unbuffered,
    }
    with subprocess.Popen(
        [sys.executable, "-m", "anyrope", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        process.stdout.close()
        stderr = process.stderr.read().decode()
        code = process.wait(timeout=300)
    assert "Traceback" not in stderr, stderr
    assert "BrokenPipeError" not in stderr, stderr
    # argparse ignores an OSError from writing --help itself (then exits 0); a buffered
    # --help fails at anyrope's flush instead, like every print of a subcommand: 141.
    assert code in ((0, 141) if args == ("--help",) else (141,)), stderr


def _plot_content(name, seq_len=None):
    settings = from_hf_config(json.loads((CONFIGS / name).read_text()))
    return describe_plot(settings, seq_len)


def test_plot_names_m_rope_and_shades_its_sections():
    content = _plot_content("qwen2-vl-7b-instruct.json")
    assert "M-RoPE (temporal 16, height 24, width 24 pairs)" in content.title
    assert "default" not in content.title
    assert content.sections == [(0, 16, "temporal"), (16, 40, "height"), (40, 64, "width")]
    assert [label for _, label, _ in content.curves] == ["unscaled"]


def test_plot_yarn_separates_the_original_and_target_contexts():
    """Qwen2.5 repeats the original context as max_position_embeddings: the target is
    factor x original, and the label of a length-independent method has no seq_len."""
    content = _plot_content("qwen2.5-7b-instruct-yarn.json")
    assert content.contexts == [
        (32768, "original context = 32768", ":"),
        (131072, "target context = 131072 (factor 4 x original)", "--"),
    ]
    assert [label for _, label, _ in content.curves] == ["unscaled", "yarn"]
    assert "attention factor 1.139" in content.title


def test_plot_llama3_target_is_max_position_embeddings():
    content = _plot_content("llama-3.1-8b.json")
    assert [length for length, _, _ in content.contexts] == [8192, 131072]
    assert content.sections == []


def test_plot_labels_the_length_of_length_dependent_methods():
    settings = from_hf_config(
        {
            "hidden_size": 256,
            "num_attention_heads": 4,
            "max_position_embeddings": 2048,
            "rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
        }
    )
    content = describe_plot(settings, 8192)
    assert [label for _, label, _ in content.curves] == ["unscaled", "dynamic, seq_len=8192"]


GEMMA4 = {
    "model_type": "gemma4_text",
    "hidden_size": 2304,
    "num_attention_heads": 8,
    "head_dim": 256,
    "global_head_dim": 512,
    "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
    "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {
            "rope_type": "proportional",
            "partial_rotary_factor": 0.25,
            "rope_theta": 1e6,
        },
    },
    "max_position_embeddings": 131072,
}


def test_plot_a_config_with_layer_types(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GEMMA4))
    result = anyrope_cli("plot", "--config", str(path), "--output", str(tmp_path))
    assert result.returncode == 2
    assert "pass --layer-type, one of: sliding_attention, full_attention" in result.stderr
    result = anyrope_cli(
        "plot", "--config", str(path), "--output", str(tmp_path), "--layer-type", "full_attention"
    )
    if not HAS_MATPLOTLIB:
        assert result.returncode == 3
        return
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr
    png = tmp_path / "frequencies-full_attention.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_proportional_leaves_out_the_pairs_that_do_not_turn():
    settings = from_hf_config(GEMMA4, layer_type="full_attention")
    content = describe_plot(settings, None)
    assert "head_dim=512, rotary_dim=512, base=1e+06, proportional" in content.title
    (_, plain_label, _), (scaled, label, _) = content.curves
    assert plain_label == "unscaled"
    assert label == "proportional (192 pairs from 64 on do not turn)"
    assert np.isnan(scaled[64:]).all()
    assert np.all(scaled[:64] > 0)


GEMMA3_OLDER = {
    # google/gemma-3-4b-it's text settings as transformers 4.50 saved them: the base of
    # the sliding-window layers in `rope_local_base_freq`, the scaling for full attention.
    "model_type": "gemma3_text",
    "head_dim": 256,
    "hidden_size": 2560,
    "num_attention_heads": 8,
    "max_position_embeddings": 131072,
    "rope_local_base_freq": 10000.0,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    "rope_theta": 1000000.0,
}


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="plot needs matplotlib")
def test_plot_says_which_layer_type_it_draws(tmp_path):
    """An older Gemma 3 config gives two rotations: the plot asks which one and says
    which one it drew, with its own base and scaling."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GEMMA3_OLDER))
    result = anyrope_cli("plot", "--config", str(path), "--output", str(tmp_path))
    assert result.returncode == 2
    assert "pass --layer-type, one of: sliding_attention, full_attention" in result.stderr
    for layer_type, drawn in (
        ("sliding_attention", "base=10000, default"),
        ("full_attention", "base=1e+06, linear"),
    ):
        result = anyrope_cli(
            "plot", "--config", str(path), "--output", str(tmp_path), "--layer-type", layer_type
        )
        assert result.returncode == 0, result.stderr
        assert f"frequencies-{layer_type}.png: layer type {layer_type}, " in result.stdout
        assert drawn in result.stdout
    uniform = tmp_path / "uniform.json"
    uniform.write_text(
        json.dumps({"head_dim": 64, "layer_types": ["sliding_attention", "full_attention"]})
    )
    result = anyrope_cli("plot", "--config", str(uniform), "--output", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "every layer type (sliding_attention, full_attention): one set of settings" in (
        result.stdout
    )


def test_bench_output_that_is_a_file_fails_before_any_work(tmp_path):
    taken = tmp_path / "bench.json"
    taken.write_text("")
    result = anyrope_cli("bench", "--output", str(taken))
    assert result.returncode == 2
    assert f"argument --output: {taken} exists and is not a folder" in result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr


def test_plot_output_that_cannot_be_made(tmp_path):
    (tmp_path / "file").write_text("")
    folder = tmp_path / "file" / "plots"
    config = str(CONFIGS / "llama-3.1-8b.json")
    result = anyrope_cli("plot", "--config", config, "--output", str(folder))
    assert result.returncode == 2
    assert f"argument --output: cannot make the folder {folder}: " in result.stderr
    assert "Traceback" not in result.stderr


def _fake_measure_case(measured):
    """A stand-in for measure_case that reports its steps as the real one does."""

    def measure(case, dtype, rounds, progress=None):
        progress("warming up")
        for index in range(rounds):
            progress(f"round {index + 1} of {rounds}")
        measured.append((case, dtype))
        batch, seq = _benchmark.CASES[case]
        copy = _benchmark.Timing("copy", 1.0, 1.0, 1.0, 1.0, 1.0, 1)
        return _benchmark.CaseResult(
            case, dtype, (batch, seq, 32, 128), (batch, seq, 8, 128), rounds, 0.5, 0.5,
            (copy,), {},
        )  # fmt: skip

    return measure


def _without(monkeypatch, *modules):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name in modules else real_find_spec(name, *args),
    )
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)  # and `import` fails


def test_bench_leaves_out_bfloat16_without_ml_dtypes(monkeypatch, tmp_path, capsys):
    measured = []
    monkeypatch.setattr(_benchmark, "measure_case", _fake_measure_case(measured))
    _without(monkeypatch, "ml_dtypes")
    code = _cli.main(["bench", "--cases", "decode-1", "--output", str(tmp_path)])
    assert code == 0
    assert measured == [("decode-1", "float32"), ("decode-1", "float16"), ("decode-1", "float64")]
    assert "bfloat16 left out: it needs ml_dtypes" in capsys.readouterr().err
    results = json.loads((tmp_path / "bench.json").read_text())["results"]
    assert [r["dtype"] for r in results] == ["float32", "float16", "float64"]


def test_bench_bfloat16_alone_without_ml_dtypes_exits_3(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(_benchmark, "measure_case", _fake_measure_case([]))
    _without(monkeypatch, "ml_dtypes")
    code = _cli.main(["bench", "--dtypes", "bfloat16", "--output", str(tmp_path)])
    assert code == 3
    assert "bfloat16 left out: it needs ml_dtypes" in capsys.readouterr().err
    assert not (tmp_path / "bench.json").exists()


def test_bench_progress_counts_cases_and_warns_of_load(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(_benchmark, "measure_case", _fake_measure_case([]))
    _without(monkeypatch, "rich")
    cores = os.cpu_count()
    monkeypatch.setattr(os, "getloadavg", lambda: (cores + 1.5, 0.0, 0.0))
    args = ["--cases", "decode-1,decode-32", "--dtypes", "float32", "--repeats", "2"]
    assert _cli.main(["bench", *args, "--output", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert f"warning: the load average ({cores + 1.5:.2f}) exceeds the {cores} cores" in err
    lines = [line for line in err.splitlines() if line.startswith("case ")]
    assert len(lines) == 2
    assert re.fullmatch(r"case 1 of 2: decode-1 float32 \(\d+:\d\d elapsed\)", lines[0])
    assert re.fullmatch(r"case 2 of 2: decode-32 float32 \(\d+:\d\d elapsed\)", lines[1])


def test_bench_progress_bar_steps_through_every_round():
    pytest.importorskip("rich")
    updates = []

    class Bar:
        def add_task(self, description, total):
            updates.append(("total", total))
            return 7

        def update(self, task, description, completed):
            updates.append((description, completed))

    progress = _cli._Progress(2, 2, Bar())
    for index, name in enumerate(["decode-1 float32", "decode-32 float32"]):
        step = progress.case(index, name)
        for text in ("warming up", "round 1 of 2", "round 2 of 2"):
            step(text)
    assert updates == [
        ("total", 6),
        ("case 1 of 2: warming up", 0),
        ("case 1 of 2: round 1 of 2", 1),
        ("case 1 of 2: round 2 of 2", 2),
        ("case 2 of 2: warming up", 3),
        ("case 2 of 2: round 1 of 2", 4),
        ("case 2 of 2: round 2 of 2", 5),
    ]


def test_info_lists_what_check_tests_and_numba():
    report = json.loads(anyrope_cli("info", "--json").stdout)
    backends = [row["backend"] for row in report["backends"]]
    assert backends[-2:] == ["jax-cpu", "dask-cpu"]
    numba = report["libraries"]["numba"]
    assert (numba is not None) == (importlib.util.find_spec("numba") is not None)
