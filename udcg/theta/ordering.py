"""Which passages to put in a context, and in which order, for UDCG-theta and by heuristics.

UDCG-theta's logit is a sum of one term per (passage, position)::

    c[j, i] = alpha_i * r_j * u_j + beta_i * (1 - r_j) * u_j

so the order of n candidates over positions 1..m that maximises it is a linear assignment
problem (rectangular when n > m: choosing m of n), solved exactly by
:func:`scipy.optimize.linear_sum_assignment`. Positions after m are empty (zero terms).

Ties: among the assignments whose sum is within ``1e-12 * (1 + sum |c|)`` of the maximum,
:func:`best_assignment` returns the one whose list of candidate indices (position 1 first) is
lexicographically smallest: the retriever's order wins every tie.

The heuristic orders return candidate indices (0-based, in retriever rank order) for positions
1..m, ``m = min(k, n)``; :data:`ORDERINGS` names and describes every ordering.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from udcg.errors import UDCGInputError
from udcg.validation import float_vector, integer, one_of, positive_int, show

__all__ = [
    "ORDERINGS",
    "best_assignment",
    "ends_order",
    "gold_first_order",
    "order_by",
    "position_terms",
    "retriever_order",
    "reversed_order",
]

ORDERINGS: dict[str, str] = {
    "theta": "UDCG-theta's best choice and order of k of the candidates (linear assignment)",
    "retriever": "the first k candidates as ranked",
    "reversed": "the first k candidates, reversed (best last, nearest the question)",
    "ends": "best at both ends: ranks 1, 3, 5, ... from the front, 2, 4, 6, ... from the back",
    "gold_first": "oracle: relevant candidates first, then the others, each in retriever order",
}

_FORBIDDEN = -np.inf


def _weights(alpha: Any, beta: Any) -> tuple[np.ndarray, np.ndarray]:
    a = float_vector(alpha, "alpha")
    b = float_vector(beta, "beta", a.shape[0], "alpha")
    if a.shape[0] == 0:
        raise UDCGInputError("no positions (empty weights)", field="alpha")
    return a, b


def _candidates(relevant: Any, utility: Any) -> tuple[np.ndarray, np.ndarray]:
    r = float_vector(relevant, "relevant")
    u = float_vector(utility, "utility", r.shape[0], "relevant")
    for name, values in (("relevant", r), ("utility", u)):
        bad = (values < 0) | (values > 1)
        if bad.any():
            pos = int(np.argmax(bad))
            raise UDCGInputError(
                f"candidate {pos}: {show(values[pos])} is outside [0, 1]", field=name
            )
    return r, u


def position_terms(alpha: Any, beta: Any, relevant: Any, utility: Any) -> np.ndarray:
    """``[n, k]`` float64: ``c[j, i] = alpha_i r_j u_j + beta_i (1 - r_j) u_j``, the logit term
    of candidate j placed at position i (``relevant`` in [0, 1], soft allowed; ``utility`` in
    [0, 1]).

    Examples:
        Candidate 0 irrelevant (u 0.5), 1 and 2 relevant (u 0.4, 0.8); alpha = (2, 1),
        beta = (-1, -1):

        >>> position_terms([2, 1], [-1, -1], [0, 1, 1], [0.5, 0.4, 0.8]).tolist()
        [[-0.5, -0.5], [0.8, 0.4], [1.6, 0.8]]
    """
    a, b = _weights(alpha, beta)
    r, u = _candidates(relevant, utility)
    helpful = r * u
    return np.outer(helpful, a) + np.outer(u - helpful, b)


def _solve(terms: np.ndarray) -> tuple[np.ndarray, float]:
    """Candidates for each column of ``terms`` (an ``[n, m]`` matrix, n >= m) maximising the
    sum, and that sum; ``-inf`` entries are forbidden (``-inf`` when nothing is feasible)."""
    if terms.shape[1] == 0:
        return np.zeros(0, dtype=np.int64), 0.0
    finite = np.where(np.isfinite(terms), terms, 0.0)
    # a forbidden entry costs more than any feasible assignment can gain
    big = 1.0 + 2.0 * terms.shape[1] * (np.abs(finite).max() + 1.0)
    rows, cols = linear_sum_assignment(np.where(np.isfinite(terms), terms, -big), maximize=True)
    chosen = np.empty(terms.shape[1], dtype=np.int64)
    chosen[cols] = rows
    values = terms[chosen, np.arange(terms.shape[1])]
    return chosen, float(values.sum()) if np.isfinite(values).all() else _FORBIDDEN


def _is_unique(terms: np.ndarray, chosen: np.ndarray, best: float, tol: float) -> bool:
    """Whether every other assignment scores below ``best - tol``: each one leaves out at least
    one edge of ``chosen``, so forbidding each edge in turn bounds them all."""
    for i, j in enumerate(chosen):
        trial = terms.copy()
        trial[j, i] = _FORBIDDEN
        if _solve(trial)[1] >= best - tol:
            return False
    return True


def _lexicographic(terms: np.ndarray, chosen: np.ndarray, best: float, tol: float) -> np.ndarray:
    """The lexicographically smallest assignment scoring at least ``best - tol``: position by
    position, the lowest candidate index that still completes to such an assignment
    (candidates with identical rows are interchangeable, so only the lowest unused one of each
    group is tried)."""
    n, m = terms.shape
    _, group = np.unique(terms, axis=0, return_inverse=True)
    group = group.reshape(-1)
    used = np.zeros(n, dtype=bool)
    out = chosen.copy()
    fixed_sum = 0.0
    for i in range(m):
        tried: set[int] = set()
        for j in range(int(out[i])):
            if used[j] or group[j] in tried:
                continue
            tried.add(int(group[j]))
            rest = np.flatnonzero(~used)
            rest = rest[rest != j]
            sub, value = _solve(terms[np.ix_(rest, np.arange(i + 1, m))])
            if fixed_sum + terms[j, i] + value >= best - tol:
                out[i] = j
                out[i + 1 :] = rest[sub]
                break
        used[out[i]] = True
        fixed_sum += terms[out[i], i]
    return out


def best_assignment(
    alpha: Any, beta: Any, relevant: Any, utility: Any, k: int | None = None
) -> tuple[np.ndarray, float]:
    """``(order, logit)``: the indices (into the n candidates) of the passages for positions
    1..m, ``m = min(k, n)``, maximising ``sum_i c[order[i], i]`` (:func:`position_terms`), and
    that maximum (the logit without the intercept). ``k`` defaults to ``len(alpha)`` and may
    not exceed it. Ties go to the lexicographically smallest index list (module docstring).

    Examples:
        With the terms of :func:`position_terms`' example, 1.6 + 0.4 beats 0.8 + 0.8:

        >>> order, logit = best_assignment([2, 1], [-1, -1], [0, 1, 1], [0.5, 0.4, 0.8])
        >>> order.tolist(), round(logit, 4)
        ([2, 1], 2.0)
    """
    terms = position_terms(alpha, beta, relevant, utility)
    n, n_positions = terms.shape
    k = n_positions if k is None else positive_int(k, "k")
    if k > n_positions:
        raise UDCGInputError(f"k={k} is larger than the weights' k={n_positions}", field="k")
    terms = terms[:, : min(k, n)]
    chosen, best = _solve(terms)
    tol = 1e-12 * (1.0 + float(np.abs(terms).sum()))
    if not _is_unique(terms, chosen, best, tol):
        chosen = _lexicographic(terms, chosen, best, tol)
    return chosen, float(terms[chosen, np.arange(terms.shape[1])].sum())


# --------------------------------------------------------------------------------------------
# heuristic orders


def _sizes(n_candidates: Any, k: Any) -> int:
    n = integer(n_candidates, "n_candidates")
    if n < 0:
        raise UDCGInputError(f"must be >= 0, got {n}", field="n_candidates")
    return min(positive_int(k, "k"), n)


def retriever_order(n_candidates: int, k: int) -> np.ndarray:
    """The first ``min(k, n)`` candidates as ranked: ``[0, 1, ..., m-1]``.

    Examples:
        >>> retriever_order(5, 3).tolist(), retriever_order(2, 5).tolist()
        ([0, 1, 2], [0, 1])
    """
    return np.arange(_sizes(n_candidates, k), dtype=np.int64)


def reversed_order(n_candidates: int, k: int) -> np.ndarray:
    """The first ``m`` candidates reversed: rank 1 at position m (last, nearest the question).

    Examples:
        >>> reversed_order(5, 3).tolist()
        [2, 1, 0]
    """
    return retriever_order(n_candidates, k)[::-1].copy()


def ends_order(n_candidates: int, k: int) -> np.ndarray:
    """Best at both ends (for "lost in the middle"): of the first m candidates, ranks 1, 3,
    5, ... fill positions 1, 2, 3, ... and ranks 2, 4, 6, ... fill positions m, m-1, ...;
    ``ends_order(5, 5) == [0, 2, 4, 3, 1]``.

    Examples:
        >>> ends_order(5, 5).tolist(), ends_order(5, 4).tolist()
        ([0, 2, 4, 3, 1], [0, 2, 3, 1])
    """
    m = _sizes(n_candidates, k)
    return np.concatenate([np.arange(0, m, 2), np.arange(1, m, 2)[::-1]]).astype(np.int64)


def gold_first_order(relevant: Any, k: int) -> np.ndarray:
    """Oracle order: candidates with ``relevant > 0`` first, then the others, each group in
    retriever order; the first ``min(k, n)`` of them.

    Examples:
        >>> gold_first_order([0, 1, 0, 1], k=3).tolist()
        [1, 3, 0]
    """
    rel = float_vector(relevant, "relevant")
    m = _sizes(rel.shape[0], k)
    return np.argsort(rel <= 0, kind="stable")[:m].astype(np.int64)


def order_by(
    ordering: str,
    relevant: Any,
    utility: Any,
    k: int,
    alpha: Any = None,
    beta: Any = None,
) -> np.ndarray:
    """Candidate indices for positions 1..min(k, n) by the ordering called ``ordering`` (a key
    of :data:`ORDERINGS`); ``"theta"`` needs the weights ``alpha`` and ``beta``
    (:func:`best_assignment`), ``"gold_first"`` reads ``relevant``, the others only n.

    Examples:
        >>> relevant, utility = [0, 1, 1], [0.5, 0.4, 0.8]
        >>> order_by("reversed", relevant, utility, k=2).tolist()
        [1, 0]
        >>> order_by("theta", relevant, utility, k=2, alpha=[2, 1], beta=[-1, -1]).tolist()
        [2, 1]
    """
    one_of(ordering, "ordering", tuple(ORDERINGS))
    if ordering == "theta":
        return best_assignment(alpha, beta, relevant, utility, k)[0]
    if ordering == "gold_first":
        return gold_first_order(relevant, k)
    return _BY_COUNT[ordering](float_vector(relevant, "relevant").shape[0], k)


#: the orderings that depend on the number of candidates only
_BY_COUNT = {"retriever": retriever_order, "reversed": reversed_order, "ends": ends_order}
