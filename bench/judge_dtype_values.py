"""How far the embedded judge's abstention probabilities move when its weights change dtype:
``abstain_prob`` of the same NQ pairs in float32 and in ``--dtype``, compared value by value.

    HF_HUB_OFFLINE=1 python bench/judge_dtype_values.py --pairs 200 --dtype bfloat16

Pairs: the first ``--pairs`` NQ-open questions, each with its own gold passage (every pair a
distinct passage, as ``bench_judge.py --unshared``). Prints the float32 values' quantiles, the
absolute and relative differences (|other - float32| / float32), Spearman's rho and Kendall's
tau between the two orders of the pairs, and each call's seconds.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from bench_judge import NQ, load_pairs
from scipy.stats import kendalltau, spearmanr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--dtype", default="bfloat16", help="the dtype compared with float32")
    parser.add_argument("--data", type=Path, default=NQ)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from udcg.judge.embedded import load_embedded_judge

    questions, passages = load_pairs(args.data, args.pairs, unshared=True)
    values, seconds = {}, {}
    for dtype in ("float32", args.dtype):
        judge = load_embedded_judge(dtype=dtype)
        start = time.perf_counter()
        values[dtype] = np.asarray(judge.abstain_prob(questions, passages))
        seconds[dtype] = time.perf_counter() - start
    base, other = values["float32"], values[args.dtype]
    diff = np.abs(other - base)
    relative = diff / np.maximum(base, np.finfo(float).tiny)
    quantiles = ", ".join(f"{q:.2e}" for q in np.quantile(base, [0, 0.5, 1]))
    print(f"{args.pairs} unshared NQ pairs, float32 against {args.dtype}\n")
    print(f"float32 values (min, median, max): {quantiles}")
    print(f"absolute difference: max {diff.max():.2e}, mean {diff.mean():.2e}")
    print(
        f"relative difference: median {np.median(relative):.1%},"
        f" 90th percentile {np.quantile(relative, 0.9):.1%}, max {relative.max():.1%}"
    )
    print(f"Spearman {spearmanr(base, other)[0]:.4f}, Kendall {kendalltau(base, other)[0]:.4f}")
    print(", ".join(f"{d} {s:.1f} s" for d, s in seconds.items()))


if __name__ == "__main__":
    main()
