"""The worker threads of the CPU paths: how many, the shared pool, and fork safety.

Every lock of the package comes from :func:`lock`: a forked child finds each one
released, whichever thread of the parent held it at the fork (a thread building tables
while another forks, as a torch DataLoader does), instead of waiting forever for a
thread that does not exist in the child.

The count follows the caller's settings: ``torch.get_num_threads()`` for PyTorch tensors
(what ``torch.set_num_threads`` sets), ``OMP_NUM_THREADS`` for NumPy arrays when it is
set, else the cores this process may run on. Inside :func:`one_thread` (dask's workers,
which already run one block per core) it is one.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

_locks: weakref.WeakSet[Any] = weakref.WeakSet()
"""Every lock :func:`lock` made that is still in use."""


def lock() -> threading.Lock:
    """A new lock, released in a forked child whoever held it in the parent."""
    made = threading.Lock()
    _locks.add(made)
    return made


_pool: ThreadPoolExecutor | None = None
_pool_lock = lock()
_local = threading.local()


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Keep rotations in this block on the calling thread.

    For callers that already run one rotation per core (dask's workers): threads of ours
    on top of theirs would only compete for the same cores.
    """
    previous = getattr(_local, "one_thread", False)
    _local.one_thread = True
    try:
        yield
    finally:
        _local.one_thread = previous


def workers(library: str) -> int:
    """How many threads a rotation of ``library``'s arrays may use."""
    if getattr(_local, "one_thread", False):
        return 1
    if library == "torch":
        import torch

        return max(1, int(torch.get_num_threads()))
    setting = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if setting.isdigit() and int(setting) > 0:
        return int(setting)
    return cores()


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def executor() -> ThreadPoolExecutor:
    """One shared pool, sized to the cores: the paths hand it work that releases the GIL."""
    global _pool  # noqa: PLW0603 - created on first use, shared by every call
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=cores(), thread_name_prefix="anyrope")
        return _pool


def _after_fork_in_child() -> None:
    # A forked child inherits the pool object but not its threads: work handed to it
    # would wait forever (a torch DataLoader worker). The child starts its own pool. A
    # lock held by a parent thread at the fork would never be released: the child is
    # single-threaded here, so none of its threads holds one, and each is released
    # (a thread's update under a lock is a single assignment: none is left half done).
    global _pool  # noqa: PLW0603 - reset in the child only
    _pool = None
    for held in list(_locks):
        if held.locked():
            held.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
