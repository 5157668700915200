"""The test matrix. ``nox`` runs the default sessions on a CPU-only machine;
``nox -s tests-cupy tests-torch-cuda`` runs the GPU sessions on a machine with a device.

The matrix itself lives in pytest fixtures (tests/conftest.py): plain ``pytest`` runs every
backend that is installed, and each session here only chooses what is installed.
"""

from __future__ import annotations

import nox

nox.needs_version = ">=2024.3.2"
nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

# The CPU build of PyTorch; an unpinned torch pulls a multi-GB CUDA build.
TORCH_CPU = "torch==2.13.0"
# The scaling formulas are pinned to this release (tests/test_transformers_parity.py).
TRANSFORMERS = "transformers==5.23.0"
# NVRTC of the CUDA 13 toolkit that nvcc comes from; CuPy compiles rope.cu with NVRTC.
NVRTC = "nvidia-cuda-nvrtc==13.5.37"


def _pytest(session: nox.Session, *args: str) -> None:
    session.run("pytest", *args, *session.posargs)


@nox.session(name="tests-numpy")
def tests_numpy(session: nox.Session) -> None:
    """NumPy alone: no torch, no array-api-strict installed."""
    session.install("-e", ".[test]")
    _pytest(session)


@nox.session(name="tests-torch")
def tests_torch(session: nox.Session) -> None:
    """PyTorch on the CPU, compared bitwise with the golden files."""
    session.install("-e", ".[test]", TORCH_CPU)
    _pytest(session, "--backend", "torch-cpu", "--backend", "numpy-cpu")


@nox.session(name="tests-strict")
def tests_strict(session: nox.Session) -> None:
    """array-api-strict: proves the public API uses nothing outside the standard."""
    session.install("-e", ".[test,strict]")
    _pytest(session, "--backend", "array_api_strict-cpu")


@nox.session(name="tests-jax")
def tests_jax(session: nox.Session) -> None:
    """JAX on the CPU: eager bits equal the golden files, ``jax.jit`` within one ulp."""
    session.install("-e", ".[test,jax]")
    _pytest(session, "tests/test_jax.py", "tests/test_examples.py")


@nox.session(name="tests-dask")
def tests_dask(session: nox.Session) -> None:
    """dask arrays, lazily and on a two-process ``distributed.LocalCluster``."""
    session.install("-e", ".[test,dask]")
    _pytest(session, "tests/test_dask.py", "tests/test_examples.py")


@nox.session(name="tests-kernel")
def tests_kernel(session: nox.Session) -> None:
    """The CUDA kernel without a GPU: nvcc for sm_80 and sm_90, NVRTC as CuPy compiles it,
    and the host harness that runs its index mapping and arithmetic on the CPU."""
    session.install("-e", ".[test]", NVRTC)
    _pytest(session, "tests/test_cuda_source.py")


@nox.session(name="tests-hf", default=False)
def tests_hf(session: nox.Session) -> None:
    """transformers' own RoPE initialisers as the oracle for every scaling method."""
    session.install("-e", ".[test]", TORCH_CPU, TRANSFORMERS)
    _pytest(session, "tests/test_transformers_parity.py")


@nox.session(name="tests-torch-cuda", default=False)
def tests_torch_cuda(session: nox.Session) -> None:
    """PyTorch on a CUDA device (needs a GPU machine); CuPy compiles the kernel path."""
    session.install("-e", ".[test]", "torch", "cupy-cuda12x")
    _pytest(session, "--backend", "torch-cuda", "--backend", "numpy-cpu")


@nox.session(name="tests-cupy", default=False)
def tests_cupy(session: nox.Session) -> None:
    """CuPy on a CUDA device (needs a GPU machine)."""
    session.install("-e", ".[test]", "cupy-cuda12x")
    _pytest(session, "--backend", "cupy-cuda", "--backend", "numpy-cpu")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation (warnings are errors) and run every example in it."""
    session.install("-e", ".[docs]")
    build = ("sphinx-build", "-W", "--keep-going", "-q")
    session.run(*build, "-b", "html", "docs", "docs/_build/html")
    session.run(*build, "-b", "doctest", "docs", "docs/_build/doctest")
    session.run("pytest", "--doctest-modules", "src/anyrope", "-p", "no:cacheprovider")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on src/, with the optional libraries that ship types installed."""
    session.install("-e", ".[strict,cli]", "mypy", TORCH_CPU)
    session.run("mypy")
