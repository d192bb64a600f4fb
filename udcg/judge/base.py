"""The judge interface: every LLM call of the toolkit goes through one of these methods.

Streaming contract. A backend whose class sets ``streams_results = True`` accepts a keyword-only
``on_result: OnResult | None = None`` on :meth:`Judge.abstain_prob`, :meth:`Judge.answer_prob`,
:meth:`Judge.yes_prob` and :meth:`Judge.generate`, and calls ``on_result(i, value,
upper_bound)`` exactly once per input index ``i``, as soon as that item is done (in any order),
from the thread that called the method, before the method returns. ``value`` is what the method
returns at position i (a float, or the str of ``generate``); ``upper_bound`` is True when the
value is only an upper bound (see :class:`JudgeValues`). When the method raises, items not yet
reported are never reported. Backends with ``streams_results = False`` take no ``on_result``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from udcg.judge.prompts import Messages
from udcg.judge.structured import JSONResult, generate_json

AbstainMode = Literal["first_token", "sequence"]

#: ``on_result(i, value, upper_bound)`` of a streaming judge (see the module docstring).
OnResult = Callable[[int, Any, bool], None]

#: How :meth:`Judge.answer_prob` turns token log-probs into one value (part of cache keys).
ANSWER_NORMALISATION = "max_over_answers(exp(mean_token_logprob))"


def check_abstain_inputs(
    questions: Sequence[str], passages: Sequence[str]
) -> tuple[list[str], list[str]]:
    """The inputs of :meth:`Judge.abstain_prob` as lists, checked: one passage per question.

    Examples:
        >>> check_abstain_inputs(("Who wrote Emma?",), ("Austen did.",))
        (['Who wrote Emma?'], ['Austen did.'])
    """
    from udcg.errors import UDCGInputError

    questions, passages = list(questions), list(passages)
    if len(questions) != len(passages):
        raise UDCGInputError(
            f"abstain_prob needs one passage per question, got {len(questions)} questions"
            f" and {len(passages)} passages"
        )
    return questions, passages


def check_answer_inputs(
    questions: Sequence[str], passages: Sequence[str], answers: Sequence[Sequence[str]]
) -> tuple[list[str], list[str], list[list[str]]]:
    """The inputs of :meth:`Judge.answer_prob` as lists, checked: one passage and one list of
    acceptable answers per question, every answer a non-empty string. A question without
    answers is an error (its likelihood is undefined, never 0).

    Examples:
        >>> check_answer_inputs(["Who wrote Emma?"], ["Austen did."], [("Austen",)])
        (['Who wrote Emma?'], ['Austen did.'], [['Austen']])
        >>> check_answer_inputs(["Who wrote Emma?"], ["Austen did."], [[]])
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'answers[0]': needs a non-empty list ..., got no answers
    """
    from udcg.errors import UDCGInputError

    if isinstance(questions, str) or isinstance(passages, str):
        raise UDCGInputError("expected sequences of strings, got a single string")
    questions, passages = list(questions), list(passages)
    if not len(questions) == len(passages) == len(answers):
        raise UDCGInputError(
            f"{len(questions)} questions, {len(passages)} passages and {len(answers)} answer "
            "lists: pass one passage and one list of acceptable answers per question"
        )
    checked: list[list[str]] = []
    for i, options in enumerate(answers):
        if isinstance(options, str) or not options:
            got = "a single string" if isinstance(options, str) else "no answers"
            raise UDCGInputError(
                f"needs a non-empty list of acceptable answers, got {got}", field=f"answers[{i}]"
            )
        for j, answer in enumerate(options):
            if not isinstance(answer, str) or not answer.strip():
                raise UDCGInputError(
                    f"must be a non-empty string, got {answer!r}", field=f"answers[{i}][{j}]"
                )
        checked.append(list(options))
    return questions, passages, checked


def judge_values(values: Any, upper_bound: Any = None) -> JudgeValues:
    """``values`` as float64 :class:`JudgeValues`; ``upper_bound`` a boolean mask (default: none
    is a bound).

    Examples:
        >>> values = judge_values([0.2, 0.4], upper_bound=[False, True])
        >>> values.tolist(), values.upper_bound.tolist()
        ([0.2, 0.4], [False, True])
    """
    out = np.asarray(values, dtype=np.float64).view(JudgeValues)
    mask = np.zeros(out.shape, dtype=bool) if upper_bound is None else np.asarray(upper_bound)
    if mask.shape != out.shape:
        raise ValueError(f"upper_bound has shape {mask.shape}, values {out.shape}")
    out.upper_bound = mask.astype(bool)
    return out


class JudgeValues(np.ndarray):
    """Float64 judge values that know which of them are only upper bounds.

    ``upper_bound[i]`` is True when value i is the upper bound of the true probability, not the
    probability (a server returned the top-k log-probs and the token asked for was not among
    them). Backends that never produce bounds may return plain arrays; read the mask with
    :func:`upper_bounds`.

    Examples:
        >>> values = judge_values([0.2, 0.4], upper_bound=[False, True])
        >>> isinstance(values, JudgeValues), values.upper_bound.tolist()
        (True, [False, True])
    """

    upper_bound: np.ndarray

    def __array_finalize__(self, obj: Any) -> None:
        mask = getattr(obj, "upper_bound", None)
        if mask is None or getattr(mask, "shape", None) != self.shape:
            mask = np.zeros(self.shape, dtype=bool)
        self.upper_bound = mask


def upper_bounds(values: Any) -> np.ndarray:
    """The upper-bound mask of judge values (all False for a plain array).

    Examples:
        >>> upper_bounds(judge_values([0.2], upper_bound=[True])).tolist()
        [True]
        >>> upper_bounds(np.array([0.2, 0.3])).tolist()
        [False, False]
    """
    mask = getattr(values, "upper_bound", None)
    return np.zeros(np.shape(values), dtype=bool) if mask is None else np.asarray(mask, bool)


class Judge(ABC):
    """A scoring LLM. ``name`` keys the values it produces (e.g. ``abstain_prob[name]``; the
    backends default it to :func:`udcg.judge.spec.judge_key` of their spec); ``fingerprint``
    identifies backend + model + settings for the cache. ``streams_results`` says whether the
    judge takes ``on_result`` and reports items as they finish (see the module docstring).

    Examples:
        A backend implements the three abstract methods; the rest comes with the class:

        >>> class Constant(Judge):
        ...     name, fingerprint = "constant", "constant-v1"
        ...     def abstain_prob(self, questions, passages, mode="first_token"):
        ...         return np.full(len(questions), 0.25)
        ...     def yes_prob(self, prompts):
        ...         return np.full(len(prompts), 0.9)
        ...     def generate(self, prompts, max_new_tokens=64):
        ...         return ['Claims: ["a", "b"]'] * len(prompts)
        >>> Constant().abstain_prob(["q"], ["p"]).tolist(), Constant().generate_json([[]])[0].value
        ([0.25], ['a', 'b'])
    """

    name: str
    fingerprint: str
    streams_results: bool = False

    def key_settings(self, operation: str) -> dict[str, Any]:
        """What the judge resolves at run time that changes the values of ``operation`` (the
        abstention token an OpenAI-compatible server's tokenizer gives, for instance), as
        JSON-able settings: the cache puts them in the key of each item of ``operation``,
        next to the fingerprint. Most judges resolve nothing at run time: ``{}``."""
        return {}

    def probe(self) -> None:  # noqa: B027 (a hook: in-process backends have nothing to check)
        """Check, in seconds, that the judge can answer (a server backend asks its server);
        raises :class:`~udcg.errors.UDCGInputError` when it cannot. In-process backends have
        nothing to check."""

    @abstractmethod
    def abstain_prob(
        self, questions: Sequence[str], passages: Sequence[str], mode: AbstainMode = "first_token"
    ) -> np.ndarray:
        """P(abstain) per (question, passage) pair under the reference prompt.

        ``first_token``: softmax of the next-token logits at the first token of NO-RESPONSE;
        ``sequence``: product of the teacher-forced probabilities of all its tokens.
        """

    def answer_prob(
        self,
        questions: Sequence[str],
        passages: Sequence[str],
        answers: Sequence[Sequence[str]],
    ) -> np.ndarray:
        """Likelihood of an acceptable answer per (question, passage) pair, in [0, 1].

        Each answer is teacher-forced as the assistant turn of the abstention conversation
        (:func:`~udcg.judge.prompts.answer_likelihood_messages`: same system and user messages,
        same chat template). With ``a_1..a_n`` the answer's tokens (its text right after the
        generation prompt, without the end-of-turn marker)::

            p(answer) = exp( (1/n) * sum_t log P(a_t | prompt, a_<t) )   (per-token geometric mean)
            value     = max over the pair's acceptable answers of p(answer)

        ``answers[i]`` lists the acceptable answers of pair i; an empty list is an error.
        Backends that cannot read teacher-forced log-probs raise NotImplementedError.
        """
        raise NotImplementedError(
            f"{type(self).__name__} cannot compute answer likelihoods (it does not expose "
            "teacher-forced token log-probs); use the local transformers backend"
        )

    @abstractmethod
    def yes_prob(self, prompts: Sequence[Messages]) -> np.ndarray:
        """P(Yes) / (P(Yes) + P(No)) of the first answer token, read from log-probs."""

    @abstractmethod
    def generate(self, prompts: Sequence[Messages], max_new_tokens: int = 64) -> list[str]:
        """Greedy completions."""

    def generate_json(
        self,
        prompts: Sequence[Messages],
        validate: Callable[[Any], Any] | None = None,
        max_new_tokens: int = 256,
        retries: int = 2,
        *,
        schema: Mapping[str, Any] | None = None,
    ) -> list[JSONResult]:
        """Completions parsed as JSON (the first object/array, code fences tolerated), checked
        by ``validate(value)`` (raises ValueError to reject; a non-None return replaces the
        value); failed prompts alone are retried up to ``retries`` times. Failures are
        returned, never raised or dropped. See :func:`udcg.judge.structured.generate_json`.
        ``schema`` (a JSON schema of the value) lets a server constrain its output to it;
        backends without constrained output ignore it."""
        return generate_json(self, prompts, validate, max_new_tokens, retries)
