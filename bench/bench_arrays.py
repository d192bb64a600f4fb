"""Array metrics on 1M lists x 10 positions against a plain numpy mean of the same array,
and UDCG against a per-passage loop written like the reference implementation.

    python bench/bench_arrays.py
    python bench/bench_arrays.py --threads-ab    # UDCG and graded nDCG on 1 thread vs the default

Times are the best of ``--repeats`` calls in one process, each metric call alternating with
a call of its baseline (the numpy mean of the same array).
"""

from __future__ import annotations

import argparse
import math
import os

import numpy as np
from timing import best_time, paired_best_times

from udcg import metrics
from udcg._threads import worker_count


def reference_udcg_loop(relevant: np.ndarray, utility: np.ndarray, gamma: float) -> list[float]:
    """UDCG one passage at a time in Python, as the reference implementation computes it."""
    scores = []
    for rel_row, u_row in zip(relevant.tolist(), utility.tolist(), strict=True):
        total = 0.0
        for rel, u in zip(rel_row, u_row, strict=True):
            total += u if rel else -gamma * u
        scores.append(1 / (1 + math.exp(-total / len(rel_row))) if rel_row else 0.0)
    return scores


def _row(name: str, label: str, took: float, baseline: float) -> str:
    ratio = took / baseline
    return f"| {name} | {label} | {took * 1e3:.1f} | {baseline * 1e3:.1f} | {ratio:.1f}x |"


def threads_ab(binary: np.ndarray, rng: np.random.Generator, repeats: int) -> None:
    """Best-of-``repeats`` ms on one thread and on the default count, three alternations."""
    default = str(worker_count())
    utility = rng.random(binary.shape)
    graded = rng.integers(0, 4, binary.shape).astype(np.float64)
    calls = {
        "UDCG": lambda: metrics.udcg(binary, utility),
        "nDCG graded": lambda: metrics.context_ndcg(graded),
    }
    for name, call in calls.items():
        times: dict[str, list[float]] = {"1": [], default: []}
        for _ in range(3):
            for threads in times:
                os.environ["UDCG_NUM_THREADS"] = threads
                times[threads].append(best_time(call, repeats) * 1e3)
        for threads, ms in times.items():
            print(f"{name}, {threads} thread(s): " + ", ".join(f"{t:.1f}" for t in ms) + " ms")
    os.environ.pop("UDCG_NUM_THREADS")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1_000_000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument(
        "--threads-ab",
        action="store_true",
        help="only time UDCG and graded nDCG on 1 thread and on the default count, alternating",
    )
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    binary = rng.random((args.queries, args.k)) < 0.3
    if args.threads_ab:
        threads_ab(binary, rng, args.repeats)
        return
    inputs = {
        "bool": binary,
        "float 0/1": binary.astype(np.float64),
        "float graded 0-3": rng.integers(0, 4, (args.queries, args.k)).astype(np.float64),
    }
    print(f"{args.queries:,} lists x {args.k} positions; ratio = metric time / numpy mean time")
    print("| metric | input | ms | numpy mean ms | ratio |")
    print("| --- | --- | ---: | ---: | ---: |")
    functions = {
        "nDCG": metrics.context_ndcg,
        "AP": metrics.context_average_precision,
        "RR": metrics.reciprocal_rank,
        "P@k": lambda x: metrics.precision(x, k=args.k),
        "Hits@k": lambda x: metrics.hits(x, k=args.k),
    }
    for label, labels in inputs.items():
        for name, fn in functions.items():
            if label == "float graded 0-3" and name != "nDCG":
                continue
            took, baseline = paired_best_times(
                lambda fn=fn, labels=labels: fn(labels), labels.mean, args.repeats
            )
            print(_row(name, label, took, baseline))

    utility = rng.random((args.queries, args.k))
    ours, baseline = paired_best_times(
        lambda: metrics.udcg(binary, utility), utility.mean, args.repeats
    )
    n_loop = min(args.queries, 100_000)
    loop = best_time(lambda: reference_udcg_loop(binary[:n_loop], utility[:n_loop], 1 / 3), 1)
    loop_full = loop * args.queries / n_loop
    print(_row("UDCG", "bool + float utility", ours, baseline))
    print(
        f"\nUDCG reference-style Python loop: {loop_full:.2f} s for {args.queries:,} lists "
        f"(timed on {n_loop:,}, scaled); udcg.metrics.udcg: {ours:.3f} s "
        f"({loop_full / ours:.0f}x faster)"
    )
    check = np.asarray(reference_udcg_loop(binary[:1000], utility[:1000], 1 / 3))
    assert np.allclose(check, metrics.udcg(binary[:1000], utility[:1000]), atol=1e-12)


if __name__ == "__main__":
    main()
