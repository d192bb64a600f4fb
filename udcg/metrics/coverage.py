"""Q-CARE coverage metrics for retrieval (Choi et al., arXiv 2608.11238), as array kernels
(re-exported by :mod:`udcg.qcare.coverage`; the run-level measures of
:mod:`udcg.trec.coverage_measures` call them too).

A query is decomposed into sub-queries SQ; a judge (or a human) labels whether chunk j of the
retrieved list covers sub-query s. Per chunk, the coverage gain is::

    r_j = |{s in SQ covered by chunk j}| / |SQ|     (graded; denominator 1 when SQ is empty)
    r_j = 1[chunk j covers any s]                   (binary)

and per retrieved list (prompt order, position 1 first)::

    C-Prec@k = (1/k) * sum_{j<=k} r_j
    C-nDCG@k = DCG@k(r) / IDCG@k,   DCG = sum_i g(r_i) / log2(i + 1)

with IDCG the DCG of the same (truncated) list sorted by decreasing r, and C-nDCG = 0 when
IDCG = 0. As for the RAG-list ranking metrics in :mod:`udcg.metrics.ranking`, ``k`` truncates
the list first: the ideal is a re-ordering of the chunks the LLM actually sees.

The gain ``g`` is ``linear``, ``g(r) = r`` (the default: the released Q-CARE code and README),
or ``exponential``, ``g(r) = 2^(10 r) - 1`` (the released code's exponential option applied
to ``10 r``, with which the published per-query C-nDCG values were computed; it differs from
linear only when a list has chunks covering different shares of several sub-queries).

``covers`` may hold booleans or, for fractional coverage, numbers in [0, 1] (the share of
annotators who said a chunk covers a sub-query, or the judge's probability): ``r_j`` is then
the mean of the chunk's fractions over the sub-queries (binary: their maximum, which is
``1[covers any]`` on booleans).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.metrics import _kernels
from udcg.metrics._arrays import (
    as_padded,
    as_padded_matrices,
    check_finite,
    check_range,
    unmasked,
    unpad,
)
from udcg.validation import one_of, positive_int

__all__ = ["GAINS", "c_ndcg", "c_precision", "coverage", "coverage_gain"]

#: The gains of C-nDCG: ``linear`` g(r) = r, ``exponential`` g(r) = 2^(10 r) - 1.
GAINS = ("linear", "exponential")


def coverage(covers: Any, binary: bool = False) -> Any:
    """Per-chunk coverage gains ``r_j`` from ``covers[query][chunk][sub-query]`` labels.

    Graded: ``r_j = |{s covered by chunk j}| / |SQ|`` (0 for every chunk when the query has no
    sub-queries); binary: ``r_j = 1`` if chunk j covers any sub-query. ``covers`` is a 3-D
    array ``[n_queries, k, n_subqueries]`` (returns a 2-D ``[n_queries, k]`` array) or a
    ragged list of per-query ``[k_chunks, n_subqueries]`` lists (returns a list of 1-D
    arrays; a query with no chunks gives an empty array). Labels are booleans or fractions
    in [0, 1]: ``r_j`` is then the mean of chunk j's fractions (binary: their maximum).

    Examples:
        Three chunks and two sub-queries: the first chunk covers one, the second both:

        >>> covers = [[[True, False], [True, True], [False, False]]]
        >>> coverage(covers)[0].tolist(), coverage(covers, binary=True)[0].tolist()
        ([0.5, 1.0, 0.0], [1.0, 1.0, 0.0])

        Fractions (two of three annotators, then one of three, say the chunk covers):

        >>> fractional = [[[2 / 3, 1 / 3], [1.0, 0.0]]]
        >>> coverage(fractional)[0].tolist(), coverage(fractional, binary=True)[0].tolist()
        ([0.5, 0.5], [0.6666666666666666, 1.0])
    """
    cube, n_chunks, n_sub = as_padded_matrices(
        covers, "covers", ("chunks", "sub-queries"), fractions=True
    )
    if binary:
        r = cube.max(axis=2, initial=0.0)
    else:
        r = cube.sum(axis=2) / np.maximum(n_sub, 1)[:, None]
    return r if isinstance(covers, np.ndarray) else unpad(r, n_chunks)


def coverage_gain(coverage_values: Any, gain: str = "linear") -> np.ndarray:
    """The C-nDCG gain ``g(r)`` of coverage values in [0, 1]: ``linear`` ``g(r) = r``,
    ``exponential`` ``g(r) = 2^(10 r) - 1`` (0 for r = 0, 1023 for r = 1).

    Examples:
        >>> coverage_gain([0.0, 0.5, 1.0], "exponential").tolist()
        [0.0, 31.0, 1023.0]
    """
    one_of(gain, "gain", GAINS)
    try:
        r = np.array(unmasked(coverage_values, "coverage_values"), dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise UDCGInputError(f"expected numbers ({exc})", field="coverage_values") from None
    flat = r.reshape(1, -1)  # errors name the position in the values' flat order
    check_finite(flat, "coverage_values")
    check_range(flat, "coverage_values", 0.0, 1.0)
    return r if gain == "linear" else np.power(2.0, 10.0 * r) - 1.0


def _gains(coverage_values: Any, k: int | None) -> tuple[np.ndarray, np.ndarray]:
    if k is not None:
        positive_int(k, "k")
    r, lengths = as_padded(coverage_values, "coverage_values")
    check_range(r, "coverage_values", 0.0, 1.0)
    if k is not None:
        r = r[:, :k]
    return r, lengths


def c_precision(coverage_values: Any, k: int | None = None) -> np.ndarray:
    """``C-Prec@k = (1/k) * sum_{j<=k} r_j``: chunks missing from a list shorter than k count
    0; without k, divides by each list's length (0 for an empty list). ``coverage_values``:
    per-chunk ``r_j`` in [0, 1] (see :func:`coverage`), 2-D array or ragged list.

    Examples:
        >>> c_precision([[0.5, 1.0, 0.0]]).tolist(), c_precision([[0.5, 1.0, 0.0]], k=2).tolist()
        ([0.5], [0.75])
        >>> c_precision([[1.0]], k=2).tolist()  # the missing second chunk counts 0
        [0.5]
    """
    r, lengths = _gains(coverage_values, k)
    if k is None:
        return _kernels.safe_divide(_kernels.row_sums(r), lengths)
    return _kernels.precision(r, k)


def c_ndcg(coverage_values: Any, k: int | None = None, gain: str = "linear") -> np.ndarray:
    """``C-nDCG@k = DCG@k(g(r)) / IDCG@k`` with ``DCG = sum_i g(r_i) / log2(i + 1)`` and IDCG
    the DCG of the (truncated) list's own r sorted descending; 0 when IDCG = 0 (no chunk covers
    anything). ``coverage_values``: per-chunk ``r_j`` in [0, 1], 2-D array or ragged list;
    ``gain``: ``linear`` ``g(r) = r`` (default) or ``exponential`` ``g(r) = 2^(10 r) - 1``
    (see :func:`coverage_gain`).

    Examples:
        ``(0.5 + 1/log2(3)) / (1 + 0.5/log2(3))``: the ideal puts the full chunk first:

        >>> c_ndcg([[0.5, 1.0, 0.0], [0.0, 0.0, 0.0]]).round(4).tolist()
        [0.8597, 0.0]

        Exponential gain, ``g = (31, 1023, 0)``: ``(31 + 1023/log2(3)) / (1023 + 31/log2(3))``:

        >>> c_ndcg([[0.5, 1.0, 0.0]], gain="exponential").round(4).tolist()
        [0.6488]
    """
    one_of(gain, "gain", GAINS)
    r, _ = _gains(coverage_values, k)
    g = coverage_gain(r, gain) if gain != "linear" else r
    return _kernels.ndcg(g, _kernels.ideal_dcg_of_rows(g))
