"""The judge interface: :meth:`Judge.run` answers :class:`~udcg.judge.requests.Request` lists,
and the five operations build requests and call it. A backend implements :meth:`Judge.compute`
for one call; a layer (cache, Ray) implements ``run``.

Streaming: a judge with ``streams_results = True`` takes a keyword ``on_result`` on ``run`` and
the operations (not ``generate_json``) and calls ``on_result(i, value, upper_bound)`` once per
input index, in any order, from the calling thread, before returning; after a raise, items not
yet reported are never reported.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Literal, Self

import numpy as np

from udcg.errors import UDCGInputError
from udcg.judge.prompts import Messages
from udcg.judge.requests import (
    OPERATIONS,
    RefusedRequest,
    Request,
    Result,
    calls,
    column,
    make_request,
)
from udcg.judge.structured import JSONResult, generate_json
from udcg.validation import encodable

AbstainMode = Literal["first_token", "sequence"]
OnResult = Callable[[int, Any, bool], None]  #: ``on_result(i, value, upper_bound)``


def judge_values(values: Any, upper_bound: Any = None) -> JudgeValues:
    """``values`` as float64 :class:`JudgeValues` with boolean mask ``upper_bound`` (default none).

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
    """Float64 values; ``upper_bound[i]`` True when value i is only a bound: the token was not
    among a server's top-k log-probs, so the value is an upper bound of the probability (for
    ``yes_prob`` with No the missing token, a lower bound of at least 0.5).

    >>> isinstance(judge_values([0.2]), JudgeValues)
    True
    """

    upper_bound: np.ndarray

    def __array_finalize__(self, obj: Any) -> None:
        """A new array's marks are a copy of its source's (changing one leaves the other)."""
        mask = getattr(obj, "upper_bound", None)
        if mask is None or getattr(mask, "shape", None) != self.shape:
            mask = np.zeros(self.shape, dtype=bool)
        self.upper_bound = np.array(mask, dtype=bool)

    def __getitem__(self, index: Any) -> Any:
        """Values and their marks picked together: ``v[np.argsort(v)]``, ``v[::-1]``, ``v[2:]``
        and ``v[v > 0.5]`` keep each mark on its value."""
        out = super().__getitem__(index)
        if isinstance(out, JudgeValues):
            out.upper_bound = np.asarray(self.upper_bound[index], dtype=bool)
        return out

    def __setitem__(self, index: Any, value: Any) -> None:
        """Values assigned take their own marks: a plain number is not a bound."""
        super().__setitem__(index, value)
        self.upper_bound[index] = upper_bounds(value)

    def sort(self, axis: Any = -1, kind: Any = None, order: Any = None, **stable: Any) -> None:
        """In place, each mark moving with its value (``order`` is for structured arrays)."""
        picked = np.argsort(self.view(np.ndarray), axis=axis, kind=kind, **stable)
        self[...] = np.take_along_axis(self, picked, axis)


def upper_bounds(values: Any) -> np.ndarray:
    """The upper-bound mask of judge values (all False for a plain array).

    >>> upper_bounds(judge_values([0.2], upper_bound=[True])), upper_bounds(np.zeros(1))
    (array([ True]), array([False]))
    """
    mask = getattr(values, "upper_bound", None)
    return np.zeros(np.shape(values), dtype=bool) if mask is None else np.asarray(mask, bool)


def check_texts(values: Any, what: str) -> list[str]:
    """``values`` as a list of strings; a single string, None or another type is an error.

    >>> check_texts(("a", "b"), "questions")
    ['a', 'b']
    >>> check_texts("ab", "questions")
    Traceback (most recent call last):
    ...
    udcg.errors.UDCGInputError: field 'questions': expected a sequence of strings, got a single ...
    """
    if isinstance(values, str):
        raise UDCGInputError("expected a sequence of strings, got a single string", field=what)
    values = list(values)
    for i, v in enumerate(values):
        if v is None:
            raise UDCGInputError("is None (use '' for an empty text)", field=f"{what}[{i}]")
        if not isinstance(v, str):
            raise UDCGInputError(f"expected a string, got {type(v).__name__}", field=f"{what}[{i}]")
        encodable(v, f"{what}[{i}]")
    return values


def check_conversations(prompts: Any) -> list[list[dict[str, str]]]:
    """``prompts`` as a list of chat conversations, each a list of ``{"role", "content"}``
    messages with string values; one conversation given alone is an error.

    >>> check_conversations([[{"role": "user", "content": "Hi"}]])
    [[{'role': 'user', 'content': 'Hi'}]]
    >>> check_conversations([{"role": "user", "content": "Hi"}])
    Traceback (most recent call last):
    ...
    udcg.errors.UDCGInputError: field 'prompts[0]': expected a list of chat messages, got dict ...
    """
    out = []
    for i, messages in enumerate(prompts):
        if isinstance(messages, (str, Mapping)) or not isinstance(messages, Sequence):
            raise UDCGInputError(
                f"expected a list of chat messages, got {type(messages).__name__} (pass a list"
                " of conversations, each a list of messages)",
                field=f"prompts[{i}]",
            )
        for j, message in enumerate(messages):
            if not (
                isinstance(message, Mapping)
                and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)
            ):
                raise UDCGInputError(
                    "expected a message {'role': str, 'content': str}", field=f"prompts[{i}][{j}]"
                )
            for part in ("role", "content"):
                encodable(message[part], f"prompts[{i}][{j}].{part}")
        out.append(list(messages))
    return out


class Judge(ABC):
    """A scoring LLM. ``name`` keys its values (``abstain_prob[name]``); ``fingerprint``
    identifies backend, model and settings for the cache. A subclass implements the
    operations it computes, :meth:`compute`, or :meth:`run`.

    >>> class Constant(Judge):
    ...     name, fingerprint = "constant", "constant-v1"
    ...     def yes_prob(self, prompts):
    ...         return np.full(len(prompts), 0.25)
    ...     def generate(self, prompts, max_new_tokens=64):
    ...         return ['Claims: ["a", "b"]'] * len(prompts)
    >>> Constant().run([Request("yes_prob", {"messages": []})])
    [Result(value=0.25, upper_bound=False)]
    >>> Constant().generate_json([[]])[0].value
    ['a', 'b']
    """

    name: str
    fingerprint: str
    streams_results: bool = False
    #: the operations it computes (None: all five)
    provides: frozenset[str] | None = None

    def key_settings(self, operation: str) -> dict[str, Any]:
        """Settings resolved at run time that change the values of ``operation`` (part of its
        request keys); ``{}`` by default."""
        return {}

    def batch_settings(self, operations: Collection[str] | None = None) -> dict[str, Any]:
        """Settings that move the values of ``operations`` (None: all) with the other items of
        a batch (a local model's padded batches: summation order), which a resumed run must
        share; ``{}`` by default."""
        return {}

    def close(self) -> None:  # noqa: B027 (a hook: most backends hold nothing open)
        """Release the files and connections the judge holds open; it stays usable (they are
        opened again when needed), but for a :class:`~udcg.judge.ray_engine.RayJudge`, whose
        actors end. Also at the end of ``with judge:``."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def probe(self) -> None:  # noqa: B027 (a hook: in-process backends have nothing to check)
        """Check in seconds that the judge can answer; raises UDCGInputError when not."""

    def run(self, requests: Sequence[Request], on_result: OnResult | None = None) -> list[Result]:
        """One :class:`~udcg.judge.requests.Result` per request, in order, computed call by
        call (operation and parameters) by :meth:`compute`; a judge that does not stream tells
        ``on_result`` of each item when its call is done."""
        results: list[Result | None] = [None] * len(requests)
        for (op, _), positions in calls(requests).items():
            asked = [requests[i] for i in positions]
            sink = None
            if on_result is not None and self.streams_results:
                sink = lambda j, value, bound, at=positions: on_result(at[j], value, bound)  # noqa: E731
            try:
                out = self.compute(op, asked, sink)
            except RefusedRequest as refused:
                refused.request = refused.request or asked[refused.item]
                raise
            if len(out) != len(asked):
                raise RuntimeError(
                    f"judge {self.name!r} returned {len(out)} results for {len(asked)} inputs"
                    f" ({op})"
                )
            texts = op in ("generate", "generate_json")
            bounds = [False] * len(out) if texts else upper_bounds(out)
            for j, i in enumerate(positions):
                results[i] = Result(out[j] if texts else float(out[j]), bool(bounds[j]))
                if on_result is not None and not self.streams_results:  # told once done
                    on_result(i, *results[i])  # type: ignore[misc]
        return results  # type: ignore[return-value]

    def compute(self, op: str, requests: list[Request], on_result: OnResult | None) -> Any:
        """The values of one call (``requests`` of ``op`` with equal parameters): floats or
        :class:`JudgeValues`, strs for ``generate``, :class:`JSONResult` for ``generate_json``
        (default: :func:`~udcg.judge.structured.generate_json` over ``generate``). By default
        the operation's own method."""
        names, keys = OPERATIONS[op]
        params, inputs = dict(requests[0].params), [column(requests, n) for n in names]
        if op != "generate_json":
            stream = {} if on_result is None else {"on_result": on_result}
            return getattr(self, op)(*inputs, *(params[k] for k in keys), **stream)
        schema = params.pop("schema", None)
        if type(self).generate_json is Judge.generate_json:
            return generate_json(self, *inputs, **params)
        return self.generate_json(
            *inputs, **params, **({} if schema is None else {"schema": schema})
        )

    def _layered(self, op: str) -> bool:
        """Whether the operations come from this class (``run`` or ``compute`` overridden); if
        not, False for ``generate_json`` (it falls back on ``generate``), else raises."""
        if type(self).run is not Judge.run or type(self).compute is not Judge.compute:
            return True
        if op == "answer_prob":
            raise NotImplementedError(
                f"{type(self).__name__} cannot compute answer likelihoods (it does not expose "
                "teacher-forced token log-probs); use the local transformers backend"
            )
        if op != "generate_json":
            raise NotImplementedError(f"{type(self).__name__} implements neither {op} nor run")
        return False

    def _run(
        self, op: str, items: list[Any], params: dict[str, Any], on_result: OnResult | None = None
    ) -> list[Result]:
        """:meth:`run` over the requests of ``items`` of ``op``."""
        settings = self.key_settings(op) if items else {}
        requests = [make_request(op, item, params, self.fingerprint, settings) for item in items]
        return self.run(requests, **({} if on_result is None else {"on_result": on_result}))

    def _run_values(self, *args: Any) -> JudgeValues:
        results = self._run(*args)
        return judge_values([r.value for r in results], [r.upper_bound for r in results])

    def abstain_prob(
        self,
        questions: Sequence[str],
        passages: Sequence[str],
        mode: AbstainMode = "first_token",
        *,
        on_result: OnResult | None = None,
    ) -> np.ndarray:
        """P(abstain) per (question, passage) pair under the reference prompt: ``first_token``
        the softmax probability of NO-RESPONSE's first token, ``sequence`` the product of its
        tokens' teacher-forced probabilities."""
        self._layered("abstain_prob")
        questions, passages = check_texts(questions, "questions"), check_texts(passages, "passages")
        if len(questions) != len(passages):
            raise UDCGInputError(
                f"abstain_prob needs one passage per question, got {len(questions)} questions"
                f" and {len(passages)} passages"
            )
        items = [{"question": q, "passage": p} for q, p in zip(questions, passages, strict=True)]
        return self._run_values("abstain_prob", items, {"mode": mode}, on_result)

    def answer_prob(
        self,
        questions: Sequence[str],
        passages: Sequence[str],
        answers: Sequence[Sequence[str]],
        *,
        on_result: OnResult | None = None,
    ) -> np.ndarray:
        """Likelihood of an acceptable answer per (question, passage) pair, in [0, 1]: each
        answer teacher-forced as the assistant turn of the abstention conversation
        (:func:`~udcg.judge.prompts.answer_likelihood_messages`), with ``a_1..a_n`` its tokens::

            value = max over answers of exp( (1/n) * sum_t log P(a_t | prompt, a_<t) )

        ``answers[i]`` must not be empty. Backends without teacher-forced log-probs raise
        NotImplementedError."""
        self._layered("answer_prob")
        questions, passages = check_texts(questions, "questions"), check_texts(passages, "passages")
        if not len(questions) == len(passages) == len(answers):
            raise UDCGInputError(
                f"{len(questions)} questions, {len(passages)} passages and {len(answers)} answer "
                "lists: pass one passage and one list of acceptable answers per question"
            )
        for i, options in enumerate(answers):
            if isinstance(options, str) or not options:
                got = "a single string" if isinstance(options, str) else "no answers"
                raise UDCGInputError(
                    f"needs a non-empty list of acceptable answers, got {got}",
                    field=f"answers[{i}]",
                )
            for j, answer in enumerate(options):
                if not isinstance(answer, str) or not answer.strip():
                    raise UDCGInputError(
                        f"must be a non-empty string, got {answer!r}", field=f"answers[{i}][{j}]"
                    )
                encodable(answer, f"answers[{i}][{j}]")
        items = [
            {"question": q, "passage": p, "answers": list(a)}
            for q, p, a in zip(questions, passages, answers, strict=True)
        ]
        return self._run_values("answer_prob", items, {}, on_result)

    def yes_prob(
        self, prompts: Sequence[Messages], *, on_result: OnResult | None = None
    ) -> np.ndarray:
        """P(Yes) / (P(Yes) + P(No)) of the first answer token, read from log-probs."""
        self._layered("yes_prob")
        items = [{"messages": m} for m in check_conversations(prompts)]
        return self._run_values("yes_prob", items, {}, on_result)

    def generate(
        self,
        prompts: Sequence[Messages],
        max_new_tokens: int = 64,
        *,
        on_result: OnResult | None = None,
    ) -> list[str]:
        """Greedy completions."""
        self._layered("generate")
        items = [{"messages": m} for m in check_conversations(prompts)]
        params = {"max_new_tokens": int(max_new_tokens)}
        texts = [r.value for r in self._run("generate", items, params, on_result)]
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
        """Completions parsed and validated as JSON, failures returned, never raised (see
        :func:`udcg.judge.structured.generate_json`); ``schema`` (a JSON schema) lets a server
        constrain its output, other backends ignore it."""
        if not self._layered("generate_json"):
            return generate_json(self, prompts, validate, max_new_tokens, retries)
        params = dict(validate=validate, max_new_tokens=int(max_new_tokens), retries=int(retries))
        if schema is not None:
            params["schema"] = schema
        items = [{"messages": m} for m in check_conversations(prompts)]
        return [r.value for r in self._run("generate_json", items, params)]
