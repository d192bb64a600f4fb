"""JSON answers from any judge: extract, validate, retry the failures, never raise on model output.

The logic only needs :meth:`Judge.generate`, so it works with every backend. A retry re-asks the
failed prompts only, with the failed reply and what was wrong appended to the conversation
(greedy decoding would otherwise repeat the same reply).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from udcg.judge.prompts import Messages

Validator = Callable[[Any], Any]


class Generates(Protocol):
    """What the JSON logic needs of a judge: greedy completions.

    Examples:
        Any object with ``generate`` (a :class:`~udcg.judge.base.Judge`, or):

        >>> class Fixed:
        ...     def generate(self, prompts, max_new_tokens=64):
        ...         return ['{"a": 1}'] * len(prompts)
        >>> generate_json(Fixed(), [[]])[0].value
        {'a': 1}
    """

    def generate(self, prompts: Sequence[Messages], max_new_tokens: int = 64) -> list[str]: ...


@dataclass(frozen=True)
class Completions:
    """A :class:`Generates` made of a function ``ask(prompts, max_new_tokens)`` (e.g. a backend's
    completions with options of its own, such as a requested output format).

    Examples:
        >>> echo = Completions(lambda prompts, n: [p[-1]["content"] for p in prompts])
        >>> echo.generate([[{"role": "user", "content": "[1, 2]"}]])
        ['[1, 2]']
    """

    ask: Callable[[Sequence[Messages], int], list[str]]

    def generate(self, prompts: Sequence[Messages], max_new_tokens: int = 64) -> list[str]:
        return self.ask(prompts, max_new_tokens)


@dataclass(frozen=True)
class JSONResult:
    """One ``generate_json`` outcome: the parsed value, or the failure after all retries.

    Examples:
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


# Exceptions a validator may raise to reject a value (a malformed value easily triggers the
# last four inside a validator that only means to check it).
VALIDATION_ERRORS = (ValueError, TypeError, KeyError, IndexError, AssertionError)

_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\r?\n?(.*?)```", re.DOTALL)
_DECODER = json.JSONDecoder()

RETRY_MESSAGE = (
    "That reply could not be used: {error}. "
    "Answer again with only the JSON value, without any other text."
)


def extract_json(text: str) -> Any:
    """The first JSON object or array in ``text``; fenced blocks (```json ... ```) first.

    Raises ValueError when there is none.

    Examples:
        >>> extract_json('Sure! ```json\\n{"claims": ["a"]}\\n```')
        {'claims': ['a']}
        >>> extract_json('Claims: ["a", "b"].')
        ['a', 'b']
    """
    candidates = [m.group(1) for m in _FENCE.finditer(text)]
    candidates.append(text)
    for chunk in candidates:
        start = 0
        while True:
            positions = [p for p in (chunk.find("{", start), chunk.find("[", start)) if p >= 0]
            if not positions:
                break
            pos = min(positions)
            try:
                value, _ = _DECODER.raw_decode(chunk, pos)
            except ValueError:
                start = pos + 1
                continue
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
    """Ask ``judge`` for JSON answers, one :class:`JSONResult` per prompt, in order.

    ``validate(value)`` rejects a parsed value by raising ValueError (or TypeError, KeyError,
    IndexError, AssertionError); when it returns something other than None, that becomes the
    value (e.g. a normalised form). Failed prompts are retried, alone, at most ``retries``
    times. A prompt still failing is returned with ``error`` set, ``value`` None and every raw
    reply in ``raw``; model output never raises.

    Examples:
        A validator's return value replaces the parsed one; a reply without JSON fails after
        its retry:

        >>> doubles = Completions(lambda prompts, n: ["[1, 2]"] * len(prompts))
        >>> generate_json(doubles, [[]], validate=lambda v: [2 * x for x in v])[0].value
        [2, 4]
        >>> silent = Completions(lambda prompts, n: ["no JSON"] * len(prompts))
        >>> result = generate_json(silent, [[]], retries=1)[0]
        >>> result.ok, result.attempts, result.error
        (False, 2, 'no JSON object or array found in the reply')
    """
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    n = len(prompts)
    conversations: list[Messages] = [list(m) for m in prompts]
    raws: list[list[str]] = [[] for _ in range(n)]
    done: list[JSONResult | None] = [None] * n
    errors: list[str | None] = [None] * n
    pending = list(range(n))
    for attempt in range(1, retries + 2):
        if not pending:
            break
        replies = judge.generate([conversations[i] for i in pending], max_new_tokens)
        if len(replies) != len(pending):
            raise RuntimeError(
                f"{type(judge).__name__}.generate returned {len(replies)} replies "
                f"for {len(pending)} prompts"
            )
        still: list[int] = []
        for i, raw in zip(pending, replies, strict=True):
            raw = "" if raw is None else str(raw)
            raws[i].append(raw)
            value, error = _check(raw, validate)
            if error is None:
                done[i] = JSONResult(value=value, attempts=attempt, raw=raws[i])
                continue
            errors[i] = error
            conversations[i] = [
                *conversations[i],
                {"role": "assistant", "content": raw},
                {"role": "user", "content": RETRY_MESSAGE.format(error=error)},
            ]
            still.append(i)
        pending = still
    for i in pending:
        done[i] = JSONResult(value=None, error=errors[i], attempts=len(raws[i]), raw=raws[i])
    return [r for r in done if r is not None]
