"""Q-CARE generator metrics (Choi et al., arXiv 2608.11238): how well an answer covers the
query, stays on topic and is backed by the retrieved chunks.

Label structures, one entry per query (ragged lists of lists; a 2-D / 3-D array works when
every query has the same sizes):

* ``subquery_covered[q]``: ``[n_subqueries]`` booleans, the answer covers sub-query s.
* ``claim_relevance[q]``: ``[n_claims, n_subqueries]`` booleans, atomic claim f of the answer
  is relevant to sub-query s (same sub-query order as ``subquery_covered[q]``).
* ``claim_support[q]``: ``[n_claims, k_chunks]`` booleans, claim f is supported by retrieved
  chunk j.

A query with no claims may be given as ``[]``. Claims are counted as given: duplicate claims
count twice, so deduplicate them before labelling if that is not wanted. Booleans may be
given as True/False or 0/1.

Metrics, per query::

    Completeness   = |{s covered}| / |SQ|
    Conciseness    = |{f relevant to at least one covered s}| / |F|
    Verifiableness = |{f supported by at least one chunk}| / |F|

A value is undefined when its denominator is 0 (no sub-queries for completeness, no claims for
conciseness and verifiableness). Undefined values are reported as missing, never as 0 or NaN:
each function returns a float64 :class:`numpy.ma.MaskedArray` with ``mask=True`` there, so
``values.mean()`` averages the defined queries only and ``values.mask.sum()`` counts the
missing ones (``values.mean()`` is ``numpy.ma.masked`` when every query is missing). A query
with claims but no sub-queries has conciseness 0: no claim can be relevant to a covered
sub-query.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.metrics._arrays import as_padded, as_padded_matrices
from udcg.metrics._kernels import safe_divide
from udcg.validation import show

__all__ = ["completeness", "conciseness", "verifiableness"]


def _bool_rows(values: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Zero-padded bool ``[n, max_len]`` array and lengths from per-query boolean sequences."""
    padded, lengths = as_padded(values, name)
    bad = (padded != 0) & (padded != 1)
    if bad.any():
        q, s = (int(x) for x in np.argwhere(bad)[0])
        raise UDCGInputError(
            f"query {q}, position {s}: {show(padded[q, s])} is not a boolean "
            "(expected True/False or 0/1)",
            field=name,
        )
    return padded.astype(bool), lengths


def _masked(count: np.ndarray, total: np.ndarray) -> np.ma.MaskedArray:
    """``count / total`` with the entries where ``total == 0`` masked as missing."""
    return np.ma.MaskedArray(safe_divide(count, total), mask=total == 0, shrink=False)


def completeness(subquery_covered: Any) -> np.ma.MaskedArray:
    """``Completeness = |{s covered by the answer}| / |SQ|``; missing (masked) when a query
    has no sub-queries.

    Examples:
        Two of three sub-queries covered; the second query has none (missing, not 0):

        >>> values = completeness([[True, False, True], []])
        >>> values.round(4).tolist(), round(float(values.mean()), 4)
        ([0.6667, None], 0.6667)
    """
    covered, n_sub = _bool_rows(subquery_covered, "subquery_covered")
    return _masked(covered.sum(axis=1), n_sub)


def conciseness(claim_relevance: Any, subquery_covered: Any) -> np.ma.MaskedArray:
    """``Conciseness = |{f : exists covered s with f relevant to s}| / |F|``; missing (masked)
    when a query has no claims. ``claim_relevance[q]`` has one column per entry of
    ``subquery_covered[q]``.

    Examples:
        Claim 1 is relevant to the covered sub-query, claim 2 only to the uncovered one, claim
        3 to none:

        >>> relevance = [[[True, False], [False, True], [False, False]]]
        >>> conciseness(relevance, [[True, False]]).round(4).tolist()
        [0.3333]
    """
    covered, n_sub = _bool_rows(subquery_covered, "subquery_covered")
    relevance, n_claims, n_cols = as_padded_matrices(
        claim_relevance, "claim_relevance", ("claims", "sub-queries")
    )
    if len(n_claims) != len(n_sub):
        raise UDCGInputError(
            f"claim_relevance has {len(n_claims)} queries but subquery_covered has {len(n_sub)}",
            field="claim_relevance",
        )
    bad = (n_claims > 0) & (n_cols != n_sub)
    if bad.any():
        q = int(np.argmax(bad))
        raise UDCGInputError(
            f"query {q}: claim_relevance has {n_cols[q]} sub-query columns but "
            f"subquery_covered has {n_sub[q]} sub-queries",
            field="claim_relevance",
        )
    # align the padded widths; past each query's own sub-queries both are padding (False)
    width = relevance.shape[2]
    aligned = np.zeros((len(n_sub), width), dtype=bool)
    shared = min(width, covered.shape[1])
    aligned[:, :shared] = covered[:, :shared]
    on_topic = (relevance & aligned[:, None, :]).any(axis=2)
    return _masked(on_topic.sum(axis=1), n_claims)


def verifiableness(claim_support: Any) -> np.ma.MaskedArray:
    """``Verifiableness = |{f : exists chunk j supporting f}| / |F|``; missing (masked) when a
    query has no claims.

    Examples:
        Of two claims, one is supported by the first chunk; the second query makes no claim:

        >>> verifiableness([[[True, False], [False, False]], []]).tolist()
        [0.5, None]
    """
    support, n_claims, _ = as_padded_matrices(claim_support, "claim_support", ("claims", "chunks"))
    return _masked(support.any(axis=2).sum(axis=1), n_claims)
