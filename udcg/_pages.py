"""Scoped control of numpy's transparent-huge-page advice.

numpy advises the kernel to back every array of 4 MiB or more with 2 MiB pages. Where
transparent huge pages are in ``madvise`` mode (the common default), each such page is
allocated and zeroed whole on first touch, and a short-lived temporary pays that again on every
fresh allocation. The TREC engine makes dozens of such temporaries per call: with the advice,
the first evaluation of a 1M-line run in a process took 0.9-1.2 s, without it 0.6-0.7 s
(``bench/bench_trec.py``); later calls reuse freed memory and do not change.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

try:  # numpy >= 2
    from numpy._core.multiarray import _set_madvise_hugepage
except ImportError:  # numpy 1.x
    from numpy.core.multiarray import _set_madvise_hugepage


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """Allocate numpy arrays without huge-page advice inside the block; restores the setting."""
    previous = _set_madvise_hugepage(False)
    try:
        yield
    finally:
        _set_madvise_hugepage(previous)
