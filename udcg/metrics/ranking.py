"""Classic ranking metrics for RAG lists: one row of per-position labels per query.

Input is a 2-D array ``[n_queries, k]`` or a ragged list of per-query label sequences, in
prompt order (position 1 first). Labels are graded gains (bool or numbers >= 0); the binary
metrics count a passage as relevant when its label is >= ``rel_level`` (1 by default, as
trec_eval). ``k`` truncates each list to its first k positions; the ideal ordering and the
relevant count are those of the (truncated) list itself, since the list is the whole context
the LLM sees. Each function returns a 1-D float64 array of per-query values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.metrics import _kernels
from udcg.metrics._arrays import as_padded


def _labels(labels: Any, k: int | None) -> tuple[np.ndarray, np.ndarray]:
    if k is not None and (not isinstance(k, int | np.integer) or k < 1):
        raise UDCGInputError(f"k must be a positive integer, got {k!r}", field="k")
    gains, lengths = as_padded(labels, "labels")
    if (gains < 0).any():
        row = int(np.argwhere(gains < 0)[0][0])
        raise UDCGInputError(f"row {row}: negative label", field="labels")
    if k is not None:
        gains = gains[:, :k]
        lengths = np.minimum(lengths, k)
    return gains, lengths


def _binary(gains: np.ndarray, rel_level: float) -> np.ndarray:
    return (gains >= rel_level).astype(np.float64)


def ndcg(labels: Any, k: int | None = None) -> np.ndarray:
    """``nDCG@k = DCG@k / IDCG@k`` with linear gain, ``DCG = sum_i g_i / log2(i + 1)``, the
    ideal being the same list sorted by decreasing gain; 0 for a list with no gain."""
    gains, _ = _labels(labels, k)
    return _kernels.ndcg(gains, _kernels.ideal_dcg_of_rows(gains))


def average_precision(labels: Any, k: int | None = None, rel_level: float = 1) -> np.ndarray:
    """``AP@k = (1/R) * sum_i rel_i * P@i`` with R the relevant passages in the list; 0 if R=0."""
    rel = _binary(_labels(labels, k)[0], rel_level)
    return _kernels.average_precision(rel, rel.sum(axis=1))


def reciprocal_rank(labels: Any, k: int | None = None, rel_level: float = 1) -> np.ndarray:
    """``RR = 1 / rank`` of the first relevant passage, 0 if there is none."""
    return _kernels.reciprocal_rank(_binary(_labels(labels, k)[0], rel_level))


def precision(labels: Any, k: int | None = None, rel_level: float = 1) -> np.ndarray:
    """``P@k = |relevant in top k| / k``; without k, divides by each list's length."""
    gains, lengths = _labels(labels, k)
    rel = _binary(gains, rel_level)
    if k is None:
        return _kernels.safe_divide(rel.sum(axis=1), lengths)
    return _kernels.precision(rel, k)


def hits(labels: Any, k: int | None = None, rel_level: float = 1) -> np.ndarray:
    """``Hits@k = 1`` if any of the first k passages is relevant, else 0."""
    return _kernels.hits(_binary(_labels(labels, k)[0], rel_level))
