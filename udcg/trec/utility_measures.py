"""UDCG@k and UDCGtheta@k of a run: the passages are each query's top k documents in
trec_eval order (score descending, ties by document id descending), relevant when their qrels
grade is >= ``rel`` (1 by default; unjudged: not relevant), with utilities ``u`` given per
(query, document) (:mod:`udcg.io.joins.utilities`).

* ``UDCG@k`` is :func:`udcg.metrics.udcg` of those passages::

      UDCG = sigmoid( (1/n) * sum_i [ rel_i * u_i - gamma * (1 - rel_i) * u_i ] )

  with n = min(k, documents ranked for the query): a query with fewer than k ranked documents
  is averaged over the ones it has, as :func:`udcg.metrics.udcg` does for a shorter list.
* ``UDCGtheta@k`` uses weights fitted for lists of exactly k passages
  (:mod:`udcg.io.weights.files`)::

      UDCG_theta = sigmoid( b + sum_i alpha_i * rel_i * u_i + sum_i beta_i * (1 - rel_i) * u_i )

  a scored query with fewer than k ranked documents is an error. The weights (a folder or a
  ``.safetensors`` file, :mod:`udcg.io.weights.files`) must be for k (never overridable) and fitted
  on the utility source the utilities hold (``allow_mismatch=["utility"]`` overrides it, with
  a :class:`~udcg.errors.UDCGWarning` that says so). A utilities file records neither judge,
  prompt nor abstention mode; an annotated contexts file's manifest records the judge, its
  fingerprint and the abstention mode, checked against the card as that field is.

A document ranked within the top k of a scored query without a utility is an error naming the
query and the document, never a silent value. Queries the qrels do not judge are not scored.

Examples:
    Relevant d1 (u 0.9) ranked above d2 (u 0.6); with alpha = (2, 1) and beta = (-1, -1),
    UDCGtheta@2 = sigmoid(2 * 0.9 - 0.6), and UDCG@2 = sigmoid((0.9 - 0.6 / 3) / 2):

    >>> from udcg.trec import evaluate
    >>> weights = ThetaWeights(alpha=np.array([2.0, 1.0]), beta=np.array([-1.0, -1.0]))
    >>> qrels, run = {"q1": {"d1": 1}}, {"q1": {"d1": 2.0, "d2": 1.0}}
    >>> u = {"q1": {"d1": 0.9, "d2": 0.6}}
    >>> values = evaluate(qrels, run, ["UDCGtheta@2", "UDCG@2"], utilities=u,
    ...                   utility_field="utility", weights=weights)["q1"]
    >>> {name: round(value, 4) for name, value in values.items()}
    {'UDCGtheta@2': 0.7685, 'UDCG@2': 0.5866}
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from os import PathLike
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from udcg.errors import UDCGInputError, UDCGWarning
from udcg.io.joins.utilities import Utilities, UtilitiesLike, as_utilities, check_field, source_of
from udcg.io.manifests import mode_of
from udcg.io.weights.files import ThetaWeights, check_compatible, read_weights
from udcg.io.weights.hub import weights_source
from udcg.metrics._kernels import row_sums
from udcg.metrics.udcg import udcg, udcg_terms
from udcg.trec.measures import UTILITY_MEASURES, Measure


class _FittedWeights(Protocol):
    """What a fitted :class:`~udcg.theta.UDCGTheta` offers here: its weights and card."""

    def to_weights(self) -> ThetaWeights: ...


WeightsLike = str | PathLike[str] | ThetaWeights | _FittedWeights
_API_AND_CLI = {"utilities": "--utilities FILE", "weights": "--weights FILE"}


@dataclass(frozen=True, eq=False)
class UtilityPlan:
    """What the utility measures of one evaluation need: the utilities, the weights of each
    UDCGtheta cutoff, and the depth up to which every scored query needs utilities.

    Examples:
        >>> from udcg.trec.measures import parse_measures
        >>> measures = parse_measures(["UDCG@3", "nDCG@10"])
        >>> needs = plan(measures, {"q1": {"d1": 0.9}}, "utility", weights=None)
        >>> needs.depth, needs.weights, needs.utilities.values.tolist()
        (3, {}, [0.9])
    """

    utilities: Utilities
    weights: dict[int, ThetaWeights]
    depth: int

    def check_ranked(
        self,
        u_ranked: np.ndarray,
        q_ranked: np.ndarray,
        lengths: np.ndarray,
        scored: np.ndarray,
        qid_names: pa.Array,
        doc_of: Callable[[int], str],
        run_source: str | None,
    ) -> None:
        """Every scored query (``scored[q]``) has a utility for each document ranked within
        ``self.depth`` and, for each UDCGtheta cutoff k, k ranked documents; ``u_ranked`` (NaN
        where missing) is then zero-filled in place. ``q_ranked`` and ``lengths`` as in the engine;
        ``doc_of(i)``: the document of ranked row i."""
        first_row = np.cumsum(lengths) - lengths
        rank = np.arange(len(q_ranked)) - first_row[q_ranked]
        missing = np.isnan(u_ranked)
        at = np.flatnonzero(missing & (rank < self.depth) & scored[q_ranked])
        if len(at):
            i = int(at[0])
            qid = qid_names[int(q_ranked[i])].as_py()
            raise UDCGInputError(
                f"no utility for query {qid!r} document {doc_of(i)!r} (rank {rank[i] + 1})",
                path=self.utilities.source,
                field="utilities",
            )
        for k in self.weights:
            short = np.flatnonzero(scored & (lengths < k))
            if len(short):
                q = int(short[0])
                raise UDCGInputError(
                    f"UDCGtheta@{k} scores lists of exactly {k} documents, but query "
                    f"{qid_names[q].as_py()!r} has {lengths[q]} (UDCG@{k} takes shorter lists)",
                    path=run_source,
                    field="run",
                )
        u_ranked[missing] = 0.0

    def score(
        self, m: Measure, gains: np.ndarray, u: np.ndarray, lengths: np.ndarray
    ) -> np.ndarray:
        """``m`` per row of the padded ranked ``gains`` and utilities ``u`` (zero-filled, as
        :meth:`check_ranked` leaves them) of lists of ``lengths`` documents."""
        k = m.cutoff
        rel, u = gains[:, :k] >= m.rel, u[:, :k]
        if m.name == "UDCGtheta":
            return _theta(self.weights[k], rel, u, lengths >= k)
        return _udcg(rel, u, np.minimum(lengths, k), m.gamma)


def _needs(measure: Measure, what: str) -> UDCGInputError:
    return UDCGInputError(
        f"{measure} needs {what}: pass {what}= ({_API_AND_CLI[what]} on the command line)",
        field=what,
    )


def _weights_by_k(
    measures: list[Measure], weights: WeightsLike | Iterable[WeightsLike] | None
) -> dict[int, ThetaWeights]:
    """The weights of each UDCGtheta cutoff, read from ``weights`` (one or several)."""
    theta = [m for m in measures if m.name == "UDCGtheta"]
    if not theta:
        return {}
    if weights is None:
        raise _needs(theta[0], "weights")
    single = isinstance(weights, str | PathLike | ThetaWeights) or hasattr(weights, "to_weights")
    items = [weights] if single else list(weights)
    by_k: dict[int, ThetaWeights] = {}
    for item in items:
        loaded = _as_weights(item)
        if loaded.k in by_k:
            raise UDCGInputError(f"two sets of weights for k={loaded.k}", field="weights")
        by_k[loaded.k] = loaded
    for m in theta:
        if m.cutoff not in by_k:
            given = ", ".join(
                f"k={w.k}" + (f" ({w.path})" if w.path else "") for w in by_k.values()
            )
            raise UDCGInputError(
                f"{m} needs weights for k={m.cutoff}, but the weights given are for {given}",
                field="weights",
            )
    return {m.cutoff: by_k[m.cutoff] for m in theta}


def _as_weights(item: Any) -> ThetaWeights:
    """Weights from a path or Hub id (:func:`~udcg.io.weights.hub.weights_source`),
    :class:`ThetaWeights` or a fitted :class:`~udcg.theta.UDCGTheta`."""
    if isinstance(item, ThetaWeights):
        return item
    return item.to_weights() if hasattr(item, "to_weights") else read_weights(weights_source(item))


#: how a refusal of the weights says to allow a mismatch, in Python
PYTHON_OPTION = "allow_mismatch=['{field}']"


def _check_source(
    weights: dict[int, ThetaWeights],
    utilities: Utilities,
    allow_mismatch: Sequence[str] = (),
    option: str = PYTHON_OPTION,
) -> None:
    """Weights fitted on one utility source or judge are refused for utilities of another
    (the source is unknown for ready utilities, ``utility_field="utility"``; the judge and the
    abstention mode are known for an annotated contexts file only), unless ``allow_mismatch``
    holds the field: then a :class:`UDCGWarning` records it."""
    source = source_of(utilities.field)
    applied = {
        "utility": None if source is None else source.name,
        "judge": utilities.judge,
        "fingerprint": utilities.fingerprint,
        "mode": mode_of(utilities.fingerprint) if source and source.step == "abstain" else None,
    }
    for w in weights.values():
        for note in check_compatible(w.card, applied, allow_mismatch, option):
            warnings.warn(f"UDCGtheta@{w.k} weights: {note}", UDCGWarning, stacklevel=4)


def plan(
    measures: list[Measure],
    utilities: Utilities | UtilitiesLike | None,
    utility_field: str | None,
    weights: WeightsLike | Iterable[WeightsLike] | None,
    allow_mismatch: Sequence[str] = (),
    option: str = PYTHON_OPTION,
) -> UtilityPlan | None:
    """The checked inputs of the utility measures among ``measures`` (None when there are
    none); the weights are read before the utilities, both before the run; ``option``: how a
    refusal of the weights says to allow the mismatch (``{field}`` in it names the field).

    Examples:
        >>> from udcg.trec.measures import parse_measures
        >>> plan(parse_measures("nDCG@10"), None, None, None) is None
        True
        >>> plan(parse_measures("UDCG@5"), None, None, None)
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'utilities': UDCG@5 needs utilities: pass utilities= (...)
    """
    check_field(utility_field)
    wanted = [m for m in measures if m.name in UTILITY_MEASURES]
    if not wanted:
        return None
    if utilities is None:
        raise _needs(wanted[0], "utilities")
    by_k = _weights_by_k(wanted, weights)
    loaded = as_utilities(utilities, utility_field)
    _check_source(by_k, loaded, allow_mismatch, option)
    return UtilityPlan(loaded, by_k, max(m.cutoff for m in wanted))


def _udcg(rel: np.ndarray, u: np.ndarray, lengths: np.ndarray, gamma: float) -> np.ndarray:
    """:func:`udcg.metrics.udcg` of each row's first ``lengths[i]`` passages, one call per
    distinct length (each a dense ``[rows, n]`` array)."""
    if (lengths == rel.shape[1]).all():
        return udcg(rel, u, gamma)
    out = np.empty(len(rel))
    for n in np.unique(lengths):
        rows = lengths == n
        out[rows] = udcg(rel[rows, :n], u[rows, :n], gamma)
    return out


def _theta(weights: ThetaWeights, rel: np.ndarray, u: np.ndarray, full: np.ndarray) -> np.ndarray:
    """UDCG-theta of the rows where ``full`` (k passages ranked); NaN elsewhere (rows that are
    not scored): the logits of :meth:`udcg.theta.UDCGTheta.decision_function`, bit for bit."""
    from scipy.special import expit

    out = np.full(len(rel), np.nan)
    if full.any():
        terms = np.concatenate(udcg_terms(rel[full], u[full]), axis=1)
        logits = row_sums(terms, np.concatenate([weights.alpha, weights.beta]))
        logits += weights.intercept
        out[full] = expit(logits)
    return out
