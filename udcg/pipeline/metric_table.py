"""The comparison every report makes, defined once: the classic metrics next to UDCG, the
relevance threshold of the binary ones, and each metric's correlation with correctness."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from udcg import metrics, stats

#: A soft or graded relevance label counts as relevant for the binary metrics from here on.
RELEVANT_AT = 0.5


def is_relevant(relevant: np.ndarray | Sequence[np.ndarray]) -> Any:
    """``relevant >= RELEVANT_AT``, for a 2-D array or a ragged list of per-context arrays."""
    if isinstance(relevant, np.ndarray):
        return relevant >= RELEVANT_AT
    return [np.asarray(r) >= RELEVANT_AT for r in relevant]


def classic_metrics(
    relevant: np.ndarray | Sequence[np.ndarray], hits: bool = False
) -> dict[str, np.ndarray]:
    """nDCG (graded, the context's own ideal order), MAP, MRR, Precision (and Hits) per context."""
    binary = is_relevant(relevant)
    scores = {
        "nDCG": metrics.context_ndcg(relevant),
        "MAP": metrics.context_average_precision(binary),
        "MRR": metrics.reciprocal_rank(binary),
        "Precision": metrics.precision(binary),
    }
    if hits:
        scores["Hits"] = metrics.hits(binary)
    return scores


#: eRAG's aggregations of its per-passage labels, as named in reports.
ERAG_METRICS = ("eRAG-nDCG", "eRAG-MAP", "eRAG-MRR", "eRAG-Precision", "eRAG-Hits")


def erag_metrics(labels: np.ndarray | Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """eRAG (Salemi and Zamani 2024) per context: the classic metrics of
    :func:`classic_metrics` over the passages' eRAG labels (0/1, :mod:`udcg.labels.erag`), the
    list being its own judged set, as the ``erag`` package's ``pytrec_eval`` run over one
    list: nDCG (ideal = the labels sorted), MAP (over the relevant passages of the list),
    MRR, Precision (relevant / list length) and Hits, named ``eRAG-nDCG`` and so on.

    Examples:
        >>> scores = erag_metrics(np.array([[0, 1, 1], [0, 0, 0]]))
        >>> {name: values.round(4).tolist() for name, values in scores.items()}["eRAG-MAP"]
        [0.5833, 0.0]
    """
    scores = classic_metrics(labels, hits=True)
    return {f"eRAG-{name}": scores[name] for name in ("nDCG", "MAP", "MRR", "Precision", "Hits")}


@dataclass(frozen=True)
class MetricRow:
    """Held-out agreement of one metric with correctness; ``undefined`` says why the
    correlations are undefined (None when they are defined)."""

    metric: str
    result: stats.CorrelationResult
    kendall: float
    pearson: float
    undefined: str | None = None

    def to_json(self) -> dict[str, Any]:
        r = self.result
        return {
            "metric": self.metric,
            r.method: finite_or_none(r.estimate),
            "ci95": [finite_or_none(r.low), finite_or_none(r.high)],
            "kendall": finite_or_none(self.kendall),
            "pearson": finite_or_none(self.pearson),
            "undefined": self.undefined,
            "resamples": r.n_resamples,
            "undefined_resamples": r.n_undefined,  # left out of the interval
        }


def finite_or_none(value: float) -> float | None:
    """``value`` as a float, or None (JSON null) when it is NaN or infinite."""
    return float(value) if np.isfinite(value) else None


def undefined_reason(values: np.ndarray, correct: np.ndarray) -> str | None:
    """Why a correlation of ``values`` with ``correct`` is undefined (a constant side), or
    None when it is defined."""
    if np.ptp(correct) == 0:
        return "correctness is constant"
    if np.ptp(values) == 0:
        return "metric is constant"
    return None


def show_correlation(value: float | None, undefined: str | None = None) -> str:
    """A correlation as every table, report and plot shows it: ``+0.462``, or
    ``undefined (metric is constant)``."""
    if undefined is not None:
        return f"undefined ({undefined})"
    if value is None or not np.isfinite(value):
        return "undefined"
    return f"{value:+.3f}"


def show_interval(low: float | None, high: float | None) -> str:
    """A confidence interval as ``[-0.120, +0.330]``; ``[undefined]`` when every resample was
    undefined."""
    if low is None or high is None or not (np.isfinite(low) and np.isfinite(high)):
        return "[undefined]"
    return f"[{low:+.3f}, {high:+.3f}]"


def defined(values: Any, *aligned: Any) -> tuple[np.ndarray, ...]:
    """``values`` and each of the ``aligned`` arrays kept where ``values`` is not NaN (a
    metric missing for some contexts).

    Examples:
        >>> kept = defined([0.5, float("nan"), 1.0], [True, False, True])
        >>> [a.tolist() for a in kept]
        [[0.5, 1.0], [True, True]]
    """
    values = np.asarray(values, dtype=np.float64)
    keep = ~np.isnan(values)
    return (values[keep], *(np.asarray(a)[keep] for a in aligned))


def metric_rows(
    scores: dict[str, np.ndarray],
    correct: np.ndarray,
    groups: np.ndarray,
    method: str = "spearman",
    n_resamples: int = 1000,
    seed: int = 0,
) -> list[MetricRow]:
    """Correlation of each metric with correctness, with a query-bootstrap 95% CI, over the
    contexts where the metric is defined (not NaN)."""
    rows = []
    for name, all_values in scores.items():
        values, correct_, groups_ = defined(all_values, correct, groups)
        result = stats.bootstrap_correlation(
            values, correct_, groups_, method=method, n_resamples=n_resamples, seed=seed
        )
        rows.append(
            MetricRow(
                name,
                result,
                stats.correlation(values, correct_, "kendall"),
                stats.correlation(values, correct_, "pearson"),
                undefined_reason(values, correct_),
            )
        )
    return rows


def format_table(rows: Sequence[MetricRow]) -> str:
    """A plain-text table of held-out correlations; a metric whose correlations are undefined
    gets one cell that says why."""
    method = rows[0].result.method if rows else "spearman"
    width = max(len(r.metric) for r in rows)
    lines = [f"{'metric':<{width}}  {method:>8}  {'95% CI':>17}  {'kendall':>8}  {'pearson':>8}"]
    for r in rows:
        if r.undefined is not None:
            lines.append(f"{r.metric:<{width}}  {show_correlation(None, r.undefined)}")
            continue
        lines.append(
            f"{r.metric:<{width}}  {show_correlation(r.result.estimate):>8}  "
            f"{show_interval(r.result.low, r.result.high):>17}  "
            f"{show_correlation(r.kendall):>8}  {show_correlation(r.pearson):>8}"
        )
    return "\n".join(lines)
