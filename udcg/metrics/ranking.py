"""Classic ranking metrics for RAG lists: one row of per-position labels per query.

Input is a 2-D array ``[n_queries, k]`` or a ragged list of per-query label sequences, in
prompt order (position 1 first). Labels are graded gains (bool or numbers >= 0); the binary
metrics count a passage as relevant when its label is >= ``rel_level`` (1 by default, as
trec_eval). ``k`` truncates each list to its first k positions; the ideal ordering and the
relevant count are those of the (truncated) list itself, since the list is the whole context
the LLM sees. Each function returns a 1-D float64 array of per-query values.

Binary lists of at most 16 positions take a codebook path: each row's relevance pattern is
packed into an integer and the metric is read from a table that holds the kernel's value for
every possible pattern, so a batch costs a few passes over the labels whatever the metric.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.metrics import _kernels
from udcg.metrics._arrays import (
    as_padded,
    finite_non_negative,
    full_lengths,
    in_unit_interval,
)

_CODEBOOK_MAX_WIDTH = 16

# metric name -> kernel on a float 0/1 relevance matrix (all rows of full width)
_BINARY_KERNELS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "ndcg": lambda rel: _kernels.ndcg(rel, _kernels.ideal_dcg_of_rows(rel)),
    "average_precision": lambda rel: _kernels.average_precision(rel, rel.sum(axis=1)),
    "reciprocal_rank": _kernels.reciprocal_rank,
    "relevant_count": lambda rel: rel.sum(axis=1),
    "hits": _kernels.hits,
}


def _check_k(k: int | None) -> None:
    if k is not None and (isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1):
        raise UDCGInputError(f"k must be a positive integer, got {k!r}", field="k")


def _validated(labels: Any, k: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Zero-padded float gains (finite, >= 0) cut to k, and list lengths cut to k."""
    if isinstance(labels, np.ndarray) and labels.ndim == 2 and finite_non_negative(labels):
        gains = labels  # valid as it is: one pass instead of the general checks
        lengths = full_lengths(gains)
    else:
        gains, lengths = as_padded(labels, "labels")
        if (gains < 0).any():
            row = int(np.argwhere(gains < 0)[0][0])
            raise UDCGInputError(f"row {row}: negative label", field="labels")
    if k is not None:
        gains, lengths = gains[:, :k], np.minimum(lengths, k)
    return gains, lengths


def _binary_rows(
    labels: Any, k: int | None, rel_level: float, exact: bool = False
) -> tuple[np.ndarray, np.ndarray] | None:
    """``(relevant, lengths)`` as a bool matrix (label >= ``rel_level``) for a dense 2-D array
    whose labels are checked in a pass or two; None sends callers to the general path, which
    also words any error. ``exact``: the labels must be 0/1 themselves (nDCG reads gains)."""
    if not isinstance(labels, np.ndarray) or labels.ndim != 2:
        return None
    cut = labels if k is None else labels[:, :k]
    lengths = full_lengths(cut)
    if cut.dtype == np.bool_:
        return (cut, lengths) if 0 < rel_level <= 1 else None
    if cut.dtype.kind in "iu":
        cut = cut.astype(np.float64)
    if exact:
        # in [0, 1], and nothing strictly between: as many non-zeros as ones
        if not in_unit_interval(cut):
            return None
        relevant = cut >= 1
        if np.count_nonzero(cut) != np.count_nonzero(relevant):
            return None
        return relevant, lengths
    if not finite_non_negative(cut):
        return None
    return cut >= rel_level, lengths


@lru_cache(maxsize=64)
def _codebook(metric: str, width: int) -> np.ndarray:
    """The kernel's value for every relevance pattern of ``width`` positions (bit j = rank j+1)."""
    patterns = (np.arange(2**width)[:, None] >> np.arange(width)) & 1
    return _BINARY_KERNELS[metric](patterns.astype(np.float64))


def _pack(relevant: np.ndarray) -> np.ndarray:
    """Row patterns as integers, bit j set when position j+1 is relevant."""
    codes = np.zeros(len(relevant), dtype=np.uint16)
    columns = relevant.view(np.uint8)
    for j in range(relevant.shape[1]):
        codes |= columns[:, j].astype(np.uint16) << np.uint16(j)
    return codes


def _per_row(metric: str, relevant: np.ndarray) -> np.ndarray:
    """``metric`` of each row of a bool relevance matrix."""
    if relevant.shape[1] <= _CODEBOOK_MAX_WIDTH:
        return _codebook(metric, relevant.shape[1])[_pack(relevant)]
    return _BINARY_KERNELS[metric](relevant.astype(np.float64))


def _relevance(labels: Any, k: int | None, rel_level: float) -> tuple[np.ndarray, np.ndarray]:
    _check_k(k)
    fast = _binary_rows(labels, k, rel_level)
    if fast is not None:
        return fast
    gains, lengths = _validated(labels, k)
    return gains >= rel_level, lengths


def ndcg(labels: Any, k: int | None = None) -> np.ndarray:
    """``nDCG@k = DCG@k / IDCG@k`` with linear gain, ``DCG = sum_i g_i / log2(i + 1)``, the
    ideal being the same list sorted by decreasing gain; 0 for a list with no gain."""
    _check_k(k)
    fast = _binary_rows(labels, k, 1, exact=True)
    if fast is not None:
        return _per_row("ndcg", fast[0])
    gains, _ = _validated(labels, k)
    return _kernels.ndcg(gains, _kernels.ideal_dcg_of_rows(gains))


def average_precision(labels: Any, k: int | None = None, rel_level: float = 1) -> np.ndarray:
    """``AP@k = (1/R) * sum_i rel_i * P@i`` with R the relevant passages in the list; 0 if R=0."""
    return _per_row("average_precision", _relevance(labels, k, rel_level)[0])


def reciprocal_rank(labels: Any, k: int | None = None, rel_level: float = 1) -> np.ndarray:
    """``RR = 1 / rank`` of the first relevant passage, 0 if there is none."""
    return _per_row("reciprocal_rank", _relevance(labels, k, rel_level)[0])


def precision(labels: Any, k: int | None = None, rel_level: float = 1) -> np.ndarray:
    """``P@k = |relevant in top k| / k``; without k, divides by each list's length."""
    relevant, lengths = _relevance(labels, k, rel_level)
    count = _per_row("relevant_count", relevant)
    return count / k if k is not None else _kernels.safe_divide(count, lengths)


def hits(labels: Any, k: int | None = None, rel_level: float = 1) -> np.ndarray:
    """``Hits@k = 1`` if any of the first k passages is relevant, else 0."""
    return _per_row("hits", _relevance(labels, k, rel_level)[0])
