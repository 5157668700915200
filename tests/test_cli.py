"""``python -m anyrope check``: the table, and the exit status on a mismatch."""

from __future__ import annotations

import dataclasses
import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from anyrope.tools import _cli, check


def test_check_in_a_subprocess():
    result = subprocess.run(
        [sys.executable, "-m", "anyrope", "check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "reference: bits shipped in anyrope/_reference_bits.json" in lines[2]
    assert lines[3].split()[:7] == [
        "backend",
        "device",
        "dtype",
        "pairing",
        "path",
        "reference",
        "numpy",
    ]
    numpy_rows = [line for line in lines if line.startswith("numpy ")]
    assert len(numpy_rows) >= 6  # float16, float32, float64 at least, both pairings
    assert "FAIL" not in result.stdout
    assert "the same bits as the shipped reference and as NumPy here" in lines[-1]


def test_check_fails_on_a_mismatch(monkeypatch, capsys):
    real_backends = check.known_backends

    def one_bit_off(bits):
        flipped = bits.copy()
        flipped.flat[0] ^= 1
        return flipped

    def backends_with_a_wrong_numpy():
        found = real_backends()
        wrong = dataclasses.replace(found[0], to_bits=lambda y: one_bit_off(found[0].to_bits(y)))
        return [wrong, *found[1:]]

    monkeypatch.setattr(check, "known_backends", backends_with_a_wrong_numpy)
    assert _cli.main(["check"]) == 1
    captured = capsys.readouterr()
    assert "FAILED" in captured.err
    assert " NO " in captured.out


def test_bad_subcommand_exits_2(capsys):
    with pytest.raises(SystemExit) as info:
        _cli.main(["frobnicate"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_check_help():
    result = subprocess.run(
        [sys.executable, "-m", "anyrope", "check", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0
    assert "bit for bit" in result.stdout


def _docs_exit_codes():
    """(code, meaning) of each row of the table under "Exit status" in docs/cli.rst."""
    text = (Path(__file__).parents[1] / "docs" / "cli.rst").read_text()
    section = text.split("Exit status\n-----------\n", 1)[1]
    table = section.split("\n====", 2)[1].split("\n====", 1)[0]
    rows: list[list[str]] = []
    for line in table.splitlines()[1:]:
        first, _, rest = line.strip().partition(" ")
        if line[:1].isdigit():
            rows.append([first, rest.strip()])
        elif line.strip():
            rows[-1][1] += " " + line.strip()
    return [(int(code), meaning) for code, meaning in rows]


def test_exit_codes_agree_in_help_and_docs(capsys):
    assert _docs_exit_codes() == list(_cli.EXIT_CODES)
    with pytest.raises(SystemExit):
        _cli.main(["--help"])
    epilog = capsys.readouterr().out.split("exit codes:\n", 1)[1]
    codes = [int(line.split()[0]) for line in epilog.splitlines() if not line.startswith("     ")]
    assert codes == [code for code, _ in _cli.EXIT_CODES] == [0, 1, 2, 3, 141]
    assert " ".join(epilog.split()) == " ".join(
        f"{code} {meaning}" for code, meaning in _cli.EXIT_CODES
    )


def test_numba_compiles_first_looks_in_numba_cache_folders(monkeypatch, tmp_path):
    pytest.importorskip("numba")
    source = tmp_path / "src" / "kernels.py"
    source.parent.mkdir()
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args):
        if name == "anyrope._paths.numba_cpu.kernels":
            return importlib.machinery.ModuleSpec(name, None, origin=str(source))
        return real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    assert _cli._numba_compiles_first()
    cached = tmp_path / "cache" / "numba" / "some" / "folder"
    cached.mkdir(parents=True)
    (cached / "kernels.rotate-228.py311.nbi").touch()
    assert not _cli._numba_compiles_first()


def test_check_says_when_numba_compiles(monkeypatch, capsys):
    rows = check.run_check(backends=check.known_backends()[:1])
    monkeypatch.setattr(check, "run_check", lambda: rows)
    for first in (True, False):
        monkeypatch.setattr(_cli, "_numba_compiles_first", lambda first=first: first)
        assert _cli.main(["check"]) == 0
        said = "compiling anyrope's numba kernels for this machine" in capsys.readouterr().err
        assert said == first
