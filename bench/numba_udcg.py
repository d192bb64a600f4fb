"""A plain numba loop for UDCG against the numpy mean of the same utilities (1M lists x 10),
to check whether a compiled kernel would beat ``udcg.metrics.udcg``. numba comes with ranx
(the bench extra); the package itself does not use it.

    python bench/numba_udcg.py
"""

from __future__ import annotations

import time

_start = time.perf_counter()
import numba  # noqa: E402

_import_s = time.perf_counter() - _start

import numpy as np  # noqa: E402
from timing import paired_best_times  # noqa: E402

from udcg import metrics  # noqa: E402


@numba.njit(cache=True, nogil=True)
def udcg_rows(rel: np.ndarray, u: np.ndarray, gamma: float, out: np.ndarray) -> int:
    """UDCG per row with the range check; the first bad row, or -1."""
    n, k = u.shape
    for i in range(n):
        total = 0.0
        for j in range(k):
            x = u[i, j]
            if not (0.0 <= x <= 1.0):
                return i
            total += x if rel[i, j] else -gamma * x
        out[i] = 1.0 / (1.0 + np.exp(-total / k))
    return -1


def main() -> None:
    rng = np.random.default_rng(0)
    relevant = rng.random((1_000_000, 10)) < 0.3
    utility = rng.random((1_000_000, 10))
    out = np.empty(len(utility))
    start = time.perf_counter()
    udcg_rows(relevant[:10], utility[:10], 1 / 3, out[:10])
    first = time.perf_counter() - start
    took, mean = paired_best_times(
        lambda: udcg_rows(relevant, utility, 1 / 3, out), utility.mean, 11
    )
    ours, _ = paired_best_times(lambda: metrics.udcg(relevant, utility), utility.mean, 11)
    assert np.allclose(out, metrics.udcg(relevant, utility), atol=1e-12)
    print(f"numba import {_import_s:.2f} s, first call {first:.2f} s (compile or cache load)")
    print(
        f"numba loop {took * 1e3:.1f} ms ({took / mean:.1f}x the mean), "
        f"udcg.metrics.udcg {ours * 1e3:.1f} ms ({ours / mean:.1f}x)"
    )


if __name__ == "__main__":
    main()
