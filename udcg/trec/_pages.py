"""Fresh memory for one large call: no transparent huge pages, glibc's threshold adapted.

numpy advises the kernel to back every array of 4 MiB or more with 2 MiB pages, and Arrow's
default allocator (mimalloc) does the same for its whole arena. Where transparent huge pages
are in ``madvise`` mode (the common default), each such page is allocated and zeroed whole on
first touch; on a virtual machine that hands freed memory back to its host, a fresh 2 MiB page
costs more again. The TREC engine's first call in a process touches some 200 MiB, mostly
short-lived: with numpy's advice the first evaluation of a 1M-line run took 0.9-1.2 s, without
it 0.6-0.7 s; with Arrow's mimalloc it keeps about 140 MiB in huge pages and takes 0.66-0.67 s
right after another large process exits, 0.42-0.54 s on jemalloc (``bench/bench_trec.py``;
``bench/first_call_faults.py --after ir_measures [--mimalloc]``, docs/benchmarks.md); later
calls reuse freed memory either way.

glibc's malloc maps every block of 128 KiB or more afresh (and unmaps it when freed) until the
process frees one such mapped block; from then on, blocks up to that size come from the heap
and freed memory is reused. A first call that makes many arrays of a few MiB therefore faults
in new pages for each of them. ``small_pages`` frees one untouched block of just under 32 MiB
(glibc's ceiling for this adaptation) on entry, so the heap is reused from the start, as it is
in any process that has already freed a large array.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

try:  # numpy >= 2
    from numpy._core.multiarray import _set_madvise_hugepage
except ImportError:  # numpy 1.x
    from numpy.core.multiarray import _set_madvise_hugepage


_ADAPT_BYTES = (32 << 20) - (1 << 16)


def _small_page_pool() -> pa.MemoryPool:
    """Arrow's jemalloc pool (4 KiB pages), or the system allocator where Arrow lacks it."""
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
