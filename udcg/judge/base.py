"""The judge interface: every LLM call of the toolkit goes through one of these methods.

A judge answers :class:`~udcg.judge.requests.Request` lists with :meth:`Judge.run`, and the five
operations (:meth:`Judge.abstain_prob`, :meth:`Judge.answer_prob`, :meth:`Judge.yes_prob`,
:meth:`Judge.generate`, :meth:`Judge.generate_json`) are written once, here. A backend (local
transformers, OpenAI-compatible server, precomputed file) implements :meth:`Judge.compute`
for one call and gets ``run`` from this class (it groups the requests by call); a layer over a
backend (the cache, Ray) implements ``run`` alone, as a function of the request list. Both get
the operations from this class: they build the requests, keyed by
:func:`~udcg.judge.requests.make_request`, and call ``run``.

Streaming contract. A judge whose class sets ``streams_results = True`` accepts a keyword-only
``on_result: OnResult | None = None`` on :meth:`Judge.run` and on the operations (except
``generate_json``), and calls ``on_result(i, value, upper_bound)`` exactly once per input index
``i``, as soon as that item is done (in any order), from the thread that called the method,
before the method returns. ``value`` is what the method returns at position i (a float, or the
str of ``generate``); ``upper_bound`` is True when the value is only an upper bound (see
:class:`JudgeValues`). When the method raises, items not yet reported are never reported.
Backends with ``streams_results = False`` take no ``on_result``.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from udcg.judge.prompts import Messages
from udcg.judge.requests import Request, Result, calls, column, make_request
from udcg.judge.structured import JSONResult, generate_json

AbstainMode = Literal["first_token", "sequence"]

#: ``on_result(i, value, upper_bound)`` of a streaming judge (see the module docstring).
OnResult = Callable[[int, Any, bool], None]


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

    A subclass implements either the operations it computes (a backend: ``abstain_prob``,
    ``yes_prob`` and ``generate``; ``answer_prob`` and ``generate_json`` when it can) or
    :meth:`run` (a layer over requests).

    Examples:
        A backend implements three operations; ``run`` and the JSON logic come with the class:

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
        >>> Constant().run([Request("yes_prob", {"messages": []})])
        [Result(value=0.9, upper_bound=False)]
    """

    name: str
    fingerprint: str
    streams_results: bool = False

    def key_settings(self, operation: str) -> dict[str, Any]:
        """What the judge resolves at run time that changes the values of ``operation`` (the
        abstention token an OpenAI-compatible server's tokenizer gives, for instance), as
        JSON-able settings: part of the key of each request of ``operation``, next to the
        fingerprint. Most judges resolve nothing at run time: ``{}``."""
        return {}

    def probe(self) -> None:  # noqa: B027 (a hook: in-process backends have nothing to check)
        """Check, in seconds, that the judge can answer (a server backend asks its server);
        raises :class:`~udcg.errors.UDCGInputError` when it cannot. In-process backends have
        nothing to check."""

    # -- requests -------------------------------------------------------------------------------

    def _requests(
        self, op: str, items: list[dict[str, Any]], params: dict[str, Any]
    ) -> list[Request]:
        """The requests of ``items`` of ``op``, keyed with this judge's fingerprint and its
        :meth:`key_settings` of ``op`` (asked once, not for an empty call)."""
        if not items:
            return []
        settings = self.key_settings(op)
        return [make_request(op, item, params, self.fingerprint, settings) for item in items]

    def _layered(self) -> bool:
        """Whether this judge implements :meth:`run` or :meth:`compute` (the operations then
        come from this class) rather than the operations themselves."""
        return type(self).run is not Judge.run or type(self).compute is not Judge.compute

    def run(self, requests: Sequence[Request], on_result: OnResult | None = None) -> list[Result]:
        """One :class:`~udcg.judge.requests.Result` per request, in order: the requests
        grouped by call (operation and parameters), each call's values computed by
        :meth:`compute`. ``on_result`` (streaming judges only) hears of every item."""
        results: list[Result | None] = [None] * len(requests)
        for (op, _), positions in calls(requests).items():
            asked = [requests[i] for i in positions]
            sink = None
            if on_result is not None:
                sink = lambda j, value, bound, at=positions: on_result(at[j], value, bound)  # noqa: E731
            out = self.compute(op, asked, sink)
            if len(out) != len(asked):
                raise RuntimeError(
                    f"judge {self.name!r} returned {len(out)} results for {len(asked)} inputs"
                    f" ({op})"
                )
            bounds = upper_bounds(out) if op not in ("generate", "generate_json") else None
            for j, i in enumerate(positions):
                value = out[j]
                if bounds is not None:
                    value = float(value)
                results[i] = Result(value, bool(bounds[j]) if bounds is not None else False)
        return results  # type: ignore[return-value]

    def compute(self, op: str, requests: list[Request], on_result: OnResult | None) -> Any:
        """The values of one call: ``requests`` of operation ``op`` with equal parameters, in
        order (floats, possibly :class:`JudgeValues` with bounds; strs for ``generate``;
        :class:`JSONResult` for ``generate_json``), ``on_result`` (streaming judges) called per
        item. What a backend implements; by default the operation's own method of a judge that
        implements the operations. ``generate_json`` defaults to the JSON logic over
        ``generate`` (:func:`udcg.judge.structured.generate_json`)."""
        params = dict(requests[0].params)
        stream = {} if on_result is None else {"on_result": on_result}
        if op == "abstain_prob":
            questions, passages = column(requests, "question"), column(requests, "passage")
            return self.abstain_prob(questions, passages, params["mode"], **stream)
        if op == "answer_prob":
            questions, passages = column(requests, "question"), column(requests, "passage")
            return self.answer_prob(questions, passages, column(requests, "answers"), **stream)
        if op == "yes_prob":
            return self.yes_prob(column(requests, "messages"), **stream)
        if op == "generate":
            return self.generate(column(requests, "messages"), params["max_new_tokens"], **stream)
        schema = params.pop("schema", None)
        if type(self).generate_json is Judge.generate_json:
            return generate_json(self, column(requests, "messages"), **params)
        extra = {} if schema is None else {"schema": schema}
        return self.generate_json(column(requests, "messages"), **params, **extra)

    def _unimplemented(self, op: str) -> NotImplementedError:
        return NotImplementedError(f"{type(self).__name__} implements neither {op} nor run")

    def _run_values(self, requests: list[Request], on_result: OnResult | None) -> JudgeValues:
        results = self.run(requests, **({} if on_result is None else {"on_result": on_result}))
        return judge_values([r.value for r in results], [r.upper_bound for r in results])

    # -- the operations -------------------------------------------------------------------------

    def abstain_prob(
        self,
        questions: Sequence[str],
        passages: Sequence[str],
        mode: AbstainMode = "first_token",
        *,
        on_result: OnResult | None = None,
    ) -> np.ndarray:
        """P(abstain) per (question, passage) pair under the reference prompt.

        ``first_token``: softmax of the next-token logits at the first token of NO-RESPONSE;
        ``sequence``: product of the teacher-forced probabilities of all its tokens.
        """
        if not self._layered():
            raise self._unimplemented("abstain_prob")
        questions, passages = check_abstain_inputs(questions, passages)
        items = [{"question": q, "passage": p} for q, p in zip(questions, passages, strict=True)]
        return self._run_values(self._requests("abstain_prob", items, {"mode": mode}), on_result)

    def answer_prob(
        self,
        questions: Sequence[str],
        passages: Sequence[str],
        answers: Sequence[Sequence[str]],
        *,
        on_result: OnResult | None = None,
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
        if not self._layered():
            raise NotImplementedError(
                f"{type(self).__name__} cannot compute answer likelihoods (it does not expose "
                "teacher-forced token log-probs); use the local transformers backend"
            )
        questions, passages, answers = check_answer_inputs(questions, passages, answers)
        items = [
            {"question": q, "passage": p, "answers": a}
            for q, p, a in zip(questions, passages, answers, strict=True)
        ]
        return self._run_values(self._requests("answer_prob", items, {}), on_result)

    def yes_prob(
        self, prompts: Sequence[Messages], *, on_result: OnResult | None = None
    ) -> np.ndarray:
        """P(Yes) / (P(Yes) + P(No)) of the first answer token, read from log-probs."""
        if not self._layered():
            raise self._unimplemented("yes_prob")
        items = [{"messages": list(m)} for m in prompts]
        return self._run_values(self._requests("yes_prob", items, {}), on_result)

    def generate(
        self,
        prompts: Sequence[Messages],
        max_new_tokens: int = 64,
        *,
        on_result: OnResult | None = None,
    ) -> list[str]:
        """Greedy completions."""
        if not self._layered():
            raise self._unimplemented("generate")
        items = [{"messages": list(m)} for m in prompts]
        requests = self._requests("generate", items, {"max_new_tokens": int(max_new_tokens)})
        stream = {} if on_result is None else {"on_result": on_result}
        texts = [r.value for r in self.run(requests, **stream)]
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(
                    f"judge {self.name!r} generate() returned {type(text).__name__}, not str"
                )
        return texts

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
        if not self._layered():
            return generate_json(self, prompts, validate, max_new_tokens, retries)
        params: dict[str, Any] = {
            "validate": validate,
            "max_new_tokens": int(max_new_tokens),
            "retries": int(retries),
        }
        if schema is not None:
            params["schema"] = schema
        items = [{"messages": list(m)} for m in prompts]
        return [r.value for r in self.run(self._requests("generate_json", items, params))]
