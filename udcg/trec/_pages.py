"""Fresh memory for one large call: no transparent huge pages, glibc's threshold adapted.

numpy advises the kernel to back every array of 4 MiB or more with 2 MiB pages, and Arrow's
default allocator (mimalloc) does the same for its whole arena. Where transparent huge pages
are in ``madvise`` mode (the common default), each such page is allocated and zeroed whole on
first touch; on a virtual machine that hands freed memory back to its host, a fresh 2 MiB page
costs more again. The TREC engine's first call in a process touches a few hundred MiB, mostly
short-lived, so inside ``small_pages`` numpy gives no advice and Arrow allocates from jemalloc
(4 KiB pages, only what it hands out is touched, freed memory kept for the next call).
``bench/first_call_faults.py`` measures the effect (docs/benchmarks.md).

numpy's switch for the advice is private (``numpy._core.multiarray._set_madvise_hugepage``):
it is looked up when an evaluation first runs, not when udcg is imported, and where a numpy
release lacks it the advice is left as it is.

glibc's malloc maps every block of 128 KiB or more afresh (and unmaps it when freed) until the
process frees one such mapped block; from then on, blocks up to that size come from the heap
and freed memory is reused. A first call that makes many arrays of a few MiB therefore faults
in new pages for each of them. ``small_pages`` frees one untouched block of just under 32 MiB
(glibc's ceiling for this adaptation) on entry, so the heap is reused from the start, as it is
in any process that has already freed a large array.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

_ADAPT_BYTES = (32 << 20) - (1 << 16)


@functools.cache
def _numpy_switch() -> Callable[[bool], bool] | None:
    """numpy's private huge-page advice switch, or None where this numpy has none."""
    try:  # numpy >= 2
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:
        try:  # numpy 1.x
            from numpy.core.multiarray import _set_madvise_hugepage
        except ImportError:
            return None
    return _set_madvise_hugepage


def _set_madvise_hugepage(enabled: bool) -> bool:
    """Turn numpy's huge-page advice on or off; returns the previous setting. Where numpy has
    no such switch nothing changes and the answer is False."""
    switch = _numpy_switch()
    if switch is None:
        return False
    try:
        return bool(switch(enabled))
    except TypeError:  # a changed private signature: leave numpy's setting alone
        return False


def _small_page_pool() -> pa.MemoryPool:
    """Arrow's jemalloc pool (4 KiB pages, keeps freed memory for the next call), or the
    system allocator where Arrow lacks it."""
    try:
        return pa.jemalloc_memory_pool()
    except NotImplementedError:
        return pa.system_memory_pool()


class _Settings:
    """The process's settings while any ``small_pages`` block runs (blocks may overlap in
    threads: the first to enter saves the outside settings, the last to leave restores them)."""

    lock = threading.Lock()
    depth = 0
    outside: tuple[bool, pa.MemoryPool] | None = None


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """Inside the block numpy allocates without huge-page advice and Arrow allocates from a
    pool without huge pages; both settings are restored after (Arrow buffers return to the
    pool they came from)."""
    with _Settings.lock:
        if _Settings.depth == 0:
            _Settings.outside = (_set_madvise_hugepage(False), pa.default_memory_pool())
            pa.set_memory_pool(_small_page_pool())
        _Settings.depth += 1
    # allocated and freed untouched (no pages), only to let glibc raise its mmap threshold
    np.empty(_ADAPT_BYTES, dtype=np.uint8)  # freed at once
    try:
        yield
    finally:
        with _Settings.lock:
            _Settings.depth -= 1
            if _Settings.depth == 0:
                advice, pool = _Settings.outside
                pa.set_memory_pool(pool)
                _set_madvise_hugepage(advice)
