"""The test matrix. ``nox`` runs the default sessions on a CPU-only machine;
``nox -s tests-cupy tests-torch-cuda`` runs the GPU sessions on a machine with a device.

The matrix itself lives in pytest fixtures (tests/conftest.py): plain ``pytest`` runs every
backend that is installed, and each session here only chooses what is installed.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import nox

nox.needs_version = ">=2024.3.2"
nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

# The CPU build of PyTorch, from the index where PyTorch publishes its CPU builds. PyPI's
# torch for Linux is the CUDA build (about 20 nvidia wheels, several GB): the fallback for a
# machine that reaches only PyPI (or a mirror of it, where a local wheel folder may still
# provide the CPU build).
TORCH_VERSION = "2.13.0"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# The scaling formulas are pinned to this release (tests/test_transformers_parity.py).
TRANSFORMERS = "transformers==5.23.0"
# A peer checked against (tests/test_xpos.py, tests/test_axial.py, tests/test_peer_features.py);
# pure Python, installed after the CPU torch, so it never pulls a CUDA build.
ROTARY_EMBEDDING_TORCH = ("rotary-embedding-torch==0.9.1", "einops==0.8.2")
# torch.onnx.export(dynamo=True) and the runtime that checks its graphs' bits
# (tests/test_onnx.py, benchmarks/bench_export.py).
ONNX = ("onnx==1.23.2", "onnxscript==0.7.2", "onnxruntime==1.32.0")
# NVRTC of the CUDA 13 toolkit that nvcc comes from; CuPy compiles rope.cu with NVRTC.
NVRTC = "nvidia-cuda-nvrtc==13.5.37"
# The NVRTC of torch's CUDA (13.0), whose machine code differs: the SASS is checked for both.
NVRTC_TORCH = "nvidia-cuda-nvrtc==13.0.88"
# Disassembles what NVRTC compiles, for the checks on the order of loads in the SASS.
NVDISASM = "nvidia-cuda-nvdisasm==13.5.37"
# An array-API library that builds ONNX graphs, and the runtime that runs them (no torch).
NDONNX = ("ndonnx==0.23.0", "onnxruntime==1.32.0")
# The GPU sessions: PyPI's torch (built for one CUDA major version) and the CuPy of that
# same major version, with the toolkit wheels (NVRTC included) from its `ctk` extra.
TORCH_GPU = f"torch=={TORCH_VERSION}"
CUPY = {"12": "cupy-cuda12x[ctk]==14.2.0", "13": "cupy-cuda13x[ctk]==14.2.0"}
CUPY_WITHOUT_TORCH = CUPY["13"]


def _index_reachable(url: str) -> bool:
    """Whether ``url`` answers within seconds. pip retries an unreachable index with
    back-off for each package it looks up (two minutes for torch and its dependencies)."""
    try:
        with urllib.request.urlopen(url, timeout=10):
            return True
    except (OSError, ValueError):
        return False


def _install_torch_cpu(session: nox.Session) -> None:
    """torch's CPU build, alone first, so that what is installed after it keeps it."""
    if _index_reachable(f"{TORCH_CPU_INDEX}/torch/"):
        session.install("--index-url", TORCH_CPU_INDEX, f"torch=={TORCH_VERSION}+cpu")
        return
    session.warn(f"{TORCH_CPU_INDEX} is unreachable: torch=={TORCH_VERSION} from the package index")
    session.install(f"torch=={TORCH_VERSION}")


def _pytest(session: nox.Session, *args: str) -> None:
    session.run("pytest", *args, *session.posargs)


@nox.session(name="tests-numpy")
def tests_numpy(session: nox.Session) -> None:
    """NumPy alone: no torch, no array-api-strict, no numba (the blocked CPU path)."""
    session.install("-e", ".[test]")
    _pytest(session)


@nox.session(name="tests-torch")
def tests_torch(session: nox.Session) -> None:
    """PyTorch on the CPU with numba (the compiled CPU path), compared bitwise with the
    golden files and with NumPy, and against rotary-embedding-torch; torch.export, ONNX
    Runtime and DTensors on two processes."""
    _install_torch_cpu(session)
    session.install("-e", ".[test,numba]", *ROTARY_EMBEDDING_TORCH, *ONNX)
    _pytest(session, "--backend", "torch-cpu", "--backend", "numpy-cpu")


@nox.session(name="tests-strict")
def tests_strict(session: nox.Session) -> None:
    """array-api-strict: proves the public API uses nothing outside the standard."""
    session.install("-e", ".[test,strict]")
    _pytest(session, "--backend", "array_api_strict-cpu")


@nox.session(name="tests-jax")
def tests_jax(session: nox.Session) -> None:
    """JAX on the CPU: eager bits equal the golden files, ``jax.jit`` within one ulp."""
    session.install("-e", ".[test,jax,numba]")
    _pytest(
        session,
        "tests/test_jax.py",
        "tests/test_xpos.py",
        "tests/test_check.py",
        "tests/test_examples.py",
    )


@nox.session(name="tests-dask")
def tests_dask(session: nox.Session) -> None:
    """dask arrays, lazily and on a two-process ``distributed.LocalCluster``."""
    session.install("-e", ".[test,dask,numba]")
    _pytest(
        session,
        "tests/test_dask.py",
        "tests/test_xpos.py",
        "tests/test_check.py",
        "tests/test_examples.py",
    )


@nox.session(name="tests-onnx")
def tests_onnx(session: nox.Session) -> None:
    """Calls inside graphs: ndonnx graphs run by ONNX Runtime, and positions that refuse
    host reads (torch)."""
    _install_torch_cpu(session)
    session.install("-e", ".[test]", *NDONNX)
    _pytest(session, "tests/test_graph.py", "tests/test_examples.py")


# Prints the SIMD features NumPy dispatches to on this CPU, beyond its baseline.
_DISPATCHED = """
try:
    from numpy._core import _multiarray_umath as umath
except ImportError:
    from numpy.core import _multiarray_umath as umath
print(" ".join(name for name in umath.__cpu_dispatch__ if umath.__cpu_features__.get(name)))
"""


def _dispatch_levels(features: list[str]) -> list[tuple[str, dict[str, str]]]:
    """(label, environment) for each level this CPU has: everything, then without the
    AVX-512 groups, then NumPy's baseline (no AVX2 either).

    The same level is asked of PyTorch (``ATEN_CPU_CAPABILITY``) and of the code numba
    compiles (``NUMBA_CPU_NAME``: Haswell's AVX2 without AVX-512, then x86-64's SSE2;
    both without F16C as numba sees them, so float16 takes its integer conversion).
    """
    x86 = any(f.startswith(("AVX", "X86", "SSE")) for f in features)
    levels: list[tuple[str, dict[str, str]]] = [("native", {"NPY_DISABLE_CPU_FEATURES": ""})]
    avx512 = [f for f in features if "AVX512" in f or f == "X86_V4"]
    if avx512:
        env = {"NPY_DISABLE_CPU_FEATURES": " ".join(avx512)}
        if x86:
            env |= {"ATEN_CPU_CAPABILITY": "avx2", "NUMBA_CPU_NAME": "haswell"}
        levels.append(("no-avx512", env))
    if len(features) > len(avx512):
        env = {"NPY_DISABLE_CPU_FEATURES": " ".join(features)}
        if x86:
            env |= {"ATEN_CPU_CAPABILITY": "default", "NUMBA_CPU_NAME": "generic"}
        levels.append(("baseline", env))
    return levels


@nox.session(name="tests-dispatch")
def tests_dispatch(session: nox.Session) -> None:
    """The golden files, the host math and the compiled kernel once per SIMD level this
    CPU offers.

    NumPy picks its loops by CPU (and PyTorch its kernels, numba its instructions): the
    same bits must come out at every level, on this machine as on any other.
    """
    _install_torch_cpu(session)
    session.install("-e", ".[test,numba]")
    features = session.run("python", "-c", _DISPATCHED, silent=True).split()
    for label, env in _dispatch_levels(features):
        session.log(f"dispatch level {label}: {env}")
        session.run(
            "pytest",
            "tests/test_golden.py",
            "tests/test_hostmath.py",
            "tests/test_numba_path.py",
            "--backend",
            "numpy-cpu",
            "--backend",
            "torch-cpu",
            *session.posargs,
            env=env,
        )


@nox.session(name="tests-kernel")
def tests_kernel(session: nox.Session) -> None:
    """The CUDA kernel without a GPU: nvcc for sm_80 and sm_90, NVRTC as CuPy compiles it,
    the order of loads in the sm_90 SASS of two NVRTC versions, and the host harness that
    runs its index mapping and arithmetic on the CPU."""
    session.install("-e", ".[test]", NVRTC, NVDISASM)
    # The second NVRTC beside the first, not over it: the test finds it by its path.
    second = Path(session.create_tmp()) / "nvrtc-torch"
    session.install("--no-deps", "--target", str(second), NVRTC_TORCH)
    session.run(
        "pytest",
        "tests/test_cuda_source.py",
        "tests/test_cuda_sass.py",
        *session.posargs,
        env={"ANYROPE_NVRTC": str(second / "nvidia" / "cu13" / "lib" / "libnvrtc.so.13")},
    )


@nox.session(name="tests-hf")
def tests_hf(session: nox.Session) -> None:
    """transformers' own code as the oracle: its RoPE initialisers for every scaling
    method, every model family's rotary class and apply function, and its reading of
    each family's older config.json keys; and the porting guide applied to a Llama model."""
    _install_torch_cpu(session)
    session.install("-e", ".[test]", TRANSFORMERS)
    _pytest(
        session,
        "tests/test_porting_hf.py",
        "tests/test_transformers_parity.py",
        "tests/test_hf_families.py",
        "tests/test_hf_older_configs.py",
    )


@nox.session(name="tests-torch-cuda", default=False)
def tests_torch_cuda(session: nox.Session) -> None:
    """PyTorch on a CUDA device (needs a GPU machine); CuPy compiles the kernel path."""
    session.install("-e", ".[test]", TORCH_GPU)
    cuda = session.run("python", "-c", "import torch; print(torch.version.cuda or '')", silent=True)
    major = str(cuda).strip().split(".")[0]
    if major not in CUPY:
        session.error(f"{TORCH_GPU} is built for CUDA {cuda!r}; no pinned CuPy matches it")
    session.install(CUPY[major])
    _pytest(session, "--backend", "torch-cuda", "--backend", "numpy-cpu")


@nox.session(name="tests-cupy", default=False)
def tests_cupy(session: nox.Session) -> None:
    """CuPy on a CUDA device (needs a GPU machine)."""
    session.install("-e", ".[test]", CUPY_WITHOUT_TORCH)
    _pytest(session, "--backend", "cupy-cuda", "--backend", "numpy-cpu")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation (warnings and unresolved references are errors) and run
    every example in it (numba installed: the doctests import every module, the compiled
    kernels' too; JAX, dask and the CPU build of PyTorch for the pages' examples; the
    pinned transformers, whose families the model-families page lists)."""
    _install_torch_cpu(session)
    session.install("-e", ".[docs,numba,jax,dask]", TRANSFORMERS, *NDONNX)
    build = ("sphinx-build", "-n", "-W", "--keep-going", "-q")
    session.run(*build, "-b", "html", "docs", "docs/_build/html")
    session.run(*build, "-b", "doctest", "docs", "docs/_build/doctest")
    session.run("pytest", "--doctest-modules", "src/anyrope", "-p", "no:cacheprovider")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and formatting), import-linter (imports point down only) and numpydoc
    validation of the public API's docstrings."""
    session.install("ruff", "import-linter>=2.1", "numpydoc>=1.8", "-e", ".")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("lint-imports")
    session.run("python", "-m", "numpydoc", "lint", *PUBLIC_MODULES)


# The modules whose docstrings are the public API (re-exported by anyrope/__init__.py).
PUBLIC_MODULES = (
    "src/anyrope/__init__.py",
    "src/anyrope/_functional.py",
    "src/anyrope/_offsets.py",
    "src/anyrope/_rope.py",
    "src/anyrope/attention.py",
    "src/anyrope/linear_attention.py",
    "src/anyrope/sinusoidal.py",
    "src/anyrope/_weights.py",
    "src/anyrope/tools/check.py",
    "src/anyrope/scaling/__init__.py",
    "src/anyrope/scaling/axial.py",
    "src/anyrope/scaling/proportional.py",
    "src/anyrope/scaling/config.py",
    "src/anyrope/scaling/default.py",
    "src/anyrope/scaling/dynamic.py",
    "src/anyrope/scaling/hf.py",
    "src/anyrope/scaling/linear.py",
    "src/anyrope/scaling/llama3.py",
    "src/anyrope/scaling/longrope.py",
    "src/anyrope/scaling/ntk.py",
    "src/anyrope/scaling/yarn.py",
)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on src/, with the optional libraries that ship types installed."""
    _install_torch_cpu(session)
    session.install("-e", ".[strict,cli]", "mypy")
    session.run("mypy")
