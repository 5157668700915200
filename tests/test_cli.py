"""``python -m anyrope check``: the table, and the exit status on a mismatch."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

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
