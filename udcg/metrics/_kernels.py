"""Vectorised ranking kernels on zero-padded ``[n_queries, depth]`` arrays.

Both entry points use these: the RAG-list functions in :mod:`udcg.metrics` and the
trec_eval-compatible engine in :mod:`udcg.trec.engine`. Rows are ranked lists (position 0 is
rank 1); padding is 0, which adds nothing to any sum below.
"""

from __future__ import annotations

from functools import lru_cache

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


_CODE_BITS = 24  # float32 sums of powers of two are exact below 2**24


def _grade_counts(gains: np.ndarray, top: float) -> tuple[np.ndarray, int, int] | None:
    """``(codes, top, bits)`` for integer gains 0..top: each row's ``sum_j 2**(bits * g_j)``,
    which holds the row's count of each grade g in its own ``bits``-wide field (bits is the
    bit length of the row width, so no count overflows into the next field). The sum runs in
    float32, exact while ``bits * (top + 1) <= 24``. None when gains are not such integers or
    the fields would not fit."""
    width = gains.shape[1]
    bits = width.bit_length()
    if gains.size == 0 or bits * (int(top) + 1) > _CODE_BITS:
        return None
    grades = gains.astype(np.int32)
    if not np.array_equal(grades, gains):
        return None
    grades *= bits << 23  # the float32 bit pattern of 2**(bits * g): (bits * g + 127) << 23
    grades += 127 << 23
    codes = grades.view(np.float32) @ np.ones(width, dtype=np.float32)
    return codes.astype(np.int32), int(top), bits


def _ideal_dcg_of_codes(codes: np.ndarray, top: int, bits: int, width: int) -> np.ndarray:
    """IDCG from packed grade counts (see ``_grade_counts``): the ideal row holds a gain >= L
    in exactly its first n_L places, so ``IDCG = sum_{L=1..top} C[n_L]`` with ``C[n]`` the
    sum of the first n discounts and n_L the count of grades >= L."""
    cumulative = np.concatenate(([0.0], np.cumsum(discounts(width))))
    idcg = np.zeros(len(codes))
    at_least = np.zeros(len(codes), dtype=np.int32)
    for level in range(top, 0, -1):
        at_least += (codes >> (bits * level)) & ((1 << bits) - 1)
        idcg += cumulative[np.minimum(at_least, width)]  # table codes may count past width
    return idcg


_TABLE_BITS = 16  # up to 2**16 possible codes: compute each once and look rows up


@lru_cache(maxsize=16)
def _ideal_dcg_table(top: int, bits: int, width: int) -> np.ndarray:
    codes = np.arange(2 ** (bits * (top + 1)), dtype=np.int32)
    return _ideal_dcg_of_codes(codes, top, bits, width)


def ideal_dcg_of_rows(gains: np.ndarray, top: float | None = None) -> np.ndarray:
    """DCG of each row re-ordered by decreasing gain (the list's own ideal ordering).

    Integer gains 0..G need no sort: one matrix product counts each row's grades (see
    ``_grade_counts``) and ``_ideal_dcg_of_codes`` turns the counts into the IDCG, read from
    a table of every possible count code when there are at most 2**16 of them. Other gains
    are sorted per row. ``gains`` must be finite and >= 0; ``top`` is their maximum when the
    caller knows it.
    """
    counted = _grade_counts(gains, gains.max(initial=0.0) if top is None else top)
    if counted is None:
        return dcg(-np.sort(-gains, axis=1))
    codes, top_grade, bits = counted
    width = gains.shape[1]
    if bits * (top_grade + 1) <= _TABLE_BITS:
        return _ideal_dcg_table(top_grade, bits, width).take(codes)
    return _ideal_dcg_of_codes(codes, top_grade, bits, width)


def ndcg(gains: np.ndarray, ideal_dcg: np.ndarray, k: int | None = None) -> np.ndarray:
    """``nDCG@k = DCG@k / IDCG@k``, 0 when IDCG is 0. Gains are >= 0 and the ideal counts
    every gain of the list, so DCG is 0 wherever IDCG is. An IDCG summed in another order than
    the DCG (the graded tables) can fall an ulp below it: values are capped at 1."""
    values = dcg(gains, k)
    np.divide(values, ideal_dcg, out=values, where=ideal_dcg > 0)
    return np.minimum(values, 1.0, out=values)


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
