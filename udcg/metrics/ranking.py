"""Classic ranking metrics for RAG lists: one row of per-position labels per query.

Input is a 2-D array ``[n_queries, k]`` or a ragged list of per-query label sequences, in
prompt order (position 1 first). Labels are graded gains (bool or numbers >= 0); the binary
metrics count a passage as relevant when its label is >= ``rel_level`` (1 by default, as
trec_eval's relevance level; any finite number: at 0 or below every passage of a list counts,
never the padding of a shorter list). ``k`` truncates each list to its first k positions; the
ideal ordering and the relevant count are those of the (truncated) list itself, since the list
is the whole context the LLM sees. Each function returns a 1-D float64 array of per-query
values.

Binary lists of at most 16 positions take a codebook path: each row's relevance pattern is
packed into an integer and the metric is read from a table that holds the kernel's value for
every possible pattern, so a batch costs a few passes over the labels whatever the metric.
Dense 2-D arrays are checked and scored in cache-sized blocks of rows, on several threads
(``_arrays.all_blocks``); other input, or a block that fails its check, takes the general path,
which also words any error.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.metrics import _kernels
from udcg.metrics._arrays import (
    all_blocks,
    as_padded,
    finite_non_negative,
    non_negative_max,
)
from udcg.validation import positive_int, show

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
    if k is not None:
        positive_int(k, "k")


def _check_rel_level(rel_level: Any) -> float:
    """``rel_level`` as a float; it must be a finite number (numpy numbers accepted, booleans
    and strings refused)."""
    is_number = isinstance(rel_level, int | float | np.integer | np.floating)
    if isinstance(rel_level, bool) or not is_number or not np.isfinite(rel_level):
        raise UDCGInputError(f"must be a finite number, got {show(rel_level)}", field="rel_level")
    return float(rel_level)


def _relevance(gains: np.ndarray, lengths: np.ndarray, rel_level: float) -> np.ndarray:
    """Bool relevance ``label >= rel_level`` of zero-padded gains; padding is never relevant."""
    return (gains >= rel_level) & (np.arange(gains.shape[1]) < lengths[:, None])


def _validated(labels: Any, k: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Zero-padded float gains (finite, >= 0) cut to k, and list lengths cut to k."""
    gains, lengths = as_padded(labels, "labels")
    if (gains < 0).any():
        row = int(np.argwhere(gains < 0)[0][0])
        raise UDCGInputError(f"row {row}: negative label", field="labels")
    if k is not None:
        gains, lengths = gains[:, :k], np.minimum(lengths, k)
    return gains, lengths


def _block_relevance(block: np.ndarray, rel_level: float) -> np.ndarray | None:
    """Bool relevance (label >= ``rel_level``) of a block of rows of a dense label array, after
    a one-pass check that labels are finite and >= 0; None when the check fails, which sends
    callers to the general path (it also words any error)."""
    if block.dtype == np.bool_:
        return block if 0 < rel_level <= 1 else None
    return block >= rel_level if finite_non_negative(block) else None


def _dense_per_row(
    labels: Any, k: int | None, per_block: Callable[[np.ndarray], np.ndarray | None]
) -> np.ndarray | None:
    """``per_block`` applied to blocks of rows of a dense 2-D label array cut to k (integers
    read as float64); None when the input is not such an array or ``per_block`` declines a
    block, which sends callers to the general path."""
    if type(labels) is not np.ndarray or labels.ndim != 2:  # a masked array: the general path
        return None
    cut = labels if k is None else labels[:, :k]
    out = np.empty(len(cut))

    def work(rows: slice) -> bool:
        block = cut[rows]
        if block.dtype.kind in "iu":
            block = block.astype(np.float64)
        values = per_block(block)
        if values is not None:
            out[rows] = values
        return values is not None

    return out if all_blocks(cut, work) else None


@lru_cache(maxsize=64)
def _codebook(metric: str, width: int) -> np.ndarray:
    """The kernel's value for every relevance pattern of ``width`` positions (bit j = rank j+1)."""
    patterns = (np.arange(2**width)[:, None] >> np.arange(width)) & 1
    return _BINARY_KERNELS[metric](patterns.astype(np.float64))


@lru_cache(maxsize=64)
def _bit_values(width: int) -> np.ndarray:
    return 2.0 ** np.arange(width, dtype=np.float32)


def _pack(relevant: np.ndarray) -> np.ndarray:
    """Row patterns as integers, bit j set when position j+1 is relevant: the 0/1 matrix times
    ``2**j`` in float32 (exact below 2**24, so for up to 16 positions)."""
    bits = relevant.view(np.uint8).astype(np.float32)
    return (bits @ _bit_values(relevant.shape[1])).astype(np.intp)


def _per_row(metric: str, relevant: np.ndarray) -> np.ndarray:
    """``metric`` of each row of a bool relevance matrix."""
    if relevant.shape[1] <= _CODEBOOK_MAX_WIDTH:
        return _codebook(metric, relevant.shape[1]).take(_pack(relevant))
    return _BINARY_KERNELS[metric](relevant.astype(np.float64))


def _binary_metric(
    metric: str, labels: Any, k: int | None, rel_level: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(values, lengths)``: ``metric`` of each list, a passage counting as relevant when its
    label >= rel_level, and the list lengths cut to k (one number when all are equal)."""
    _check_k(k)
    rel_level = _check_rel_level(rel_level)

    def per_block(block: np.ndarray) -> np.ndarray | None:
        relevant = _block_relevance(block, rel_level)
        return None if relevant is None else _per_row(metric, relevant)

    fast = _dense_per_row(labels, k, per_block)
    if fast is not None:
        return fast, np.asarray(labels.shape[1] if k is None else min(k, labels.shape[1]))
    gains, lengths = _validated(labels, k)
    return _per_row(metric, _relevance(gains, lengths, rel_level)), lengths


def _ndcg_block(block: np.ndarray) -> np.ndarray | None:
    """nDCG of a block of rows: 0/1 labels through the codebook, other gains through the
    kernels; None when a label is not finite and >= 0."""
    if block.dtype == np.bool_:
        return _per_row("ndcg", block)
    top = non_negative_max(block)
    if top is None:
        return None
    if top <= 1:
        relevant = block >= 1
        if np.array_equal(relevant, block > 0):  # nothing strictly between 0 and 1
            return _per_row("ndcg", relevant)
    return _kernels.ndcg(block, _kernels.ideal_dcg_of_rows(block, top))


def context_ndcg(labels: Any, k: int | None = None) -> np.ndarray:
    """``nDCG@k = DCG@k / IDCG@k`` with linear gain, ``DCG = sum_i g_i / log2(i + 1)``, the
    ideal being the same list sorted by decreasing gain; 0 for a list with no gain.

    The context is all there is: unlike trec_eval's ``nDCG@k`` (:func:`udcg.evaluate`), whose
    ideal ranks every judged document of the query, a relevant passage the retriever missed
    does not lower this value.

    Examples:
        Gains 1 and 2 at ranks 1 and 2: ``(1 + 2/log2(3)) / (2 + 1/log2(3))``:

        >>> context_ndcg([[1, 2, 0], [0, 0, 0]]).round(4).tolist()
        [0.8597, 0.0]
    """
    _check_k(k)
    fast = _dense_per_row(labels, k, _ndcg_block)
    if fast is not None:
        return fast
    gains, _ = _validated(labels, k)
    return _kernels.ndcg(gains, _kernels.ideal_dcg_of_rows(gains))


def context_average_precision(
    labels: Any, k: int | None = None, rel_level: float = 1
) -> np.ndarray:
    """``AP@k = (1/R) * sum_i rel_i * P@i`` with R the relevant passages in the list; 0 if R=0
    (trec_eval's ``AP`` divides by every relevant judged document instead).

    Examples:
        Relevant at ranks 2 and 3: ``(1/2 + 2/3) / 2``:

        >>> context_average_precision([[0, 1, 1]]).round(4).tolist()
        [0.5833]
    """
    return _binary_metric("average_precision", labels, k, rel_level)[0]


def reciprocal_rank(labels: Any, k: int | None = None, rel_level: float = 1) -> np.ndarray:
    """``RR = 1 / rank`` of the first relevant passage, 0 if there is none.

    Examples:
        >>> reciprocal_rank([[0, 1, 1], [0, 0], [2]]).tolist()
        [0.5, 0.0, 1.0]
        >>> reciprocal_rank([[0, 1, 2]], rel_level=2).round(4).tolist()
        [0.3333]
    """
    return _binary_metric("reciprocal_rank", labels, k, rel_level)[0]


def precision(labels: Any, k: int | None = None, rel_level: float = 1) -> np.ndarray:
    """``P@k = |relevant in top k| / k``; without k, divides by each list's length.

    Examples:
        >>> precision([[0, 1, 1], [1]]).round(4).tolist()
        [0.6667, 1.0]
        >>> precision([[0, 1, 1], [1]], k=2).tolist()
        [0.5, 0.5]
    """
    count, lengths = _binary_metric("relevant_count", labels, k, rel_level)
    if k is None:
        return _kernels.safe_divide(count, lengths)
    return np.divide(count, k, out=count)


def hits(labels: Any, k: int | None = None, rel_level: float = 1) -> np.ndarray:
    """``Hits@k = 1`` if any of the first k passages is relevant, else 0.

    Examples:
        >>> hits([[0, 1, 1], [1, 0, 0]], k=1).tolist()
        [0.0, 1.0]
    """
    return _binary_metric("hits", labels, k, rel_level)[0]
