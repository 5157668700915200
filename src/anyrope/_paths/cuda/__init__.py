"""The CUDA path: one templated RawKernel (``rope.cu``) for CuPy arrays and torch CUDA tensors.

Nothing here imports CuPy or torch at import time; :func:`run` does so on first use.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import sys
import warnings

import array_api_compat

from ..._namespace import Array, device_of
from ..._plan import Plan
from . import dispatch

NAME = "cuda"
CHECKS_POSITIONS = True
TABLES = "rows"
"""The kernel checks the values of a position array as it reads them (a position the
tables do not hold gives NaN): the host need not read them, which would wait for the
device."""


def cuda_array(x: Array) -> bool:
    """True for a CuPy array or a PyTorch tensor on a CUDA device."""
    if array_api_compat.is_cupy_array(x):
        return True
    return bool(array_api_compat.is_torch_array(x) and x.is_cuda)


@functools.cache
def _cupy_installed() -> bool:
    # Asked on every call with torch CUDA tensors: search sys.path once.
    return importlib.util.find_spec("cupy") is not None


def rejects(plan: Plan) -> str | None:
    """Device arrays of CuPy or torch, CuPy installed, and one position stream."""
    if not all(cuda_array(x) for x in plan.arrays):
        kinds = ", ".join(
            sorted(
                {
                    f"{type(x).__module__.split('.')[0]} arrays on device {device_of(x)}"
                    for x in plan.arrays
                }
            )
        )
        return f"needs CuPy arrays or PyTorch CUDA tensors; got {kinds}"
    if not _cupy_installed():
        return f"needs CuPy ({cupy_advice(driver_cuda_version())}), which is not installed"
    if len(plan.where) > 1:
        return (
            "takes one position stream; M-RoPE and axial positions (several streams) "
            "go through impl='array_api'"
        )
    # Last: the first call on a device compiles the kernels.
    return unusable(_device_id(plan.arrays[0]))


@functools.cache
def unusable(device_id: int) -> str | None:
    """Why the kernel cannot run on CUDA device ``device_id``, or ``None`` when it can.

    Tried once per process and device: CuPy is imported and the float32 kernels are
    compiled with NVRTC (what the first call does anyway; CuPy caches the result on
    disk). A CuPy that is installed but cannot import or compile (a CUDA major version
    that does not match the driver's, a missing ``libnvrtc``) is warned about once, and
    ``impl="auto"`` goes on to the next path.
    """
    try:
        from ._module import get_kernel

        get_kernel(device_id, "float32", width=4, interleaved=False, wide_index=False)
    except Exception as error:  # whatever breaks, the kernel is not usable here
        detail = str(error).strip().splitlines()[0] if str(error).strip() else ""
        reason = f"cannot run: CuPy failed to import or compile the kernel ({type(error).__name__}"
        reason += f": {detail})" if detail else ")"
        reason += f"; the CuPy for this machine's driver: {cupy_advice(driver_cuda_version())}"
        warnings.warn(
            f"anyrope: the CUDA path {reason}; impl='auto' takes the next path for CUDA arrays",
            RuntimeWarning,
            stacklevel=2,
        )
        return reason
    return None


#: The CuPy wheel (with its toolkit wheels) of each CUDA major version CuPy is built for.
CUPY_FOR_CUDA: dict[int, str] = {12: "cupy-cuda12x[ctk]", 13: "cupy-cuda13x[ctk]"}


@functools.cache
def driver_cuda_version() -> tuple[int, int] | None:
    """(major, minor) of the newest CUDA the installed driver runs, or ``None`` without a
    driver.

    Asked of the driver library itself (``cuDriverGetVersion``, which needs no device
    and no initialisation), since CuPy, whose wheel must match it, may be missing.
    """
    try:
        driver = ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")
        version = ctypes.c_int(0)
        if driver.cuDriverGetVersion(ctypes.byref(version)) != 0 or version.value <= 0:
            return None
    except (OSError, AttributeError):
        return None
    return version.value // 1000, version.value % 1000 // 10


def cupy_advice(driver: tuple[int, int] | None) -> str:
    """What to install for a driver that runs CUDA ``driver`` (``None``: unknown)."""
    if driver is None:
        choices = " or ".join(f"'{wheel}'" for wheel in reversed(CUPY_FOR_CUDA.values()))
        return f"pip install {choices}, the one of your driver's CUDA major version"
    major, minor = driver
    if major < min(CUPY_FOR_CUDA):
        return (
            f"the driver runs CUDA {major}.{minor}, older than any CuPy wheel's "
            f"(CUDA {min(CUPY_FOR_CUDA)} or newer): update the driver"
        )
    wheel = CUPY_FOR_CUDA[min(major, max(CUPY_FOR_CUDA))]
    return f"pip install '{wheel}' (the driver runs CUDA {major}.{minor})"


def _device_id(x: Array) -> int:
    if array_api_compat.is_torch_array(x):
        return int(x.device.index)
    return int(x.device.id)


def bind(plan: Plan) -> dispatch.Bound | None:
    """The launches of ``plan`` bound for the later calls of its geometry and tables
    (:func:`anyrope._paths.binder`): the kernel checks the positions, so only an offset
    past the tables' rows or pointers of another alignment need a new plan. Not for
    tensors that require grad, which go through autograd."""
    if plan.requires_grad:
        return None
    return dispatch.bind(plan, launcher=dispatch.launch_on_device)


def run(plan: Plan) -> tuple[Array, ...]:
    """Rotate q (and k) in one kernel launch; torch tensors that need grad go through
    autograd, whose backward is the same kernel with ``inverse`` flipped."""
    if plan.requires_grad:
        from .autograd import rotate_with_grad

        return rotate_with_grad(plan, launcher=dispatch.launch_on_device)
    outputs = dispatch.rotate_raw(plan, plan.arrays, launcher=dispatch.launch_on_device)
    if plan.inplace and plan.library == "torch":
        from ..._torch import bump_versions

        bump_versions(plan.arrays)
    return outputs
