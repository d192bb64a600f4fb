"""The judge request: one item of one judge operation, with the key its result is cached under.

A :class:`Request` is what every layer above a backend passes around: the cache looks its
``key`` up and stores the result under it, Ray sends requests to its actors, ``udcg batch``
writes the requests the cache misses as batch lines and reads results back under their keys.
The five operations and what one request holds (``inputs`` are the item, ``params`` the call's
options)::

    abstain_prob   inputs: question, passage           params: mode
    answer_prob    inputs: question, passage, answers  params: (none)
    yes_prob       inputs: messages                    params: (none)
    generate       inputs: messages                    params: max_new_tokens
    generate_json  inputs: messages                    params: validate, max_new_tokens, retries
                                                               [, schema]

The key is :func:`udcg.judge.cache.cache_key` of the judge's fingerprint, the operation, the
chat messages the item is asked as (for ``answer_prob`` also its distinct answers, sorted), the
parameters and the judge's run-time settings of the operation
(:meth:`~udcg.judge.base.Judge.key_settings`). A ``generate_json`` request whose validator has
no stable name (a lambda, a local function, an object without a ``cache_id`` string) has no key:
it is never cached.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from udcg.judge.cache import cache_key
from udcg.judge.prompts import abstain_messages

#: How ``answer_prob`` turns token log-probs into one value (part of its keys).
ANSWER_NORMALISATION = "max_over_answers(exp(mean_token_logprob))"

#: operation -> (names of its inputs, names of its parameters)
OPERATIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "abstain_prob": (("question", "passage"), ("mode",)),
    "answer_prob": (("question", "passage", "answers"), ()),
    "yes_prob": (("messages",), ()),
    "generate": (("messages",), ("max_new_tokens",)),
    "generate_json": (("messages",), ("validate", "max_new_tokens", "retries", "schema")),
}


@dataclass(frozen=True)
class Request:
    """One item of judge operation ``op`` (see the module docstring), and its cache ``key``
    (None: not cacheable).

    Examples:
        >>> request = Request("yes_prob", {"messages": [{"role": "user", "content": "Ok?"}]})
        >>> request.op, request.key is None
        ('yes_prob', True)
    """

    op: str
    inputs: Mapping[str, Any]
    params: Mapping[str, Any] = None  # type: ignore[assignment]
    key: str | None = None

    def __post_init__(self) -> None:
        if self.op not in OPERATIONS:
            raise ValueError(f"unknown judge operation {self.op!r}; known: {', '.join(OPERATIONS)}")
        if self.params is None:
            object.__setattr__(self, "params", {})

    @property
    def args(self) -> dict[str, Any]:
        """Inputs and parameters in one mapping (the ``args`` of a batch calls line).

        Examples:
            >>> Request("generate", {"messages": []}, {"max_new_tokens": 4}).args
            {'messages': [], 'max_new_tokens': 4}
        """
        return {**self.inputs, **self.params}


class Result(NamedTuple):
    """What a backend answers for one request: the value (a float for the probability
    operations, a str for ``generate``, a :class:`~udcg.judge.structured.JSONResult` for
    ``generate_json``) and whether the value is only an upper bound (see
    :class:`~udcg.judge.base.JudgeValues`).

    Examples:
        >>> Result(0.25).upper_bound, Result(0.25, True).upper_bound
        (False, True)
    """

    value: Any
    upper_bound: bool = False


class MissingResults(Exception):
    """Raised by a judge that answers from its cache only (:meth:`CachedJudge.from_cache
    <udcg.judge.cached.CachedJudge.from_cache>`) when a call needs results the cache does not
    hold: ``requests`` are the distinct missing ones, ``first`` the position of the first of
    them in the call, ``context`` (set by the caller that knows it) the context needing it.

    Examples:
        >>> error = MissingResults([Request("yes_prob", {"messages": []})], first=3)
        >>> len(error.requests), error.first, error.context
        (1, 3, None)
    """

    def __init__(self, requests: Sequence[Request], first: int) -> None:
        super().__init__(f"{len(requests)} judge results are not in the cache")
        self.requests = list(requests)
        self.first = first
        self.context: Any = None


def validator_id(validate: Any) -> str | None:
    """A stable name for a ``generate_json`` validator (its ``cache_id`` string, else
    ``module:qualname``), or None when it has none (a lambda, a local function).

    Examples:
        >>> validator_id(None), validator_id(validator_id), validator_id(lambda v: v)
        ('none', 'udcg.judge.requests:validator_id', None)
    """
    if validate is None:
        return "none"
    explicit = getattr(validate, "cache_id", None)
    if isinstance(explicit, str) and explicit:
        return explicit
    module = getattr(validate, "__module__", None)
    qualname = getattr(validate, "__qualname__", None)
    if not (isinstance(module, str) and isinstance(qualname, str)):
        return None
    if "<lambda>" in qualname or "<locals>" in qualname:
        return None
    return f"{module}:{qualname}"


def _key_payload(op: str, inputs: Mapping[str, Any], params: Mapping[str, Any]) -> tuple[Any, Any]:
    """(payload, parameters) of the cache key of one item of ``op``; parameters None when the
    item cannot be cached."""
    if op in ("abstain_prob", "answer_prob"):
        messages = abstain_messages(inputs["question"], inputs["passage"])
        if op == "abstain_prob":
            return messages, {"mode": params["mode"]}
        answers = sorted(set(inputs["answers"]))
        return {"messages": messages, "answers": answers}, {"normalisation": ANSWER_NORMALISATION}
    messages = list(inputs["messages"])
    if op == "yes_prob":
        return messages, {}
    if op == "generate":
        return messages, {"max_new_tokens": int(params["max_new_tokens"])}
    validator = validator_id(params.get("validate"))
    if validator is None:
        return messages, None
    keyed = {
        "max_new_tokens": int(params["max_new_tokens"]),
        "retries": int(params["retries"]),
        "validate": validator,
    }
    if params.get("schema") is not None:
        keyed["schema"] = params["schema"]
    return messages, keyed


def make_request(
    op: str,
    inputs: Mapping[str, Any],
    params: Mapping[str, Any] | None = None,
    fingerprint: str | None = None,
    settings: Mapping[str, Any] | None = None,
) -> Request:
    """The request of one item of ``op``, keyed for the judge ``fingerprint`` with its
    run-time ``settings`` of ``op`` (no fingerprint: no key).

    Examples:
        The abstention mode is part of the key:

        >>> item = {"question": "Who wrote Emma?", "passage": "Austen did."}
        >>> first = make_request("abstain_prob", item, {"mode": "first_token"}, "fp")
        >>> first.key == make_request("abstain_prob", item, {"mode": "sequence"}, "fp").key
        False
    """
    params = dict(params or {})
    key = None
    if fingerprint is not None:
        payload, keyed = _key_payload(op, inputs, params)
        if keyed is not None:
            key = cache_key(fingerprint, op, payload, {**keyed, **(settings or {})})
    return Request(op, dict(inputs), params, key)


def request_of_args(
    op: str, args: Mapping[str, Any], fingerprint: str, settings: Mapping[str, Any] | None = None
) -> Request:
    """The keyed request of a batch calls line's ``op`` and ``args`` (:attr:`Request.args`).

    Examples:
        >>> args = {"messages": [], "max_new_tokens": 4}
        >>> request_of_args("generate", args, "fp").params
        {'max_new_tokens': 4}
    """
    if op not in OPERATIONS:
        raise ValueError(f"unknown judge operation {op!r}")
    names, params = OPERATIONS[op]
    return make_request(
        op,
        {n: args[n] for n in names},
        {p: args[p] for p in params if p in args},
        fingerprint,
        settings,
    )


def item_key(
    fingerprint: str,
    operation: str,
    args: Mapping[str, Any],
    settings: Mapping[str, Any] | None = None,
) -> str:
    """The cache key of one item of ``operation`` with ``args`` (inputs and parameters, as in
    a batch calls line) for the judge ``fingerprint`` and its run-time ``settings``.

    Examples:
        >>> args = {"question": "Who wrote Emma?", "passage": "Austen did.", "mode": "first_token"}
        >>> item_key("fp", "abstain_prob", args) == item_key("fp", "abstain_prob", dict(args))
        True
    """
    key = request_of_args(operation, args, fingerprint, settings).key
    if key is None:
        raise ValueError(f"an item of {operation} with these arguments has no cache key")
    return key


def calls(requests: Sequence[Request]) -> dict[tuple[str, str], list[int]]:
    """The positions of ``requests`` grouped by call: operation and parameters (the parameters
    as their repr, so that a validator object or a schema groups too), in first-seen order.

    Examples:
        >>> asked = [Request("generate", {"messages": []}, {"max_new_tokens": n}) for n in (4, 8)]
        >>> asked.append(asked[0])
        >>> list(calls(asked).values())
        [[0, 2], [1]]
    """
    grouped: dict[tuple[str, str], list[int]] = {}
    for i, request in enumerate(requests):
        grouped.setdefault((request.op, repr(sorted(request.params.items()))), []).append(i)
    return grouped


def column(requests: Sequence[Request], name: str) -> list[Any]:
    """Input ``name`` of every request.

    Examples:
        >>> column([Request("yes_prob", {"messages": ["m"]})], "messages")
        [['m']]
    """
    return [request.inputs[name] for request in requests]
