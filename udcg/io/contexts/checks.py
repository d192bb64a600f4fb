"""Checks of parsed JSON values with located errors, shared by the context readers.

Each check takes the value, its field name and a :class:`Where` (file, line, field prefix),
returns the value in its model form and raises :class:`~udcg.errors.UDCGInputError` as
``FILE:LINE: field 'x': ...`` when the value does not fit. Nothing here knows the context
dataclasses: :mod:`udcg.io.contexts.model` and :mod:`udcg.io.formats.reference` build them from the
checked values.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from udcg.errors import UDCGInputError
from udcg.io.files import PathType

__all__ = [
    "ANSWER_LABELS",
    "ROLES",
    "Where",
    "answer_labels",
    "conversation",
    "covers",
    "covers_prob",
    "finite",
    "identifier",
    "json_object",
    "json_problem",
    "kind",
    "lone_surrogate",
    "optional_str",
    "outcomes",
    "prob_map",
    "probability",
    "relevance",
    "short",
    "str_list",
    "unique_ids",
]

#: Q-CARE labels of one answer, inside ``outcomes[model]``: the answer's atomic ``claims`` and
#: the judge's (or a human's) hard checks, each with an optional soft twin ``<name>_prob``.
#: Axes: ``subquery_covered[s]``, ``claim_relevance[f][s]``, ``claim_support[f][chunk]``.
ANSWER_LABELS = ("subquery_covered", "claim_relevance", "claim_support")
#: An outcome's Q-CARE label fields: its claims, each check and its soft twin.
OUTCOME_LABELS = ("claims", *(f"{n}{t}" for n in ANSWER_LABELS for t in ("", "_prob")))
#: Speakers of a ``conversation`` turn.
ROLES = ("user", "assistant")
#: A JSON escape of a UTF-16 surrogate: the only way a lone one gets into decoded JSON text.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
#: Why a string holding a lone surrogate is refused.
LONE_SURROGATE = (
    "holds a lone surrogate (a \\ud800-\\udfff escape outside a pair): not Unicode text,"
    " UTF-8 cannot encode it"
)


def json_problem(exc: ValueError | RecursionError) -> str:
    """What is wrong with a text :mod:`json` could not decode, from the exception it raised:
    a syntax error (with its column), nesting deeper than Python's recursion limit, or an
    integer with more digits than Python converts."""
    if isinstance(exc, json.JSONDecodeError):
        return f"malformed JSON: {exc.msg} (column {exc.colno})"
    if isinstance(exc, RecursionError):
        return "malformed JSON: nested too deeply"
    return "malformed JSON: an integer with more digits than Python converts"


def lone_surrogate(text: str, value: Any) -> str | None:
    """The field (``passages[0].text``; ``""`` for ``value`` itself) of the first string,
    object keys included, holding a lone surrogate in ``value``, decoded from the JSON
    ``text``; None when every string is Unicode text. JSON can escape a lone surrogate
    (``"\\ud800"``), UTF-8 cannot encode one: it would fail wherever the text is written.

    Examples:
        >>> text = '{"qid": "q", "passages": [{"text": "a\\\\ud800"}]}'
        >>> lone_surrogate(text, json.loads(text))
        'passages[0].text'
        >>> text = '{"question": "\\\\ud83d\\\\ude00"}'  # a pair: one character
        >>> lone_surrogate(text, json.loads(text)) is None
        True
    """
    if not _SURROGATE_ESCAPE.search(text):
        return None
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        field, item = stack.pop()
        if isinstance(item, str) and _SURROGATE.search(item):
            return field
        if isinstance(item, dict):
            for key in item:
                if _SURROGATE.search(key):
                    return f"{field}.{key!r}" if field else repr(key)
            inner = [(f"{field}.{key}" if field else key, v) for key, v in item.items()]
        elif isinstance(item, list):
            inner = [(f"{field}[{i}]", v) for i, v in enumerate(item)]
        else:
            continue
        stack.extend(reversed(inner))
    return None


class Where:
    """Where a value came from: file, line and a prefix for field paths."""

    __slots__ = ("line", "path", "prefix")

    def __init__(self, path: PathType | None, line: int | None, prefix: str = "") -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.prefix = prefix

    def error(self, name: str, message: str) -> UDCGInputError:
        """The error for field ``name`` (after the prefix) at this place."""
        return UDCGInputError(message, path=self.path, line=self.line, field=self.prefix + name)

    def source(self) -> tuple[str, int] | None:
        """``(file, line)``, or ``None`` for a value that did not come from a file."""
        return None if self.path is None or self.line is None else (self.path, self.line)


def kind(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {short(value)}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def short(text: str, limit: int = 40) -> str:
    """``repr`` of ``text``, cut to about ``limit`` characters."""
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def identifier(value: Any, name: str, where: Where) -> str:
    """A non-empty string id; JSON integers are accepted and converted to strings."""
    if isinstance(value, str):
        if not value.strip():
            raise where.error(name, "must be a non-empty string, got an empty or blank string")
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise where.error(name, f"must be a non-empty string or an integer, got {kind(value)}")


def optional_str(value: Any, name: str, where: Where) -> str | None:
    """A string or ``None``."""
    if value is None or isinstance(value, str):
        return value
    raise where.error(name, f"must be a string, got {kind(value)}")


def str_list(value: Any, name: str, where: Where) -> list[str] | None:
    """A list of strings or ``None``."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise where.error(name, f"must be a list of strings, got {kind(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise where.error(f"{name}[{i}]", f"must be a string, got {kind(item)}")
    return value


def finite(value: Any, name: str, where: Where, what: str = "a finite number") -> float:
    """A finite float from a JSON number (not a boolean)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.error(name, f"must be {what}, got {kind(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise where.error(name, f"must be {what}, got {value!r}")
    return number


def probability(value: Any, name: str, where: Where) -> float:
    """A float in [0, 1]."""
    what = "a probability in [0, 1]"
    number = finite(value, name, where, what)
    if not 0.0 <= number <= 1.0:
        raise where.error(name, f"must be {what}, got {value!r}")
    return number


def relevance(value: Any, name: str, where: Where) -> bool | float | None:
    """``true``/``false`` (kept as ``bool``), a finite number >= 0 (graded) or ``None``."""
    if value is None or isinstance(value, bool):
        return value
    what = "true, false or a finite number >= 0"
    number = finite(value, name, where, what)
    if number < 0:
        raise where.error(name, f"must be {what}, got {value!r}")
    return number


def json_object(value: Any, name: str, where: Where) -> dict[str, Any]:
    """A JSON object (``dict``)."""
    if not isinstance(value, dict):
        raise where.error(name, f"must be an object, got {kind(value)}")
    return value


def prob_map(value: Any, name: str, where: Where) -> dict[str, float]:
    """A ``model -> probability`` object; ``None`` is an empty map."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise where.error(
            name, f"must be an object mapping model -> probability, got {kind(value)}"
        )
    return {model: probability(p, f"{name}.{model}", where) for model, p in value.items()}


def covers(value: Any, name: str, where: Where, n_sub: int | None) -> list[bool | None] | None:
    """Per sub-query coverage labels; ``null`` marks a check that gave no usable answer."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise where.error(name, f"must be a list of booleans, got {kind(value)}")
    for i, item in enumerate(value):
        if item is not None and not isinstance(item, bool):
            raise where.error(
                f"{name}[{i}]", f"must be true or false (null: no usable answer), got {kind(item)}"
            )
    if n_sub is not None and len(value) != n_sub:
        raise where.error(name, f"has {len(value)} entries but the context has {n_sub} subqueries")
    return value


def covers_prob(value: Any, name: str, where: Where, n_sub: int | None) -> Any:
    """Per sub-query fractional coverage in [0, 1] (the judge's P(Yes), or the share of
    annotators who said the chunk covers the sub-query); ``null`` entries mark a check without
    a usable answer. Returned unchanged (a passage keeps it in ``extra``)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise where.error(name, f"must be a list of numbers in [0, 1], got {kind(value)}")
    for i, item in enumerate(value):
        if item is not None:
            probability(item, f"{name}[{i}]", where)
    if n_sub is not None and len(value) != n_sub:
        raise where.error(name, f"has {len(value)} entries but the context has {n_sub} subqueries")
    return value


def conversation(value: Any, name: str, where: Where, question: str | None) -> Any:
    """A multi-turn query: a non-empty list of turns ``{"role": "user" | "assistant",
    "content": "..."}`` (other keys of a turn are kept) ending with a user turn, which the
    context's ``question`` must hold. Returned unchanged (the context keeps it in ``extra``).

    Examples:
        >>> turns = [{"role": "user", "content": "Who wrote Emma?"},
        ...          {"role": "assistant", "content": "Jane Austen."},
        ...          {"role": "user", "content": "When?"}]
        >>> conversation(turns, "conversation", Where(None, None), "When?") is turns
        True
        >>> conversation(turns[:2], "conversation", Where("c.jsonl", 3), "When?")
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: c.jsonl:3: field 'conversation[1].role': the last turn ...
    """
    if not isinstance(value, list) or not value:
        raise where.error(name, f"must be a non-empty list of turns, got {kind(value)}")
    for i, turn in enumerate(value):
        json_object(turn, f"{name}[{i}]", where)
        role, content = turn.get("role"), turn.get("content")
        if role not in ROLES:
            raise where.error(
                f"{name}[{i}].role", f"must be one of {', '.join(ROLES)}, got {short(str(role))}"
            )
        if not isinstance(content, str) or not content.strip():
            raise where.error(f"{name}[{i}].content", "must be a non-empty string")
    last = len(value) - 1
    if value[last]["role"] != "user":
        raise where.error(
            f"{name}[{last}].role",
            f"the last turn must be a user turn (the query), got {value[last]['role']!r}",
        )
    if question != value[last]["content"]:
        raise where.error(
            "question",
            "must hold the conversation's last user turn, "
            + ("missing" if question is None else f"got {short(question)}"),
        )
    return value


def outcomes(value: Any, name: str, where: Where) -> dict[str, dict[str, Any]]:
    """A ``model -> outcome object`` map whose optional ``correct`` is a boolean."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise where.error(name, f"must be an object mapping model -> outcome, got {kind(value)}")
    for model, outcome in value.items():
        json_object(outcome, f"{name}.{model}", where)
        correct = outcome.get("correct")
        if correct is not None and not isinstance(correct, bool):
            raise where.error(
                f"{name}.{model}.correct", f"must be true or false, got {kind(correct)}"
            )
    return value


def _label_grid(
    value: Any, name: str, where: Where, shape: tuple[int | None, ...], soft: bool
) -> None:
    """A nested list of booleans (or probabilities when ``soft``) or nulls of ``shape``
    (``None`` = size not known here, not checked)."""
    if not shape:
        if value is None:
            return
        if soft:
            probability(value, name, where)
        elif not isinstance(value, bool):
            raise where.error(name, f"must be true, false or null, got {kind(value)}")
        return
    if not isinstance(value, list):
        raise where.error(name, f"must be a list, got {kind(value)}")
    if shape[0] is not None and len(value) != shape[0]:
        raise where.error(name, f"has {len(value)} entries, expected {shape[0]}")
    for i, item in enumerate(value):
        _label_grid(item, f"{name}[{i}]", where, shape[1:], soft)


def answer_labels(
    checked: dict[str, dict[str, Any]], where: Where, n_sub: int | None, passages: Any
) -> dict[str, dict[str, Any]]:
    """Check the :data:`ANSWER_LABELS` of every outcome in ``checked`` (as :func:`outcomes`
    returns it) against the claims, sub-queries and passages of the context (shapes and
    value types); returns ``checked`` unchanged."""
    k = len(passages) if isinstance(passages, list) else None
    for model, outcome in checked.items():
        base = f"outcomes.{model}"
        claims = str_list(outcome.get("claims"), f"{base}.claims", where)
        n_claims = None if claims is None else len(claims)
        shapes = dict(zip(ANSWER_LABELS, ((n_sub,), (n_claims, n_sub), (n_claims, k)), strict=True))
        for key, shape in shapes.items():
            for name, soft in ((key, False), (f"{key}_prob", True)):
                if outcome.get(name) is not None:
                    _label_grid(outcome[name], f"{base}.{name}", where, shape, soft)
    return checked


def unique_ids(doc_ids: Sequence[str | None], where: Where, name: str = "passages") -> None:
    """Raise at the first ``doc_id`` seen before in the list (``None`` ids are not compared)."""
    seen: dict[str, int] = {}
    for i, doc_id in enumerate(doc_ids):
        if doc_id is None:
            continue
        first = seen.setdefault(doc_id, i)
        if first != i:
            raise where.error(
                f"{name}[{i}].doc_id",
                f"duplicate doc_id {short(doc_id)} (already at {name}[{first}])",
            )
