"""Array-library helpers: namespaces, devices, dtypes and host copies.

Nothing here imports torch, cupy or jax: libraries are recognised through
``array_api_compat``'s ``is_*_array`` helpers, which look at ``sys.modules``.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from typing import Any

import array_api_compat
import numpy as np

#: An array of any array-API library (kept loose: there is no common static type).
Array = Any

#: An array-API namespace module.
Namespace = Any

#: The dtypes anyrope rotates (numerical-contract.rst, "What is identical, and what is not").
FLOATING = ("float16", "bfloat16", "float32", "float64")


def namespace_of(
    *arrays: Array, xp: Namespace | None = None, argument: str | tuple[str, ...] = "x"
) -> Namespace:
    """Return the array-API namespace of ``arrays``, or ``xp`` when given.

    ``argument`` names the arrays in messages: one name for them all, or one per array.
    Raises a ``TypeError`` naming them when an input is not an array, when the arrays
    come from different libraries, and when ``xp`` is not a namespace of their library.
    """
    names = (argument,) * len(arrays) if isinstance(argument, str) else argument
    for array, name in zip(arrays, names, strict=True):
        plain = (bool, int, float, complex, str, bytes, list, tuple, dict, type(None))
        if isinstance(array, plain) or not array_api_compat.is_array_api_obj(array):
            raise TypeError(
                f"`{name}` must be an array of an array-API library "
                f"(NumPy, PyTorch, CuPy, JAX, ...); got {type(array).__name__}"
            )
    if xp is not None:
        check_namespace(xp)
    try:
        inferred = array_api_compat.array_namespace(*arrays)
    except TypeError as error:
        raise TypeError(
            f"{_listed(names)} must come from one array library; got "
            + _listed(
                f"`{n}` from {library_name(array_api_compat.array_namespace(a))}"
                for a, n in zip(arrays, names, strict=True)
            )
        ) from error
    if xp is None:
        return inferred
    library = library_name(inferred)
    if library_name(xp) != library:
        one = len(set(names)) == 1
        arrays_are = f"is an array of {library}" if one else f"are arrays of {library}"
        raise TypeError(
            f"{_listed(names)} {arrays_are} but `xp` is a namespace of {library_name(xp)}: "
            f"pass a namespace of {library}, or xp=None to infer it"
        )
    return xp


def _listed(items: Any) -> str:
    """``"a"``, ``"a and b"``, ``"a, b and c"``, quoting plain names as arguments."""
    words = [w if " " in w else f"`{w}`" for w in dict.fromkeys(items)]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def check_namespace(xp: object) -> None:
    """``xp`` must be an array namespace (a module such as ``array_api_compat.numpy``)."""
    if not all(hasattr(xp, name) for name in ("asarray", "isdtype", "reshape", "concat")):
        raise TypeError(
            "`xp` must be an array-API namespace such as array_api_compat.numpy or "
            f"array_api_strict, or None to infer it; got {xp!r} of type {type(xp).__name__}"
        )


def library_name(xp: Namespace) -> str:
    """Short library name of a namespace, e.g. ``"numpy"``, ``"torch"``."""
    name: str = getattr(xp, "__name__", type(xp).__name__)
    return name.removeprefix("array_api_compat.").split(".")[0]


def device_of(x: Array) -> Any:
    """The device an array lives on (``"cpu"`` for NumPy)."""
    return array_api_compat.device(x)


def dtype_name(dtype: Any) -> str:
    """Readable dtype name across libraries: ``torch.bfloat16`` -> ``"bfloat16"``."""
    # Kept by type and dtype (NumPy's float64 dtype equals Python's float): a decode step
    # asks for a few names, and str() of a torch dtype costs more than a lookup.
    try:
        return _name_of(dtype.__class__, dtype)
    except TypeError:  # an unhashable dtype object
        return _name_of.__wrapped__(dtype.__class__, dtype)


@functools.cache
def _name_of(kind: type, dtype: Any) -> str:
    if isinstance(dtype, type):
        return dtype.__name__
    return str(getattr(dtype, "name", dtype)).rsplit(".", 1)[-1]


def is_real_floating(xp: Namespace, dtype: Any) -> bool:
    """True for float16, bfloat16, float32 and float64 (bfloat16 is outside the standard)."""
    # By name: NumPy's longdouble is "real floating" too, but nothing here computes in it.
    name = dtype_name(dtype)
    if name not in FLOATING:
        return False
    if name == "bfloat16":
        return True
    try:
        return bool(xp.isdtype(dtype, "real floating"))
    except (AttributeError, TypeError, ValueError):  # a dtype of another library
        return False


def check_dtype(xp: Namespace, dtype: Any) -> None:
    """``dtype`` must be a real floating dtype of ``xp`` (the dtype asked of a result)."""
    if not is_real_floating(xp, dtype):
        raise TypeError(
            f"`dtype` must be a real floating dtype of {library_name(xp)}; got {dtype!r}"
        )


def compute_dtype(xp: Namespace, dtype: Any) -> Any:
    """The dtype the rotation is computed in: float32 for 16-bit floating dtypes
    (numerical-contract.rst, "How every path computes" 3), else ``dtype``."""
    return xp.float32 if dtype_name(dtype) in ("float16", "bfloat16") else dtype


def table_dtype(xp: Namespace, dtype: Any) -> np.dtype[Any]:
    """NumPy dtype the float64 host tables are rounded to once, for inputs of ``dtype``."""
    return np.dtype(np.float64) if dtype == xp.float64 else np.dtype(np.float32)


def to_host(x: Array) -> np.ndarray[Any, Any]:
    """Copy an array of any library to a NumPy array on the host."""
    if array_api_compat.is_numpy_array(x):
        return x
    if array_api_compat.is_torch_array(x):
        # Inside torch.func.grad even detach() gives a wrapper without memory.
        with _outside_torch_transforms():
            return x.detach().cpu().numpy()
    if array_api_compat.is_cupy_array(x):
        return x.get()  # type: ignore[no-any-return]
    try:
        return np.asarray(x)
    except (TypeError, ValueError, RuntimeError):
        return np.from_dlpack(x)


_NOTHING = contextlib.nullcontext()
"""The context of the other libraries (reentrant, so one serves every call)."""


def outside_trace(xp: Namespace) -> contextlib.AbstractContextManager[Any]:
    """A context in which operations on concrete arrays give concrete arrays, which a
    cache may keep past a trace or transform and a check may read:

    - JAX computes them at once even inside a trace (``jax.ensure_compile_time_eval``);
      operations on traced arrays are still traced.
    - torch, inside ``torch.func.grad`` or ``jvp``, would wrap even a new tensor for the
      transform's level, which outlives it in a cache and has no memory a kernel can
      read: the transforms are set aside (``torch.func.vmap``'s tensors go to anyrope's
      op before any of this runs).

    Nothing for other libraries.
    """
    if array_api_compat.is_jax_namespace(xp):
        import jax

        evaluate: contextlib.AbstractContextManager[Any] = jax.ensure_compile_time_eval()
        return evaluate
    if array_api_compat.is_torch_namespace(xp):
        return _outside_torch_transforms()
    return _NOTHING


def _outside_torch_transforms() -> contextlib.AbstractContextManager[Any]:
    """``torch.func``'s transforms set aside, when inside one (torch is imported)."""
    torch = sys.modules["torch"]
    if torch._C._functorch.peek_interpreter_stack() is None:
        return _NOTHING
    from torch._functorch.pyfunctorch import temporarily_clear_interpreter_stack

    cleared: contextlib.AbstractContextManager[Any] = temporarily_clear_interpreter_stack()
    return cleared


def from_host(values: np.ndarray[Any, Any], xp: Namespace, device: Any) -> Array:
    """``values`` copied onto ``device`` as an array of ``xp``, whole when this returns.

    CuPy copies from the host on the device's current stream, unordered with launches on
    the other streams that may read the array next: that stream is waited for (but
    while it is captured into a CUDA graph, which a wait would end).
    """
    x = xp.asarray(values, device=device)
    if array_api_compat.is_cupy_array(x):
        with x.device:
            stream = sys.modules["cupy"].cuda.get_current_stream()
            if not stream.is_capturing():
                stream.synchronize()
    return x


def reshape_lead(x: Array, like: Array, lead: int, tail: tuple[int, ...], xp: Namespace) -> Array:
    """``x`` reshaped to ``like.shape[:lead] + tail``.

    A symbolic dimension (``None``, as ndonnx gives for a graph input) has no standard
    reshape: ``like.dynamic_shape`` (ndonnx's shape as an array) stands in.
    """
    shape = (*like.shape[:lead], *tail)
    if None not in shape:
        return xp.reshape(x, shape)
    dynamic = getattr(like, "dynamic_shape", None)
    if dynamic is None:
        raise TypeError(
            f"an array of symbolic shape {like.shape} needs a library whose arrays have a "
            "dynamic_shape (ndonnx); give it a known shape"
        )
    return xp.reshape(x, xp.concat((dynamic[:lead], xp.asarray(tail, dtype=dynamic.dtype))))
