"""The test matrix: every (backend, device, dtype) anyrope knows, as pytest parameters.

Plain ``pytest`` runs every backend that is installed; a GPU backend that is missing or
has no device shows up as a skip with its reason. ``--backend NAME`` (repeatable) narrows the
run, e.g. ``pytest --backend torch-cpu``; nox sessions use it.
"""

from __future__ import annotations

from typing import Any

import pytest

from anyrope.tools._backends import DTYPES, Backend, known_backends

BACKENDS = known_backends()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        action="append",
        default=[],
        help="run only these backends (ids such as numpy-cpu, torch-cpu, torch-cuda, "
        "array_api_strict-cpu, cupy-cuda); default: all",
    )


def _selected(config: pytest.Config, backend: Backend) -> bool:
    """Chosen by ``--backend`` (all by default); a CPU library that is not installed is
    left out, while GPU backends always appear, as skips that say why they did not run."""
    if backend.device_label == "cpu" and backend.unavailable is not None:
        return False
    chosen = config.getoption("--backend")
    return not chosen or backend.id in chosen or backend.name in chosen


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``backend`` and ``backend_dtype`` (a (backend, dtype name) pair)."""
    config = metafunc.config
    if "backend_dtype" in metafunc.fixturenames:
        params = [
            pytest.param((b, d), id=f"{b.id}-{d}", marks=_marks(b, d))
            for b in BACKENDS
            if _selected(config, b)
            for d in DTYPES
        ]
        metafunc.parametrize("backend_dtype", params)
    elif "backend" in metafunc.fixturenames:
        params = [
            pytest.param(b, id=b.id, marks=_marks(b, None))
            for b in BACKENDS
            if _selected(config, b)
        ]
        metafunc.parametrize("backend", params)


def _marks(backend: Backend, dtype: str | None) -> list[Any]:
    marks: list[Any] = []
    if backend.device_label != "cpu":
        marks.append(pytest.mark.gpu)
    if backend.unavailable is not None:
        marks.append(pytest.mark.skip(reason=backend.unavailable))
    elif dtype is not None and dtype not in backend.dtype_names:
        marks.append(pytest.mark.skip(reason=f"{backend.name} has no {dtype}"))
    return marks
