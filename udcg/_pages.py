"""Fresh memory for one large call: numpy's transparent-huge-page advice, glibc's threshold.

numpy advises the kernel to back every array of 4 MiB or more with 2 MiB pages. Where
transparent huge pages are in ``madvise`` mode (the common default), each such page is
allocated and zeroed whole on first touch, and a short-lived temporary pays that again on every
fresh allocation. The TREC engine makes dozens of such temporaries per call: with the advice,
the first evaluation of a 1M-line run in a process took 0.9-1.2 s, without it 0.6-0.7 s
(``bench/bench_trec.py``); later calls reuse freed memory and do not change.

glibc's malloc maps every block of 128 KiB or more afresh (and unmaps it when freed) until the
process frees one such mapped block; from then on, blocks up to that size come from the heap
and freed memory is reused. A first call that makes many arrays of a few MiB therefore faults
in new pages for each of them. ``small_pages`` frees one untouched block of just under 32 MiB
(glibc's ceiling for this adaptation) on entry, so the heap is reused from the start, as it is
in any process that has already freed a large array.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

try:  # numpy >= 2
    from numpy._core.multiarray import _set_madvise_hugepage
except ImportError:  # numpy 1.x
    from numpy.core.multiarray import _set_madvise_hugepage


_ADAPT_BYTES = (32 << 20) - (1 << 16)


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """Allocate numpy arrays without huge-page advice inside the block; restores the setting."""
    previous = _set_madvise_hugepage(False)
    # allocated and freed untouched (no pages), only to let glibc raise its mmap threshold
    np.empty(_ADAPT_BYTES, dtype=np.uint8)  # freed at once
    try:
        yield
    finally:
        _set_madvise_hugepage(previous)
