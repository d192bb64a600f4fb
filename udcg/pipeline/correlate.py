"""How well each metric predicts end-to-end correctness (query-bootstrap CIs, paired tests)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from udcg import stats
from udcg.pipeline.metric_table import defined, finite_or_none, is_relevant, metric_rows


def correlations(
    scores: dict[str, np.ndarray],
    correct: np.ndarray,
    groups: np.ndarray,
    method: str = "spearman",
    n_resamples: int = 1000,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Per metric: the ``method`` correlation with its 95% CI, Kendall and Pearson, best first
    (undefined correlations, e.g. of a constant metric, last)."""
    with np.errstate(all="ignore"):  # thread-local, unlike a warnings filter
        rows = [
            row.to_json() for row in metric_rows(scores, correct, groups, method, n_resamples, seed)
        ]
    return sorted(rows, key=lambda r: -r[method] if r[method] is not None else math.inf)


def paired_tests(
    scores: dict[str, np.ndarray],
    correct: np.ndarray,
    groups: np.ndarray,
    method: str = "spearman",
    n_resamples: int = 1000,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """For every pair of metrics, the paired bootstrap test of "A correlates better than B"
    over the contexts where both are defined, A being the one with the higher point estimate
    there; pairs with a side undefined there are left out. Each row counts the resamples left
    out as undefined."""
    out = []
    for x, y in itertools.combinations(scores, 2):
        both = scores[x] + scores[y]  # NaN where either is missing
        _, vx, vy, c, g = defined(both, scores[x], scores[y], correct, groups)
        px, py = (stats.correlation(v, c, method) if len(c) else math.nan for v in (vx, vy))
        if not (math.isfinite(px) and math.isfinite(py)):
            continue
        (a, va), (b, vb) = ((x, vx), (y, vy)) if px >= py else ((y, vy), (x, vx))
        res = stats.paired_bootstrap_test(va, vb, c, g, method, n_resamples, seed)
        out.append(
            {
                "a": a,
                "b": b,
                "difference": finite_or_none(res.difference),
                "ci95": [finite_or_none(res.low), finite_or_none(res.high)],
                "p_value": finite_or_none(res.p_value),
                "resamples": res.n_resamples,
                "undefined_resamples": res.n_undefined,
            }
        )
    return sorted(out, key=lambda r: r["p_value"] if r["p_value"] is not None else 2.0)


def accuracy_by_gold_position(relevant: np.ndarray, correct: np.ndarray) -> list[dict[str, Any]]:
    """Mean correctness grouped by the 1-based position of the first relevant passage
    (``position`` None: no relevant passage in the list)."""
    binary = is_relevant(relevant)
    has = binary.any(axis=1)
    first = np.where(has, np.argmax(binary, axis=1) + 1, 0)
    out = []
    for pos in np.unique(first):
        mask = first == pos
        out.append(
            {
                "position": int(pos) if pos else None,
                "n": int(mask.sum()),
                "accuracy": float(correct[mask].mean()),
            }
        )
    return out
