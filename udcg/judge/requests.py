"""The judge request: one item of one judge operation (:data:`OPERATIONS` names its inputs and
parameters), with the key its result is cached under; the cache, Ray and ``udcg batch`` pass
requests around.

The key is :func:`udcg.judge.cache.cache_key` of the judge's fingerprint, the operation, the
item's chat messages (``answer_prob``: also its sorted distinct answers), the parameters and
:meth:`~udcg.judge.base.Judge.key_settings`. A ``generate_json`` request whose validator has no
stable name (a lambda, a local function, no ``cache_id`` string) has no key: never cached.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from udcg.errors import UDCGInputError
from udcg.judge.cache import cache_key
from udcg.judge.prompts import abstain_messages

#: How ``answer_prob`` turns token log-probs into one value (part of its keys).
ANSWER_NORMALISATION = "max_over_answers(exp(mean_token_logprob))"

#: operation -> (names of its inputs, names of its parameters; ``schema`` optional)
OPERATIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "abstain_prob": (("question", "passage"), ("mode",)),
    "answer_prob": (("question", "passage", "answers"), ()),
    "yes_prob": (("messages",), ()),
    "generate": (("messages",), ("max_new_tokens",)),
    "generate_json": (("messages",), ("validate", "max_new_tokens", "retries", "schema")),
}


@dataclass(frozen=True)
class Request:
    """One item of operation ``op`` and its cache ``key`` (None: not cacheable).

    >>> Request("generate", {"messages": []}, {"max_new_tokens": 4}).args
    {'messages': [], 'max_new_tokens': 4}
    """

    op: str
    inputs: Mapping[str, Any]
    params: Mapping[str, Any] = field(default_factory=dict)
    key: str | None = None

    def __post_init__(self) -> None:
        if self.op not in OPERATIONS:
            raise ValueError(f"unknown judge operation {self.op!r}; known: {', '.join(OPERATIONS)}")

    @property
    def args(self) -> dict[str, Any]:
        """Inputs and parameters in one mapping (the ``args`` of a batch calls line)."""
        return {**self.inputs, **self.params}


class Result(NamedTuple):
    """The value of one request (float, str for ``generate``, JSONResult for
    ``generate_json``) and whether it is only an upper bound.

    >>> Result(0.25)
    Result(value=0.25, upper_bound=False)
    """

    value: Any
    upper_bound: bool = False


class MissingResults(Exception):
    """Raised by a cache-only judge when a call needs results it lacks: ``requests`` the
    distinct missing ones, ``first`` the position of the first in the call, ``context`` set by
    the caller.

    >>> MissingResults([Request("yes_prob", {"messages": []})], first=3).first
    3
    """

    def __init__(self, requests: Sequence[Request], first: int) -> None:
        super().__init__(f"{len(requests)} judge results are not in the cache")
        self.requests, self.first = list(requests), first
        self.context: Any = None


class RefusedRequest(UDCGInputError):
    """A request a backend refuses as input (a prompt over its model's context): ``item`` its
    position in the backend's call, ``request`` the request (set by :meth:`Judge.run`), so that
    a caller can name the input that holds it.

    >>> RefusedRequest("too long", item=2).item
    2
    """

    def __init__(self, message: str, item: int, request: Request | None = None) -> None:
        super().__init__(message)
        self.item, self.request = item, request

    def __reduce__(self) -> Any:  # kept through a Ray worker
        return type(self), (self.reason, self.item, self.request)


def validator_id(validate: Any) -> str | None:
    """A stable name for a validator (its ``cache_id`` string, else ``module:qualname``), None
    for a lambda, a local function or a method bound to an instance (its result depends on the
    instance, which the name does not say).

    >>> validator_id(None), validator_id(validator_id), validator_id(lambda v: v)
    ('none', 'udcg.judge.requests:validator_id', None)
    """
    if validate is None:
        return "none"
    explicit = getattr(validate, "cache_id", None)
    if isinstance(explicit, str) and explicit:
        return explicit
    module, name = getattr(validate, "__module__", None), getattr(validate, "__qualname__", None)
    if not (isinstance(module, str) and isinstance(name, str)):
        return None
    if "<lambda>" in name or "<locals>" in name:
        return None
    if inspect.ismethod(validate) and not isinstance(validate.__self__, type):
        return None
    return f"{module}:{name}"


def _key_payload(op: str, inputs: Mapping[str, Any], params: Mapping[str, Any]) -> tuple[Any, Any]:
    """(payload, keyed parameters) of one item of ``op``; parameters None: not cacheable."""
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
    """The request of one item of ``op``, keyed for judge ``fingerprint`` and its run-time
    ``settings`` (no fingerprint: no key).

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


def item_key(
    fingerprint: str,
    operation: str,
    args: Mapping[str, Any],
    settings: Mapping[str, Any] | None = None,
) -> str:
    """The cache key of the item of ``operation`` with batch-line ``args`` (:attr:`Request.args`).

    >>> len(item_key("fp", "generate", {"messages": [], "max_new_tokens": 4}))
    64
    """
    if operation not in OPERATIONS:
        raise ValueError(f"unknown judge operation {operation!r}")
    names, params = OPERATIONS[operation]
    inputs, asked = {n: args[n] for n in names}, {p: args[p] for p in params if p in args}
    key = make_request(operation, inputs, asked, fingerprint, settings).key
    if key is None:
        raise ValueError(f"an item of {operation} with these arguments has no cache key")
    return key


def calls(requests: Sequence[Request]) -> dict[tuple[str, str], list[int]]:
    """Positions of ``requests`` grouped by operation and parameters (by repr), first-seen order.

    >>> asked = [Request("generate", {"messages": []}, {"max_new_tokens": n}) for n in (4, 8, 4)]
    >>> list(calls(asked).values())
    [[0, 2], [1]]
    """
    grouped: dict[tuple[str, str], list[int]] = {}
    for i, request in enumerate(requests):
        grouped.setdefault((request.op, repr(sorted(request.params.items()))), []).append(i)
    return grouped


def column(requests: Sequence[Request], name: str) -> list[Any]:
    """Input ``name`` of every request.

    >>> column([Request("yes_prob", {"messages": ["m"]})], "messages")
    [['m']]
    """
    return [request.inputs[name] for request in requests]
