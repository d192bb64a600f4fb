"""Vectorised ranking kernels on zero-padded ``[n_queries, depth]`` arrays.

Both entry points use these: the RAG-list functions in :mod:`udcg.metrics` and the
trec_eval-compatible engine in :mod:`udcg.evaluation`. Rows are ranked lists (position 0 is
rank 1); padding is 0, which adds nothing to any sum below.
"""

from __future__ import annotations

import numpy as np

_DISCOUNTS = 1.0 / np.log2(np.arange(2, 1026, dtype=np.float64))


def discounts(depth: int) -> np.ndarray:
    """``1 / log2(i + 1)`` for ranks ``i = 1..depth``."""
    if depth <= len(_DISCOUNTS):
        return _DISCOUNTS[:depth]
    return 1.0 / np.log2(np.arange(2, depth + 2, dtype=np.float64))


def _cut(values: np.ndarray, k: int | None) -> np.ndarray:
    return values if k is None else values[:, :k]


def safe_divide(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """``numerator / denominator`` with 0 where the denominator is 0."""
    out = np.zeros(np.broadcast(numerator, denominator).shape, dtype=np.float64)
    np.divide(numerator, denominator, out=out, where=denominator != 0)
    return out


def dcg(gains: np.ndarray, k: int | None = None) -> np.ndarray:
    """``DCG@k = sum_{i<=k} gain_i / log2(i + 1)`` (linear gain)."""
    g = _cut(gains, k)
    return g @ discounts(g.shape[1])


_MAX_LEVELS = 8  # up to this many integer grades, counting beats sorting each row


def _integer_grades(gains: np.ndarray) -> tuple[np.ndarray, int] | None:
    """``(gains as uint8, highest grade)`` when every gain is an integer in [0, _MAX_LEVELS]
    and rows are shorter than 256 (so per-row counts fit in uint8); None otherwise."""
    if gains.size == 0 or gains.shape[1] > 255:
        return None
    top = gains.max()
    if not 0 <= top <= _MAX_LEVELS:
        return None
    grades = gains.astype(np.uint8)
    return (grades, int(top)) if np.array_equal(grades, gains) else None


def ideal_dcg_of_rows(gains: np.ndarray, k: int | None = None) -> np.ndarray:
    """DCG@k of each row re-ordered by decreasing gain (the list's own ideal ordering).

    Integer gains 0..G (G <= 8) need no sort: the ideal row holds a gain >= L in exactly its
    first n_L places (n_L = the row's count of gains >= L), so
    ``IDCG@k = sum_{L=1..G} C[min(n_L, k)]`` with ``C[n]`` the sum of the first n discounts.
    Other gains are sorted per row. ``gains`` must be finite and >= 0.
    """
    integer = _integer_grades(gains)
    if integer is None:
        return dcg(-np.sort(-gains, axis=1), k)
    grades, top = integer
    width = gains.shape[1]
    cumulative = np.concatenate(([0.0], np.cumsum(discounts(width))))
    if k is not None:
        cumulative = cumulative[np.minimum(np.arange(width + 1), k)]
    idcg = np.zeros(len(gains))
    for level in range(1, top + 1):
        # einsum sums the uint8 view of each row's bools in one fast pass
        counts = np.einsum("ij->i", (grades >= level).view(np.uint8))
        idcg += cumulative[counts]
    return idcg


def ndcg(gains: np.ndarray, ideal_dcg: np.ndarray, k: int | None = None) -> np.ndarray:
    """``nDCG@k = DCG@k / IDCG@k``, 0 when IDCG is 0."""
    return safe_divide(dcg(gains, k), ideal_dcg)


def average_precision(
    is_rel: np.ndarray, n_relevant: np.ndarray, k: int | None = None
) -> np.ndarray:
    """``AP@k = sum_{i<=k} rel_i * P@i / n_relevant``, 0 when there is nothing relevant."""
    r = _cut(is_rel, k)
    precision_at = np.cumsum(r, axis=1) / np.arange(1, r.shape[1] + 1)
    return safe_divide((precision_at * r).sum(axis=1), n_relevant)


def reciprocal_rank(is_rel: np.ndarray, k: int | None = None) -> np.ndarray:
    """``RR@k = 1 / rank`` of the first relevant item within the top k, else 0."""
    r = _cut(is_rel, k)
    if r.shape[1] == 0:
        return np.zeros(r.shape[0])
    first = np.argmax(r > 0, axis=1)
    found = r[np.arange(r.shape[0]), first] > 0
    return np.where(found, 1.0 / (first + 1.0), 0.0)


def precision(is_rel: np.ndarray, k: int | np.ndarray) -> np.ndarray:
    """``P@k = |relevant in top k| / k`` (k counts missing ranks too, as trec_eval does)."""
    depth = int(np.max(k)) if np.ndim(k) else int(k)
    return _cut(is_rel, depth).sum(axis=1) / k


def recall(is_rel: np.ndarray, n_relevant: np.ndarray, k: int | None = None) -> np.ndarray:
    """``R@k = |relevant in top k| / n_relevant``, 0 when there is nothing relevant."""
    return safe_divide(_cut(is_rel, k).sum(axis=1), n_relevant)


def hits(is_rel: np.ndarray, k: int | None = None) -> np.ndarray:
    """``Hits@k = 1`` if any of the top k is relevant, else 0."""
    return (_cut(is_rel, k) > 0).any(axis=1).astype(np.float64)
