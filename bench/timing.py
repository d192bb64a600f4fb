"""Timing helper shared by the bench scripts (run as ``python bench/<script>.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable


def best_time(fn: Callable[[], object], repeats: int, warm_up: bool = True) -> float:
    """Best wall time of ``repeats`` calls of ``fn``, in seconds, after one untimed call."""
    if warm_up:
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def paired_best_times(
    fn: Callable[[], object], baseline: Callable[[], object], repeats: int
) -> tuple[float, float]:
    """Best wall times of ``fn`` and ``baseline`` over ``repeats`` alternating calls, so that
    drifts in the machine's speed (memory bandwidth on a shared host) hit both alike."""
    fn(), baseline()
    ours, theirs = [], []
    for _ in range(repeats):
        for call, times in ((fn, ours), (baseline, theirs)):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
    return min(ours), min(theirs)
