"""JSON answers from any judge's ``generate``: extract, validate, retry the failures (each with
its failed reply and the problem appended), never raise on model output."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from udcg.errors import UDCGInputError
from udcg.io.contexts.checks import LONE_SURROGATE, lone_surrogate
from udcg.judge.prompts import Messages

Validator = Callable[[Any], Any]


class Generates(Protocol):
    """What the JSON logic needs of a judge: greedy completions.

    >>> class Fixed:
    ...     def generate(self, prompts, max_new_tokens=64):
    ...         return ['{"a": 1}'] * len(prompts)
    >>> generate_json(Fixed(), [[]])[0].value
    {'a': 1}
    """

    def generate(self, prompts: Sequence[Messages], max_new_tokens: int = 64) -> list[str]: ...


@dataclass(frozen=True)
class Completions:
    """A :class:`Generates` made of a function ``ask(prompts, max_new_tokens)``.

    >>> Completions(lambda prompts, n: ["[1]"] * len(prompts)).generate([[]])
    ['[1]']
    """

    ask: Callable[[Sequence[Messages], int], list[str]]

    def generate(self, prompts: Sequence[Messages], max_new_tokens: int = 64) -> list[str]:
        return self.ask(prompts, max_new_tokens)


@dataclass(frozen=True)
class JSONResult:
    """One ``generate_json`` outcome: the parsed value, or the failure after all retries.

    >>> JSONResult(value=["a claim"]).ok, JSONResult(error="no JSON", attempts=3).ok
    (True, False)
    """

    value: Any = None
    error: str | None = None
    attempts: int = 1
    raw: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None


#: Exceptions by which a validator rejects a value.
VALIDATION_ERRORS = (ValueError, TypeError, KeyError, IndexError, AssertionError)

_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\r?\n?(.*?)```", re.DOTALL)
_DECODER = json.JSONDecoder()

RETRY_MESSAGE = (
    "That reply could not be used: {error}. "
    "Answer again with only the JSON value, without any other text."
)


def extract_json(text: str) -> Any:
    """The first JSON object or array in ``text``, fenced blocks first; ValueError if none
    (one nested too deeply to decode is none), or if its strings are not Unicode text.

    >>> extract_json('Sure! ```json\\n{"claims": ["a"]}\\n```'), extract_json('Claims: ["a"].')
    ({'claims': ['a']}, ['a'])
    >>> extract_json("[" * 5000)
    Traceback (most recent call last):
    ...
    ValueError: no JSON object or array found in the reply
    """
    for chunk in [*(m.group(1) for m in _FENCE.finditer(text)), text]:
        start = 0
        while positions := [p for p in (chunk.find("{", start), chunk.find("[", start)) if p >= 0]:
            try:
                value, end = _DECODER.raw_decode(chunk, min(positions))
            except (ValueError, RecursionError):
                start = min(positions) + 1
                continue
            field = lone_surrogate(chunk[min(positions) : end], value)
            if field is not None:
                raise ValueError(f"the JSON value at {field} {LONE_SURROGATE}")
            return value
    raise ValueError("no JSON object or array found in the reply")


def _check(raw: str, validate: Validator | None) -> tuple[Any, str | None]:
    try:
        value = extract_json(raw)
    except ValueError as exc:
        return None, str(exc)
    if validate is not None:
        try:
            checked = validate(value)
        except VALIDATION_ERRORS as exc:
            return None, f"invalid value: {type(exc).__name__}: {exc}"
        if checked is not None:
            value = checked
    return value, None


def generate_json(
    judge: Generates,
    prompts: Sequence[Messages],
    validate: Validator | None = None,
    max_new_tokens: int = 256,
    retries: int = 2,
) -> list[JSONResult]:
    """One :class:`JSONResult` per prompt, in order. ``validate(value)`` rejects a value by
    raising one of :data:`VALIDATION_ERRORS`; a non-None return replaces it. Failed prompts
    alone are retried up to ``retries`` times; one still failing has ``error`` set and every
    reply in ``raw``.

    >>> doubles = Completions(lambda prompts, n: ["[1, 2]"] * len(prompts))
    >>> generate_json(doubles, [[]], validate=lambda v: [2 * x for x in v])[0].value
    [2, 4]
    >>> silent = Completions(lambda prompts, n: ["no JSON"] * len(prompts))
    >>> generate_json(silent, [[]], retries=1)[0].attempts
    2
    """
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    conversations: list[Messages] = [list(m) for m in prompts]
    done = [JSONResult()] * len(conversations)  # every item is asked at least once
    pending = list(range(len(conversations)))
    for attempt in range(1, retries + 2):
        if not pending:
            break
        try:
            replies = judge.generate([conversations[i] for i in pending], max_new_tokens)
        except UDCGInputError as refused:  # RefusedRequest (requests.py imports this module):
            if isinstance(getattr(refused, "item", None), int):  # its item in the whole call
                refused.item = pending[refused.item]  # type: ignore[attr-defined]
            raise
        if len(replies) != len(pending):
            raise RuntimeError(
                f"{type(judge).__name__}.generate returned {len(replies)} replies "
                f"for {len(pending)} prompts"
            )
        for i, raw in zip(pending, replies, strict=True):
            raw = "" if raw is None else str(raw)
            value, error = _check(raw, validate)
            done[i] = JSONResult(value, error, attempt, [*done[i].raw, raw])
            if error is not None:
                conversations[i] = [
                    *conversations[i],
                    {"role": "assistant", "content": raw},
                    {"role": "user", "content": RETRY_MESSAGE.format(error=error)},
                ]
        pending = [i for i in pending if not done[i].ok]
    return done
