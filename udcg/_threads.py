"""Threads for CPU work that numpy and Arrow run outside the GIL (their kernels release it).

``UDCG_NUM_THREADS`` sets how many; by default the CPUs this process may run on, at most 8.
"""

from __future__ import annotations

import contextvars
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from udcg.errors import UDCGInputError

#: the variables OpenBLAS reads for its thread count
_BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def worker_count() -> int:
    """``UDCG_NUM_THREADS`` if set (a positive integer), else the usable CPUs, at most 8."""
    given = os.environ.get("UDCG_NUM_THREADS", "").strip()
    if given:
        count = int(given) if given.isdigit() else 0
        if count < 1:
            raise UDCGInputError(f"UDCG_NUM_THREADS must be a positive integer, got {given!r}")
        return count
    available = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return min(8, len(available) if available else os.cpu_count() or 1)


def one_blas_thread() -> None:
    """For a command whose numpy work has no large matrix products: unless the environment
    sets a BLAS thread count, OpenBLAS starts without its thread pool. OpenBLAS starts one
    thread per core when numpy is imported, which costs a short command a visible part of its
    run time. Call it before numpy is imported; afterwards it does nothing."""
    if "numpy" in sys.modules or any(os.environ.get(v) for v in _BLAS_THREAD_VARIABLES):
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"


def _in_this_context(work: Callable[..., Any]) -> Callable[..., Any]:
    """``work`` run in a copy of the calling thread's context (each call its own copy), so a
    worker sees what the running command set: the inputs it read, its warnings."""

    def run(*args: Any) -> Any:
        return context.copy().run(work, *args)

    context = contextvars.copy_context()
    return run


def map_concurrently(work: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
    """``[work(item) for item in items]`` on up to ``worker_count()`` threads; the first
    exception raised by a call propagates."""
    items = list(items)
    workers = min(len(items), worker_count())
    if workers < 2:
        return [work(item) for item in items]
    from concurrent.futures import ThreadPoolExecutor  # only where threads run

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(_in_this_context(work), items))


def run_concurrently(*calls: Callable[[], Any]) -> list[Any]:
    """The results of ``calls``: the first runs on the calling thread, the others at the same
    time on up to ``worker_count() - 1`` threads. glibc gives each thread its own allocator
    arena, fresh memory to fault in, so the call that makes the large numpy temporaries should
    come first; Arrow calls allocate from Arrow's own pool wherever they run."""
    workers = min(len(calls), worker_count()) - 1
    if workers < 1:
        return [call() for call in calls]
    from concurrent.futures import ThreadPoolExecutor  # only where threads run

    with ThreadPoolExecutor(workers) as pool:
        others = [pool.submit(_in_this_context(call)) for call in calls[1:]]
        first = calls[0]()
        return [first, *(future.result() for future in others)]
