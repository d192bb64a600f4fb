"""Vectorised ranking kernels on zero-padded ``[n_queries, depth]`` arrays.

Both entry points use these: the RAG-list functions in :mod:`udcg.metrics` and the
trec_eval-compatible engine in :mod:`udcg.trec.engine`. Rows are ranked lists (position 0 is
rank 1); padding is 0, which adds nothing to any sum below.

A row's value depends on that row alone, bit for bit: every sum over a row is added left to
right (:func:`row_sums`), never by ``np.sum``'s pairwise blocks or a matrix product, whose
order follows the array's width and the BLAS kernel; zeros added anywhere leave such a sum as
it is. DCG and IDCG are the same sum over the same discounts, so an ideal list scores 1.0.
"""

from __future__ import annotations

from functools import cache, lru_cache

import numpy as np

_DISCOUNT_CHUNK = 1024


@cache
def _discount_chunk(chunk: int) -> np.ndarray:
    """``1 / log2(i + 1)`` for ranks ``1024 * chunk + 1 .. 1024 * (chunk + 1)``: each value
    is always computed at the same place of the same array, so its bits never vary."""
    start = 2 + _DISCOUNT_CHUNK * chunk
    out = 1.0 / np.log2(np.arange(start, start + _DISCOUNT_CHUNK, dtype=np.float64))
    out.flags.writeable = False
    return out


@lru_cache(maxsize=8)
def _discount_table(chunks: int) -> np.ndarray:
    table = np.concatenate([_discount_chunk(c) for c in range(chunks)])
    table.flags.writeable = False
    return table


def discounts(depth: int) -> np.ndarray:
    """``1 / log2(i + 1)`` for ranks ``i = 1..depth`` (read-only; one table for every depth)."""
    return _discount_table(max(1, -(-depth // _DISCOUNT_CHUNK)))[:depth]


@lru_cache(maxsize=8)
def _cumulative_table(chunks: int) -> np.ndarray:
    table = np.concatenate(([0.0], np.cumsum(_discount_table(chunks))))
    table.flags.writeable = False
    return table


def cumulative_discounts(depth: int) -> np.ndarray:
    """``C[n]``, the first n discounts added left to right, for ``n = 0..depth``: the DCG of a
    list whose first n gains are 1 and the rest 0, bit for bit as :func:`dcg` sums it."""
    return _cumulative_table(max(1, -(-depth // _DISCOUNT_CHUNK)))[: depth + 1]


def row_sums(values: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Each row's sum (float64), or with ``weights`` (one per column) of ``values[:, j] *
    weights[j]``, added left to right one column at a time. Unlike ``np.sum`` (pairwise blocks
    that follow the row length) or a matrix product (a kernel chosen by shape), a row's sum
    does not depend on the other rows, the array's width or trailing zeros."""
    out = np.zeros(values.shape[0])
    term = np.empty_like(out) if weights is not None else None
    for j in range(values.shape[1]):
        if term is None:
            out += values[:, j]
        else:
            np.multiply(values[:, j], weights[j], out=term)
            out += term
    return out


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
    return row_sums(g, discounts(g.shape[1]))


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


def ideal_dcg_of_counts(at_least: np.ndarray, depth: int) -> np.ndarray:
    """DCG@depth of each row's integer gains sorted decreasing, from ``at_least[:, L - 1]``,
    the row's count of gains >= L (L = 1..top). Summed as :func:`dcg` sums that sorted list
    (the gain at rank j + 1 is the number of levels L with more than j gains >= L), so a list
    in that order scores exactly 1.0. Rows are visited longest first, each only while it has
    gains left."""
    at_least = np.minimum(at_least, depth)
    if at_least.shape[1] == 0:
        return np.zeros(len(at_least))
    if at_least.shape[1] == 1:  # binary gains: the sum of the first n discounts
        return cumulative_discounts(depth)[at_least[:, 0]]
    order = np.argsort(-at_least[:, 0], kind="stable")
    ranked = at_least[order]
    longest = ranked[:, 0]
    d = discounts(depth)
    sums = np.zeros(len(ranked))
    for j in range(int(longest.max(initial=0))):
        active = int(np.count_nonzero(longest > j))  # a prefix: rows are longest first
        sums[:active] += np.count_nonzero(ranked[:active] > j, axis=1) * d[j]
    out = np.empty_like(sums)
    out[order] = sums
    return out


def _ideal_dcg_of_codes(codes: np.ndarray, top: int, bits: int, width: int) -> np.ndarray:
    """IDCG from packed grade counts (see ``_grade_counts``): the count of grades >= L for
    each level L, then :func:`ideal_dcg_of_counts`."""
    at_least = np.zeros((len(codes), top), dtype=np.int64)
    running = np.zeros(len(codes), dtype=np.int64)
    for level in range(top, 0, -1):
        running += (codes >> (bits * level)) & ((1 << bits) - 1)
        at_least[:, level - 1] = running
    return ideal_dcg_of_counts(at_least, width)  # table codes may count past width


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
    every gain of the list, so DCG is 0 wherever IDCG is. ``ideal_dcg`` must be summed as
    :func:`dcg` sums (:func:`ideal_dcg_of_counts`, or :func:`dcg` of the sorted gains), so that
    a list in its ideal order scores exactly 1.0; values are capped at 1 all the same."""
    values = dcg(gains, k)
    np.divide(values, ideal_dcg, out=values, where=ideal_dcg > 0)
    return np.minimum(values, 1.0, out=values)


def average_precision(
    is_rel: np.ndarray, n_relevant: np.ndarray, k: int | None = None
) -> np.ndarray:
    """``AP@k = sum_{i<=k} rel_i * P@i / n_relevant``, 0 when there is nothing relevant."""
    r = _cut(is_rel, k)
    precision_at = np.cumsum(r, axis=1) / np.arange(1, r.shape[1] + 1)
    return safe_divide(row_sums(precision_at * r), n_relevant)


def reciprocal_rank(is_rel: np.ndarray, k: int | None = None) -> np.ndarray:
    """``RR@k = 1 / rank`` of the first relevant item within the top k, else 0."""
    r = _cut(is_rel, k)
    if r.shape[1] == 0:
        return np.zeros(r.shape[0])
    first = np.argmax(r > 0, axis=1)
    found = r[np.arange(r.shape[0]), first] > 0
    return np.where(found, 1.0 / (first + 1.0), 0.0)


def precision(is_rel: np.ndarray, k: int | np.ndarray) -> np.ndarray:
    """``P@k = |relevant in top k| / k`` (k counts missing ranks too, as trec_eval does);
    graded values (C-Prec) are added left to right."""
    depth = int(np.max(k)) if np.ndim(k) else int(k)
    return row_sums(_cut(is_rel, depth)) / k


def recall(is_rel: np.ndarray, n_relevant: np.ndarray, k: int | None = None) -> np.ndarray:
    """``R@k = |relevant in top k| / n_relevant``, 0 when there is nothing relevant."""
    return safe_divide(_cut(is_rel, k).sum(axis=1), n_relevant)


def hits(is_rel: np.ndarray, k: int | None = None) -> np.ndarray:
    """``Hits@k = 1`` if any of the top k is relevant, else 0."""
    return (_cut(is_rel, k) > 0).any(axis=1).astype(np.float64)
