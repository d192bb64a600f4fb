"""Utility sources: where the passage utility ``u_i`` of UDCG, UDCG-gamma and UDCG-theta comes from.

Each source names the passage field that stores the judge's probability (so a file says which
source produced each value), the :mod:`udcg.labels.annotate` step that fills it, and how ``u``
follows:

* ``abstention`` (the reference, default, reference-free): field ``abstain_prob[judge]``,
  step ``abstain``, ``u = 1 - P(abstain)``;
* ``answer_likelihood`` (needs the context's acceptable ``answers``): field
  ``answer_prob[judge]``, step ``answer_likelihood``, ``u = P(answer)`` = max over acceptable
  answers of exp(mean token log-prob of the answer), teacher-forced under the abstention prompt
  (see :meth:`udcg.judge.base.Judge.answer_prob`).

Add a source by adding a :class:`UtilitySource` to :data:`SOURCES`; training, scoring and
evaluation look sources up here by name (the ``utility=`` config option).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage, judge_probs

__all__ = ["DEFAULT_SOURCE", "SOURCES", "UtilitySource", "check_fitted_on", "get_source"]


@dataclass(frozen=True)
class UtilitySource:
    """One way to get passage utilities from a judge's stored probabilities.

    Examples:
        >>> from udcg.io.contexts.model import Context, Passage
        >>> source = get_source("abstention")
        >>> ctx = Context("q1", [Passage("d1", abstain_prob={"m": 0.25})])
        >>> source.field, source.formula, source.passage_utilities(ctx, "m").tolist()
        ('abstain_prob', 'u = 1 - P(abstain)', [0.75])
    """

    name: str
    field: str  # passage field mapping judge -> probability (see udcg.io.contexts.jsonl)
    step: str  # the udcg.labels.annotate step that fills it
    formula: str  # how u follows from the stored probability p, for cards and reports
    needs_answers: bool
    _from_prob: Callable[[np.ndarray], np.ndarray]

    def from_probs(self, probs: np.ndarray) -> np.ndarray:
        """``u`` from the stored probabilities (float64, same shape)."""
        return self._from_prob(np.asarray(probs, dtype=np.float64))

    def has(self, passage: Passage, judge: str) -> bool:
        """Whether ``passage`` already holds this source's value for ``judge``."""
        return judge in getattr(passage, self.field)

    def passage_utilities(self, ctx: Context, judge: str) -> np.ndarray | None:
        """``u`` of each passage of ``ctx``, or None when a passage lacks the stored value."""
        stored = [getattr(p, self.field).get(judge) for p in ctx.passages]
        if None in stored:
            return None
        return self.from_probs(np.asarray(stored))

    def utilities(self, contexts: Iterable[Context], judge: str) -> list[np.ndarray]:
        """Per context, ``u`` of each passage; a missing value is an error naming
        ``passages[i].<field>.<judge>`` (file and line when the context was read from one)."""
        return [self.from_probs(p) for p in judge_probs(contexts, judge, self.field)]


def _one_minus(p: np.ndarray) -> np.ndarray:
    return 1.0 - p


def _identity(p: np.ndarray) -> np.ndarray:
    return p.copy()


#: Known sources by name.
SOURCES: dict[str, UtilitySource] = {
    source.name: source
    for source in (
        UtilitySource(
            "abstention", "abstain_prob", "abstain", "u = 1 - P(abstain)", False, _one_minus
        ),
        UtilitySource(
            "answer_likelihood",
            "answer_prob",
            "answer_likelihood",
            "u = P(answer) = max over answers of exp(mean token log-prob)",
            True,
            _identity,
        ),
    )
}
DEFAULT_SOURCE = "abstention"


def get_source(name: str) -> UtilitySource:
    """The source called ``name``; an unknown name is an error listing the known ones.

    Examples:
        >>> get_source("answer_likelihood").from_probs([0.4]).tolist()
        [0.4]
    """
    source = SOURCES.get(name)
    if source is None:
        raise UDCGInputError(
            f"unknown utility source {name!r}; known: {', '.join(SOURCES)}", field="utility"
        )
    return source


def check_fitted_on(card: dict, utility: str, option: str = "--utility") -> None:
    """Weights are used only with the utility source they were fitted on (``card["utility"]``,
    ``abstention`` for cards that predate the option); otherwise an error naming ``option``.

    Examples:
        >>> check_fitted_on({}, "abstention")  # an old card: abstention
        >>> try:
        ...     check_fitted_on({"utility": "abstention"}, "answer_likelihood")
        ... except UDCGInputError as error:
        ...     print(error.reason)
        the weights were fitted on utility source 'abstention', not 'answer_likelihood' (pass ...)
    """
    fitted_on = card.get("utility", DEFAULT_SOURCE)
    if fitted_on != utility:
        raise UDCGInputError(
            f"the weights were fitted on utility source {fitted_on!r}, not {utility!r} "
            f"(pass {option} {fitted_on})",
            field="utility",
        )
