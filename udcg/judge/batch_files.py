"""Batch files of the OpenAI-compatible judge (formats: docs/batch.md, docs/integrity.md).

* request line (OpenAI Batch API input, read by ``vllm run-batch`` too): ``{"custom_id": KEY,
  "method": "POST", "url": "/v1/chat/completions", "body": BODY}``, KEY the call's cache key;
* call line (the calls file beside it): ``{"custom_id": KEY, "judge": FINGERPRINT,
  "operation": OP, "args": ARGS, "settings": SETTINGS}``; KEY is recomputed when read, so an
  edited line is refused;
* result line (OpenAI Batch output): ``{"id", "custom_id", "response": {"status_code",
  "request_id", "body"}, "error"}``, read as the online backend reads a reply.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any

from udcg.errors import UDCGInputError
from udcg.io.contexts.checks import LONE_SURROGATE, lone_surrogate
from udcg.io.files import STDIO, PathType, numbered_lines, refuse_same_file
from udcg.judge.cache import FORMS
from udcg.judge.openai_http import snippet
from udcg.judge.openai_replies import (
    ReplyError,
    first_choice,
    first_token_logprobs,
    message_text,
    over_budget,
    same_model,
    token_prob,
    yes_ratio,
)
from udcg.judge.openai_requests import CHAT_PATH, first_token_body, generate_body
from udcg.judge.prompts import abstain_messages
from udcg.judge.requests import OPERATIONS as REQUESTS
from udcg.judge.requests import Request, item_key

#: The ``url`` of every request line: the chat endpoint under the API root ``/v1``.
BATCH_URL = "/v1" + CHAT_PATH
#: Judge methods whose calls a batch file can hold, and the argument names of one item.
OPERATIONS: dict[str, tuple[str, ...]] = {
    op: sum(REQUESTS[op], ()) for op in ("abstain_prob", "yes_prob", "generate")
}
#: The most lines the OpenAI Batch API takes in one input file.
OPENAI_MAX_LINES = 50_000
#: How the name of a calls file ends.
CALLS_SUFFIX = ".calls.jsonl"


@dataclass(frozen=True)
class Call:
    """One judge call: cache key, judge fingerprint, method, one item's arguments (see
    :data:`OPERATIONS`) and the judge's run-time settings of the method (part of the key)."""

    custom_id: str
    judge: str
    operation: str
    args: Mapping[str, Any]
    settings: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, request: Request, fingerprint: str, settings: Mapping[str, Any]) -> Call:
        """The call of a keyed ``request`` of the judge ``fingerprint``."""
        if request.key is None:
            raise ValueError(f"a {request.op} request without a key cannot be a batch call")
        return cls(request.key, fingerprint, request.op, request.args, dict(settings))

    def to_json(self) -> dict[str, Any]:
        return {**vars(self), "args": dict(self.args), "settings": dict(self.settings)}


@dataclass(frozen=True)
class ChatSettings:
    """A request body besides the prompt: an ``OpenAIJudge``'s model, extra_body, top_logprobs."""

    model: str
    extra_body: Mapping[str, Any]
    top_logprobs: int


def request_body(call: Call, chat: ChatSettings) -> dict[str, Any]:
    """The body of ``call``'s chat completion, the one the online backend posts."""
    args = call.args
    if call.operation == "generate":
        return generate_body(chat.model, args["messages"], chat.extra_body, args["max_new_tokens"])
    if call.operation == "abstain_prob":
        args = {"messages": abstain_messages(args["question"], args["passage"])}
    return first_token_body(chat.model, args["messages"], chat.extra_body, chat.top_logprobs)


def calls_path(requests: PathType) -> Path:
    """The calls file of a requests file: ``requests.jsonl`` -> ``requests.calls.jsonl``; a
    name that is not ``NAME.jsonl``, or is a calls file's, is refused (so that two requests
    files never share a calls file, and batch runners, which read no gzip, can read it)."""
    if str(requests) == STDIO:
        raise UDCGInputError(
            "requests go to a file (the calls file is written beside it), not to stdout",
            path=requests,
        )
    path = Path(requests)
    if not path.name.endswith(".jsonl") or path.name.endswith(CALLS_SUFFIX):
        raise UDCGInputError(
            f"a requests file is plain JSONL named NAME.jsonl, not NAME{CALLS_SUFFIX} (its calls"
            f" file is written beside it as NAME{CALLS_SUFFIX}; batch runners read no gzip)",
            path=requests,
        )
    return path.with_name(path.name.removesuffix(".jsonl") + CALLS_SUFFIX)


def _json_line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n"


class RequestWriter:
    """Writes request lines, and their calls file beside them, to ``requests`` or (with
    ``max_lines``) to its parts (``paths``: the files written); refuses to write any of
    ``inputs`` (name -> path)."""

    def __init__(
        self,
        requests: PathType,
        max_lines: int | None = None,
        inputs: Mapping[str, PathType | None] | None = None,
    ) -> None:
        if max_lines is not None and max_lines < 1:
            raise UDCGInputError(f"must be >= 1, got {max_lines}", field="max_lines")
        self.requests = Path(requests)
        self.max_lines = max_lines
        self.calls = calls_path(self.requests)
        self.inputs = dict(inputs or {})
        self.paths: list[Path] = []
        self.count = 0
        refuse_same_file(self.calls, self.inputs)
        if max_lines is None:
            refuse_same_file(self.requests, self.inputs)
        self._calls: IO[str] = open(self.calls, "w", encoding="utf-8")
        self._part: IO[str] | None = None

    def _next_part(self) -> IO[str]:
        if self._part is not None:
            self._part.close()
        path = self.requests  # with max_lines: part N, requests.jsonl -> requests-00N.jsonl
        if self.max_lines is not None:
            part = f"{path.name.removesuffix('.jsonl')}-{1 + len(self.paths):03d}.jsonl"
            path = path.with_name(part)
        refuse_same_file(path, self.inputs)
        self.paths.append(path)
        self._part = open(path, "w", encoding="utf-8")
        return self._part

    def write(self, call: Call, body: Mapping[str, Any]) -> None:
        """One request line and its call line."""
        full = self.max_lines is not None and self.count % self.max_lines == 0
        part = self._next_part() if self._part is None or full else self._part
        line = {"custom_id": call.custom_id, "method": "POST", "url": BATCH_URL, "body": dict(body)}
        part.write(_json_line(line))
        self._calls.write(_json_line(call.to_json()))
        self.count += 1

    def close(self) -> None:
        """Close the files; with no request at all, the (empty) requests file still exists."""
        if self._part is None:
            self._next_part()
        assert self._part is not None
        self._part.close()
        self._calls.close()

    def __enter__(self) -> RequestWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _messages(value: Any) -> bool:
    """True for chat messages: a non-empty list of ``{"role": str, "content": str}``."""
    if not isinstance(value, list) or not value:
        return False
    shaped = all(isinstance(m, dict) and set(m) == {"role", "content"} for m in value)
    return shaped and all(isinstance(v, str) for m in value for v in m.values())


def _args_problem(operation: str, args: Mapping[str, Any]) -> str | None:
    """What is wrong with the arguments of one call of ``operation``, or None."""
    if operation == "abstain_prob":
        if not all(isinstance(args[name], str) for name in ("question", "passage")):
            return "question and passage must be strings"
        if args["mode"] != "first_token":
            return (
                f"mode must be first_token, not {args['mode']!r}: a chat reply holds the first"
                " token's log-probs only (mode sequence needs the local backend)"
            )
    elif not _messages(args["messages"]):
        return "messages must be a list of {'role': str, 'content': str}"
    elif operation == "generate":
        limit = args["max_new_tokens"]
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            return "max_new_tokens must be an integer >= 1"
    return None


def read_calls(
    path: PathType,
    fingerprint: str,
    settings: Callable[[str], Mapping[str, Any]],
    also: str | None = None,
) -> Iterator[Call]:
    """The calls of a calls file, each checked: one of another judge (fingerprint, or ``also``
    when given, or run-time ``settings(operation)``) or whose custom_id is not its recomputed
    cache key is an error."""
    for number, text in numbered_lines(path):
        if not text.strip():
            continue
        fail = partial(UDCGInputError, path=path, line=number)
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise fail(f"not valid JSON ({exc})") from None
        if (field := lone_surrogate(text, obj)) is not None:
            raise fail(LONE_SURROGATE, field=field or None)
        if not isinstance(obj, dict) or not isinstance(obj.get("custom_id"), str):
            raise fail("expected a call object with a 'custom_id' string")
        operation, args = obj.get("operation"), obj.get("args")
        if not isinstance(operation, str) or operation not in OPERATIONS:
            got = snippet(repr(operation))
            raise fail(f"must be one of {', '.join(OPERATIONS)}, got {got}", field="operation")
        if not isinstance(args, dict) or set(args) != set(OPERATIONS[operation]):
            raise fail(f"must hold {', '.join(OPERATIONS[operation])}", field="args")
        problem = _args_problem(operation, args)
        if problem is not None:
            raise fail(problem, field="args")
        if obj.get("judge") not in (fingerprint, also) or obj.get("judge") is None:
            raise fail(
                f"exported for judge {snippet(repr(obj.get('judge')))}, not {fingerprint!r}:"
                " import with the same --judge and --judge-option as the export",
                field="judge",
            )
        expected = dict(settings(operation))
        if obj.get("settings", {}) != expected:
            raise fail(
                f"exported with the run-time settings {snippet(repr(obj.get('settings')))} of"
                f" {operation}, this judge has {expected!r} (its server's tokenizer gives"
                " another abstention token?): import with the judge the export used",
                field="settings",
            )
        key = item_key(obj["judge"], operation, args, expected)
        if obj["custom_id"] != key:
            raise fail(
                f"{snippet(repr(obj['custom_id']))} is not the cache key of this call's judge,"
                f" operation and args ({key}): the line was edited; export the requests again",
                field="custom_id",
            )
        yield Call(key, obj["judge"], operation, args, expected)


@dataclass(frozen=True)
class ResultLine:
    """One batch output line: where, its ``custom_id`` (or None), the reply ``body`` or the
    ``error`` that makes it unusable."""

    path: str
    line: int
    custom_id: str | None
    body: Any = None
    error: str | None = None


def read_results(path: PathType) -> Iterator[ResultLine]:
    """Every non-blank line of a batch output file as a :class:`ResultLine`."""
    for number, text in numbered_lines(path):
        if text.strip():
            yield ResultLine(str(path), number, *_result(text))


def _result(text: str) -> tuple[str | None, Any, str | None]:
    """``(custom_id, body, error)`` of one result line; ``error``: why it is unusable."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return None, None, f"not valid JSON ({exc})"
    if (field := lone_surrogate(text, obj)) is not None:
        return None, None, f"field {field!r} {LONE_SURROGATE}" if field else LONE_SURROGATE
    if not isinstance(obj, dict):
        return None, None, f"expected a result object, got {type(obj).__name__}"
    custom_id = obj.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return None, None, "no 'custom_id' string"
    if obj.get("error") is not None:
        return custom_id, None, f"the batch reports an error: {snippet(json.dumps(obj['error']))}"
    response = obj.get("response")
    if not isinstance(response, dict):
        return custom_id, None, "no 'response' object"
    status, body = response.get("status_code"), response.get("body")
    if isinstance(status, bool) or not isinstance(status, int):
        return custom_id, None, f"'status_code' {snippet(json.dumps(status))} is not an integer"
    if status != 200:
        return custom_id, None, f"HTTP status {status}: {snippet(json.dumps(body))}"
    if not isinstance(body, dict):
        return custom_id, None, "status 200 without a 'body' object"
    return custom_id, body, None


def reply_value(
    operation: str, body: Any, marker: str | None, top_logprobs: int
) -> tuple[Any, bool]:
    """``(value, is upper bound)`` of a chat completion ``body``, as the online backend reads
    it: ``abstain_prob`` P(first token of NO-RESPONSE, text ``marker``), ``yes_prob``
    P(Yes) / (P(Yes) + P(No)), ``generate`` the text. Raises :class:`ReplyError`."""
    choice = first_choice(body)
    if operation == "generate":
        return message_text(choice), False
    top = first_token_logprobs(choice)
    if operation == "abstain_prob":
        if marker is None:
            raise ValueError("abstain_prob results need the marker token text")
        return token_prob(top, marker)
    return yes_ratio(top, top_logprobs)


@dataclass(frozen=True)
class Result:
    """One usable result: its call, its value as cached, whether it is an upper bound, and the
    line it came from."""

    call: Call
    stored: Any
    bound: bool
    path: str
    line: int


@dataclass
class BatchResults:
    """An import's ``results`` (custom_id -> first usable line), ``errors`` (one per unusable
    line) and ``duplicates`` (usable lines repeating a custom_id with the same value)."""

    results: dict[str, Result] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    duplicates: int = 0


def _foreign_reply(call: Call, body: Mapping[str, Any], model: str | None) -> str | None:
    """Why ``body`` cannot be the reply to ``call``'s request as exported for ``model``, or
    None: it names another model or none (:func:`same_model`), or generated more tokens than
    the request allowed."""
    if model is not None and not same_model(body.get("model"), model):
        return (
            f"the reply is of model {snippet(json.dumps(body.get('model')))}, the request was"
            f" exported for {model!r}: the results of another batch? (replies under another"
            " name need the judge option reply_model=NAME)"
        )
    over = over_budget(body, call.args["max_new_tokens"]) if call.operation == "generate" else None
    return None if over is None else f"{over}: the results of another export?"


def _another_value(result: Result, other: Any, where: str, advice: str) -> UDCGInputError:
    """The error for ``result``, whose request ``where`` answers with the value ``other``."""
    return UDCGInputError(
        f"custom_id {result.call.custom_id}: another result than {where}"
        f" ({snippet(repr(result.stored))} vs {snippet(repr(other))}): a request answered twice"
        f" with different values; {advice}",
        path=result.path,
        line=result.line,
    )


def read_batch(
    paths: list[PathType],
    calls: Mapping[str, Call],
    marker: Callable[[], str],
    top_logprobs: int,
    model: str | None = None,
) -> BatchResults:
    """The results of the batch output files ``paths`` for ``calls`` (custom_id -> call);
    ``marker()`` is asked only for an ``abstain_prob`` result; a reply of another ``model``
    (None: not checked) is an error line. A custom_id with two different values, or a value
    not a probability, is a :class:`~udcg.errors.UDCGInputError`."""
    batch = BatchResults()
    for path in paths:
        for line in read_results(path):
            where = f"{line.path}:{line.line}: "
            if line.custom_id is not None:
                where += f"custom_id {line.custom_id}: "
            if line.error is not None:
                batch.errors.append(where + line.error)
                continue
            call = calls.get(line.custom_id or "")
            if call is None:
                batch.errors.append(where + "in no calls file (--calls)")
                continue
            foreign = _foreign_reply(call, line.body, model)
            if foreign is not None:
                batch.errors.append(where + foreign)
                continue
            token = marker() if call.operation == "abstain_prob" else None
            try:
                value, bound = reply_value(call.operation, line.body, token, top_logprobs)
            except ReplyError as exc:
                batch.errors.append(where + str(exc))
                continue
            stored = FORMS[call.operation][0](value, bound)
            if stored is None:
                raise UDCGInputError(
                    f"custom_id {call.custom_id}: {call.operation} value {value!r} is not a"
                    " probability in [0, 1]",
                    path=line.path,
                    line=line.line,
                )
            result = Result(call, stored, bound, line.path, line.line)
            first = batch.results.setdefault(call.custom_id, result)
            if first is not result:
                if first.stored != stored:
                    at = f"at {first.path}:{first.line}"
                    raise _another_value(result, first.stored, at, "keep one of the two lines")
                batch.duplicates += 1
    return batch


def refuse_cache_conflicts(
    results: Mapping[str, Result], held: Mapping[str, Any], cache: PathType
) -> None:
    """Refuse the first of ``results`` (custom_id -> result) whose key the judge cache
    ``cache`` holds (``held``: key -> value) with another value, so that importing results
    files one by one gives what importing them together does, in any order."""
    for key, result in results.items():
        if key in held and held[key] != result.stored:
            advice = (
                f"leave this line out, or drop the cached value with `udcg cache drop {cache}"
                f" {key}` to store this one"
            )
            raise _another_value(result, held[key], f"the cache {cache} holds", advice)
