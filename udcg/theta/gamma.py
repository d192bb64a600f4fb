"""Tuning UDCG's distraction weight gamma on training contexts.

``UDCG_gamma = sigmoid( (1/k) * sum_i [rel_i u_i - gamma (1 - rel_i) u_i] )`` (see
:func:`udcg.metrics.udcg.udcg`). :func:`tune_gamma` evaluates it for every gamma of a grid and
keeps the one whose scores correlate best (:func:`udcg.stats.correlation`, Spearman by default)
with end-to-end correctness. The correlation it returns is measured on the very contexts used
to choose gamma and is optimistic: report the correlation on held-out contexts (for instance
:func:`udcg.stats.bootstrap_correlation` on a test split), never this one alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.metrics._arrays import as_padded
from udcg.metrics.udcg import udcg
from udcg.stats import METHODS, correlation
from udcg.validation import by_query, float_vector, show

__all__ = ["DEFAULT_GRID", "GammaResult", "check_grid", "tune_gamma"]

# 0, 0.025, ..., 2 (rounded: 1.95, not 1.9500000000000002) plus the paper's default 1/3
DEFAULT_GRID = np.union1d(np.linspace(0.0, 2.0, 81).round(3), [1.0 / 3.0])


@dataclass(frozen=True)
class GammaResult:
    """The chosen ``gamma``, its correlation on the training contexts, and the whole curve.

    ``correlations[j]`` is the correlation for ``grid[j]`` (``nan`` where undefined). Among
    grid values within 1e-12 of the best correlation, the smallest gamma is chosen.

    Examples:
        With gamma = 0 the distractors do not count and UDCG is constant (no correlation):

        >>> utility = [[0.5, 0.1], [0.5, 0.3], [0.5, 0.6], [0.5, 0.9]]
        >>> result = tune_gamma([[1, 0]] * 4, utility, [1, 1, 0, 0], grid=[0, 1])
        >>> result.grid.tolist(), result.correlations.round(4).tolist()
        ([0.0, 1.0], [nan, 0.8944])
    """

    gamma: float
    train_correlation: float
    grid: np.ndarray
    correlations: np.ndarray
    method: str = "spearman"


def check_grid(grid: Any, name: str = "grid") -> np.ndarray:
    """The gammas to try as a float array (finite, >= 0); None: :data:`DEFAULT_GRID`. Errors
    name the option ``name``.

    Examples:
        >>> check_grid([0, 0.5]).tolist(), check_grid(None).size
        ([0.0, 0.5], 82)
    """
    if grid is None:
        return DEFAULT_GRID.copy()
    try:
        values = np.asarray(grid, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise UDCGInputError(f"expected a 1-D sequence of numbers ({exc})", field=name) from None
    if values.ndim != 1 or values.size == 0:
        raise UDCGInputError(
            f"expected a non-empty 1-D sequence of gammas, got shape {list(values.shape)}",
            field=name,
        )
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        pos = int(np.argmax(bad))
        raise UDCGInputError(
            f"position {pos}: gamma must be finite and >= 0, got {show(values[pos])}", field=name
        )
    return values


def _as_lists(relevant: Any, utility: Any, correct: Any) -> tuple[Any, Any, Any]:
    """Mappings ``{qid: ...}`` become sequences in the order of ``relevant``'s keys."""
    aligned = by_query(relevant=relevant, utility=utility, correct=correct)
    return (relevant, utility, correct) if aligned is None else tuple(aligned)


def tune_gamma(
    relevant: Any,
    utility: Any,
    correct: Any,
    grid: Any = None,
    method: str = "spearman",
) -> GammaResult:
    """Choose gamma on training contexts by correlation of UDCG_gamma with correctness.

    ``relevant``/``utility``: per-passage relevance and utility as for :func:`udcg.metrics.udcg`
    (2-D arrays, ragged lists, or ``{qid: sequence}`` mappings with ``correct`` a mapping too);
    ``correct``: per-context correctness (0/1, booleans, or a graded score); ``grid``: gammas
    to try (finite, >= 0; default :data:`DEFAULT_GRID`, 0 to 2 by 0.025 plus 1/3); ``method``:
    ``"spearman"``, ``"kendall"`` or ``"pearson"``. Raises :class:`UDCGInputError` when the
    correlation is undefined for every gamma (for instance constant correctness).

    Examples:
        The less utility the distractor (second passage) has, the more often the answer is
        correct: only gamma > 0 sees it. Spearman of the scores against (1, 1, 0, 0):

        >>> utility = [[0.5, 0.1], [0.5, 0.3], [0.5, 0.6], [0.5, 0.9]]
        >>> result = tune_gamma([[1, 0]] * 4, utility, [1, 1, 0, 0], grid=[0, 1])
        >>> result.gamma, round(result.train_correlation, 4)
        (1.0, 0.8944)
    """
    if method not in METHODS:
        raise UDCGInputError(
            f"unknown method {method!r}; expected one of {', '.join(METHODS)}", field="method"
        )
    gammas = check_grid(grid)
    relevant, utility, correct = _as_lists(relevant, utility, correct)
    udcg(relevant, utility, 0.0)  # validates both inputs with the metric's own messages
    rel, lengths = as_padded(relevant, "relevant")
    u, _ = as_padded(utility, "utility")
    n = rel.shape[0]
    y = float_vector(correct, "correct", n, "relevant")
    if n < 2:
        raise UDCGInputError(f"need at least 2 contexts, got {n}", field="relevant")
    # contexts of equal length form 2-D blocks, so each gamma costs one udcg() call per length
    blocks = [
        (rows, rel[rows, :length], u[rows, :length])
        for length in np.unique(lengths)
        for rows in [np.flatnonzero(lengths == length)]
    ]
    scores = np.empty(n, dtype=np.float64)
    values = np.empty(gammas.shape[0], dtype=np.float64)
    for j, gamma in enumerate(gammas):
        for rows, rel_block, u_block in blocks:
            scores[rows] = udcg(rel_block, u_block, float(gamma))
        values[j] = correlation(scores, y, method)
    if np.isnan(values).all():
        reason = "correct is constant" if y.min() == y.max() else "UDCG is constant"
        raise UDCGInputError(
            f"the {method} correlation is undefined for every gamma ({reason})", field="correct"
        )
    best = float(np.nanmax(values))
    ties = np.flatnonzero(values >= best - 1e-12)  # nan compares False
    chosen = int(ties[np.argmin(gammas[ties])])
    return GammaResult(
        gamma=float(gammas[chosen]),
        train_correlation=float(values[chosen]),
        grid=gammas,
        correlations=values,
        method=method,
    )
