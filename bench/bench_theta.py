"""UDCG-theta fit time (Lightning, full-batch L-BFGS) against scikit-learn on the same features.

    python bench/bench_theta.py --contexts 20000 --k 10

Both fit the same 2k features (rel*u and (1-rel)*u) without regularisation or intercept;
times are the best of ``--repeats`` fits after one warm-up fit (imports and Lightning set-up
of the first fit are reported separately).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from timing import best_time

from udcg.metrics import udcg_terms
from udcg.theta import UDCGTheta
from udcg.theta.simulate import simulate_arrays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, default=20_000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from sklearn.linear_model import LogisticRegression

    rel, u, correct = simulate_arrays(args.contexts, args.k)
    features = np.hstack(udcg_terms(rel, u))

    def ours() -> UDCGTheta:
        return UDCGTheta(args.k, val_fraction=0.0).fit(rel, u, correct)

    def sklearn() -> LogisticRegression:
        return LogisticRegression(C=np.inf, fit_intercept=False, tol=1e-10, max_iter=10_000).fit(
            features, correct
        )

    start = time.perf_counter()
    model = ours()
    first = time.perf_counter() - start
    reference = sklearn()
    ours_time, sk_time = (
        best_time(ours, args.repeats, warm_up=False),
        best_time(sklearn, args.repeats, warm_up=False),
    )
    diff = np.abs(np.concatenate([model.alpha_, model.beta_]) - reference.coef_[0]).max()
    print(f"{args.contexts:,} contexts, k={args.k} ({2 * args.k} features)")
    print("| fit | seconds |")
    print("| --- | ---: |")
    print(f"| udcg UDCGTheta (Lightning, L-BFGS), first fit in process | {first:.3f} |")
    print(f"| udcg UDCGTheta, warm | {ours_time:.3f} |")
    print(f"| scikit-learn LogisticRegression (lbfgs) | {sk_time:.3f} |")
    print(
        f"\nratio udcg / scikit-learn (warm): {ours_time / sk_time:.1f}x; "
        f"max |weight diff| {diff:.1e}"
    )


if __name__ == "__main__":
    main()
