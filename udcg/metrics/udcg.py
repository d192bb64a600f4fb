"""UDCG: utility- and distraction-aware cumulative gain (Trappolini et al., arXiv 2510.21440).

A passage's utility for a judge LLM is ``u_i = 1 - P_abstain(i)``, the probability that the
LLM, shown that passage alone, does not answer "NO-RESPONSE". For a relevant passage it
measures helpfulness; for an irrelevant one, how much it distracts. For a list of k passages::

    UDCG = sigmoid( (1/k) * sum_i [ rel_i * u_i - gamma * (1 - rel_i) * u_i ] )

The mean runs over all k passages (not over each group), and an empty list scores exactly 0.0
(not ``sigmoid(0) = 0.5``), as in the reference implementation (github GiovanniTRA/UDCG).

Inputs follow :mod:`udcg.metrics._arrays`: a 2-D array ``[n_queries, k]``, a ragged list of
per-query sequences, or (for :func:`udcg`) a mapping ``{qid: sequence}``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.metrics._arrays import (
    all_blocks,
    as_padded,
    check_range,
    check_same_shape,
    full_lengths,
    in_unit_interval,
    table_rows,
    unpad,
)
from udcg.metrics._kernels import row_sums
from udcg.validation import by_query, show

__all__ = ["udcg", "udcg_terms", "utility"]

DEFAULT_GAMMA = 1.0 / 3.0


def utility(abstain_prob: Any = None, abstain_logprob: Any = None) -> Any:
    """Passage utility ``u = 1 - P_abstain``, from probabilities or natural-log probabilities.

    Give exactly one of ``abstain_prob`` (values in [0, 1]) or ``abstain_logprob`` (values
    <= 0; computed as ``u = -expm1(log P)``, exact for tiny abstention probabilities). NaN and
    infinite values are errors, including ``-inf`` log-probabilities (clip them to a large
    finite negative number, as APIs returning ``-9999`` do). The output has the input's
    structure: a 2-D array in gives a 2-D array out, a ragged list gives a list of 1-D
    arrays, a mapping ``{qid: sequence}`` gives ``{qid: 1-D array}``.

    Examples:
        >>> import math, numpy as np
        >>> utility(abstain_prob=np.array([[0.1, 0.4, 0.75]])).tolist()
        [[0.9, 0.6, 0.25]]
        >>> utility(abstain_logprob={"q1": [math.log(0.25)]})["q1"].tolist()
        [0.75]
    """
    if (abstain_prob is None) == (abstain_logprob is None):
        given = "both" if abstain_prob is not None else "neither"
        raise UDCGInputError(f"give exactly one of abstain_prob or abstain_logprob ({given} given)")
    name = "abstain_prob" if abstain_prob is not None else "abstain_logprob"
    values = table_rows(abstain_prob if abstain_prob is not None else abstain_logprob)
    if isinstance(values, Mapping):
        keys = list(values)
        out = utility(**{name: [values[q] for q in keys]})
        return dict(zip(keys, out, strict=True))
    padded, lengths = as_padded(values, name)
    if abstain_prob is not None:
        check_range(padded, name, 0.0, 1.0)
        u = 1.0 - padded
    else:
        check_range(padded, name, -math.inf, 0.0)
        u = -np.expm1(padded) + 0.0  # + 0.0 turns -0.0 (log P = 0) into 0.0
    if isinstance(values, np.ndarray):
        return u
    return unpad(u, lengths)


def _check_gamma(gamma: Any) -> float:
    if isinstance(gamma, bool) or not isinstance(gamma, int | float | np.integer | np.floating):
        raise UDCGInputError(f"gamma must be a real number, got {show(gamma)}", field="gamma")
    if not math.isfinite(gamma) or gamma < 0:
        raise UDCGInputError(f"gamma must be finite and >= 0, got {show(gamma)}", field="gamma")
    return float(gamma)


def _aligned(relevant: Any, utility: Any) -> tuple[Any, Any]:
    """Mappings ``{qid: sequence}`` become lists in the order of ``relevant``'s keys."""
    aligned = by_query(relevant=relevant, utility=utility)
    return (relevant, utility) if aligned is None else (aligned[0], aligned[1])


def _dense_pair(relevant: Any, utility: Any) -> bool:
    """True for two 2-D numpy arrays (not a subclass, such as a masked array) of one shape."""
    return (
        type(relevant) is np.ndarray
        and type(utility) is np.ndarray
        and relevant.ndim == 2
        and relevant.shape == utility.shape
    )


def _in_range(rel: np.ndarray, u: np.ndarray) -> bool:
    """The one-pass check of a dense pair: ``rel`` bool or float64 in [0, 1], ``u`` float64
    in [0, 1]; False (never an error) otherwise."""
    return in_unit_interval(u) and (rel.dtype == np.bool_ or in_unit_interval(rel))


def _validated(relevant: Any, utility: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rel, u, lengths)``: validated zero-padded arrays describing the same lists.

    Fast path: 2-D arrays of one shape, ``relevant`` bool or float64 and ``utility`` float64,
    both in [0, 1], are used as they are (bool stays bool) after a one-pass range check.
    """
    if _dense_pair(relevant, utility) and _in_range(relevant, utility):
        return relevant, utility, full_lengths(utility)
    relevant, utility = _aligned(relevant, utility)
    rel = as_padded(relevant, "relevant")
    u = as_padded(utility, "utility")
    check_same_shape(rel, u, ("relevant", "utility"))
    check_range(rel[0], "relevant", 0.0, 1.0)
    check_range(u[0], "utility", 0.0, 1.0)
    # padding has rel = 0 and u = 0, so it adds nothing to either term
    return rel[0], u[0], rel[1]


def udcg_terms(relevant: Any, utility: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(helpful, distracting)``: zero-padded ``[n, max_k]`` arrays of ``rel_i * u_i`` and
    ``(1 - rel_i) * u_i``, the per-position features of UDCG and UDCG-theta.

    ``relevant`` is bool, {0, 1}, or graded in [0, 1] (a graded passage is partly helpful and
    partly distracting); ``utility`` is in [0, 1]; both describe the same lists. Padding
    positions of ragged input are 0 in both arrays.

    Examples:
        >>> helpful, distracting = udcg_terms([[1, 0, 0.5]], [[0.9, 0.6, 0.4]])
        >>> helpful.tolist(), distracting.tolist()
        ([[0.9, 0.0, 0.2]], [[0.0, 0.6, 0.2]])
    """
    rel, u, _ = _validated(relevant, utility)
    helpful = rel * u
    return helpful, u - helpful


def _dense_udcg(relevant: Any, utility: Any, gamma: float) -> np.ndarray | None:
    """UDCG of two 2-D arrays of one shape, block by block after a one-pass range check of
    each block; None when the inputs are not such arrays or a check fails, which sends the
    caller to the general path (it also words any error)."""
    if not (_dense_pair(relevant, utility) and utility.dtype == np.float64):
        return None
    k = utility.shape[1]
    if k == 0:
        return np.zeros(len(utility))  # all lists empty
    scores = np.empty(len(utility))

    def work(rows: slice) -> bool:
        rel, u = relevant[rows], utility[rows]
        if not _in_range(rel, u):
            return False
        out = scores[rows]
        _weighted_sums(rel, u, gamma, out=out)
        out /= k
        _sigmoid(out)
        return True

    return scores if all_blocks(utility, work) else None


def _weighted_sums(rel: np.ndarray, u: np.ndarray, gamma: float, out: np.ndarray) -> None:
    """``out = sum_i u_i * (rel_i * (1 + gamma) - gamma)`` per row, i.e. the helpful
    ``rel_i * u_i`` minus gamma times the distracting ``(1 - rel_i) * u_i``, added left to
    right (:func:`~udcg.metrics._kernels.row_sums`: a row's sum depends on that row alone)."""
    weight = (rel.view(np.uint8) if rel.dtype == np.bool_ else rel).astype(np.float64)
    weight *= 1.0 + gamma
    weight -= gamma
    weight *= u
    out[:] = row_sums(weight)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))`` in place (exp overflows to inf for x < -709, giving 0)."""
    np.negative(x, out=x)
    with np.errstate(over="ignore"):
        np.exp(x, out=x)
    x += 1.0
    return np.reciprocal(x, out=x)


def udcg(relevant: Any, utility: Any, gamma: float = DEFAULT_GAMMA) -> np.ndarray:
    """Per-query ``UDCG = sigmoid( (1/k) * sum_i [rel_i*u_i - gamma*(1 - rel_i)*u_i] )``.

    ``k`` is each list's own length and an empty list gives 0.0. ``relevant``: bool, {0, 1},
    or graded in [0, 1]; ``utility``: ``1 - P_abstain`` in [0, 1] (see :func:`utility`);
    ``gamma`` (finite, >= 0; default 1/3) weighs distraction against help, 0 ignoring
    irrelevant passages. Inputs: 2-D arrays, ragged lists or ``{qid: sequence}`` mappings
    (then values follow ``relevant``'s key order). Returns a 1-D float64 array in (0, 1)
    for non-empty lists.

    Examples:
        A relevant, an irrelevant and a relevant passage: ``sigmoid((0.9 - 0.6/3 + 0.3) / 3)
        = sigmoid(1/3)``; an empty list scores 0:

        >>> udcg([[1, 0, 1], []], [[0.9, 0.6, 0.3], []]).round(4).tolist()
        [0.5826, 0.0]
        >>> udcg({"q1": [True, False]}, {"q1": [0.8, 0.6]}, gamma=0).round(4).tolist()
        [0.5987]
    """
    gamma = _check_gamma(gamma)
    scores = _dense_udcg(relevant, utility, gamma)
    if scores is not None:
        return scores
    rel, u, lengths = _validated(relevant, utility)
    totals = np.empty(len(u))
    _weighted_sums(rel, u, gamma, out=totals)  # padding has u = 0: adds nothing
    nonempty = lengths > 0
    np.divide(totals, lengths, out=totals, where=nonempty)
    return np.where(nonempty, _sigmoid(totals), 0.0)
