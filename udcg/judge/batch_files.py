"""Batch files of the OpenAI-compatible judge: request lines in the OpenAI Batch API input format
(which vLLM's ``run-batch`` reads too), the calls file that says which judge call each request
is, and the reading of result lines.

* request line: ``{"custom_id": KEY, "method": "POST", "url": "/v1/chat/completions",
  "body": BODY}``; BODY is built by :mod:`udcg.judge.openai_requests`, as the online backend
  builds it, and KEY is the call's judge-cache key (:func:`udcg.judge.cache.cache_key`).
* call line (the calls file, written beside the requests): ``{"custom_id": KEY, "judge":
  FINGERPRINT, "operation": OP, "args": ARGS, "settings": SETTINGS}`` with OP and ARGS one of
  ``abstain_prob`` (``question``, ``passage``, ``mode``), ``yes_prob`` (``messages``) and
  ``generate`` (``messages``, ``max_new_tokens``): the judge method and the arguments of one
  item; SETTINGS what the judge resolved at run time for OP
  (:meth:`~udcg.judge.base.Judge.key_settings`: the abstention token the server's tokenizer
  gave, when ``abstain_token`` is not set). KEY is recomputed from FINGERPRINT, OP, ARGS and
  SETTINGS when the file is read: a line whose KEY differs (an edited line) is refused, so a
  result is never stored under another item's key.
* result line (OpenAI Batch output, ``vllm run-batch`` output): ``{"id", "custom_id",
  "response": {"status_code", "request_id", "body"}, "error"}``; a result is usable when
  ``error`` is null, ``status_code`` 200 and ``body`` a chat completion that
  :mod:`udcg.judge.openai_replies` reads as the online backend does.

:func:`read_batch` reads every result line of an import before anything is stored: a
custom_id answered twice with different values is refused, twice with the same value counted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from udcg.errors import UDCGInputError
from udcg.io.files import STDIO, PathType, numbered_lines, refuse_same_file
from udcg.judge.cached import encode_value
from udcg.judge.openai_http import snippet
from udcg.judge.openai_replies import (
    ReplyError,
    first_choice,
    first_token_logprobs,
    message_text,
    token_prob,
    yes_ratio,
)
from udcg.judge.openai_requests import CHAT_PATH, first_token_body, generate_body
from udcg.judge.prompts import abstain_messages
from udcg.judge.requests import Request, item_key

#: The ``url`` of every request line: the chat endpoint under the API root ``/v1``.
BATCH_URL = "/v1" + CHAT_PATH
#: Judge methods whose calls a batch file can hold, and the argument names of one item.
OPERATIONS: dict[str, tuple[str, ...]] = {
    "abstain_prob": ("question", "passage", "mode"),
    "yes_prob": ("messages",),
    "generate": ("messages", "max_new_tokens"),
}
#: The most lines the OpenAI Batch API takes in one input file.
OPENAI_MAX_LINES = 50_000
#: The modes of an ``abstain_prob`` call.
ABSTAIN_MODES = ("first_token", "sequence")


@dataclass(frozen=True)
class Call:
    """One judge call of a batch: its cache key, the judge's fingerprint, the method, the
    arguments of one item (see :data:`OPERATIONS`) and the judge's run-time settings of the
    method (part of the key)."""

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
        return {
            "custom_id": self.custom_id,
            "judge": self.judge,
            "operation": self.operation,
            "args": dict(self.args),
            "settings": dict(self.settings),
        }


@dataclass(frozen=True)
class ChatSettings:
    """What a request body holds besides the prompt: the served model, the judge's
    ``extra_body`` and its ``top_logprobs`` (the options of an ``OpenAIJudge``)."""

    model: str
    extra_body: Mapping[str, Any]
    top_logprobs: int


def request_body(call: Call, chat: ChatSettings) -> dict[str, Any]:
    """The body of ``call``'s chat completion, the one the online backend posts."""
    args = call.args
    if call.operation == "abstain_prob":
        messages = abstain_messages(args["question"], args["passage"])
        return first_token_body(chat.model, messages, chat.extra_body, chat.top_logprobs)
    if call.operation == "yes_prob":
        return first_token_body(chat.model, args["messages"], chat.extra_body, chat.top_logprobs)
    return generate_body(chat.model, args["messages"], chat.extra_body, args["max_new_tokens"])


def request_line(custom_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """One line of an OpenAI Batch API input file."""
    return {"custom_id": custom_id, "method": "POST", "url": BATCH_URL, "body": dict(body)}


def calls_path(requests: PathType) -> Path:
    """The calls file of a requests file: ``requests.jsonl`` -> ``requests.calls.jsonl``."""
    path = Path(requests)
    stem = path.name.removesuffix(".gz").removesuffix(".jsonl")
    return path.with_name(f"{stem}.calls.jsonl")


def part_path(requests: PathType, part: int) -> Path:
    """Part ``part`` (from 1) of a split requests file: ``requests.jsonl`` ->
    ``requests-001.jsonl``."""
    path = Path(requests)
    stem = path.name.removesuffix(".jsonl")
    return path.with_name(f"{stem}-{part:03d}.jsonl")


def _json_line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n"


class RequestWriter:
    """Writes request lines as they come, with their calls file beside them.

    With ``max_lines`` the requests go to parts of at most that many lines
    (:func:`part_path`), else all to ``requests``; ``paths`` lists the files written. A file
    to write that names one of ``inputs`` (name -> path) is refused before it is opened.
    """

    def __init__(
        self,
        requests: PathType,
        max_lines: int | None = None,
        inputs: Mapping[str, PathType | None] | None = None,
    ) -> None:
        if max_lines is not None and max_lines < 1:
            raise UDCGInputError(f"must be >= 1, got {max_lines}", field="max_lines")
        if str(requests) == STDIO:
            raise UDCGInputError(
                "requests go to a file (the calls file is written beside it), not to stdout",
                path=requests,
            )
        self.requests = Path(requests)
        self.max_lines = max_lines
        self.calls = calls_path(self.requests)
        if self.calls == self.requests:
            raise UDCGInputError("must not end in .calls.jsonl", path=requests)
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
        path = (
            self.requests
            if self.max_lines is None
            else part_path(self.requests, 1 + len(self.paths))
        )
        refuse_same_file(path, self.inputs)
        self.paths.append(path)
        self._part = open(path, "w", encoding="utf-8")
        return self._part

    def write(self, call: Call, body: Mapping[str, Any]) -> None:
        """One request line and its call line."""
        full = self.max_lines is not None and self.count % self.max_lines == 0
        part = self._next_part() if self._part is None or full else self._part
        part.write(_json_line(request_line(call.custom_id, body)))
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


def _json_lines(path: PathType) -> Iterator[tuple[int, Any]]:
    """``(line number, JSON value)`` of every non-blank line; invalid JSON is an error."""
    for number, text in numbered_lines(path):
        if not text.strip():
            continue
        try:
            yield number, json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise UDCGInputError(f"not valid JSON ({exc})", path=path, line=number) from None


def _messages(value: Any) -> bool:
    """True for chat messages: a non-empty list of ``{"role": str, "content": str}``."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(m, dict)
            and set(m) == {"role", "content"}
            and all(isinstance(v, str) for v in m.values())
            for m in value
        )
    )


def _args_problem(operation: str, args: Mapping[str, Any]) -> str | None:
    """What is wrong with the arguments of one call of ``operation``, or None."""
    if operation == "abstain_prob":
        if not all(isinstance(args[name], str) for name in ("question", "passage")):
            return "question and passage must be strings"
        if args["mode"] not in ABSTAIN_MODES:
            return f"mode must be one of {', '.join(ABSTAIN_MODES)}"
        return None
    if not _messages(args["messages"]):
        return "messages must be a list of {'role': str, 'content': str}"
    if operation == "generate":
        limit = args["max_new_tokens"]
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            return "max_new_tokens must be an integer >= 1"
    return None


def read_calls(
    path: PathType, fingerprint: str, settings: Callable[[str], Mapping[str, Any]]
) -> Iterator[Call]:
    """The calls of a calls file, each checked; a call exported for another judge (another
    fingerprint: other ``--judge`` or ``--judge-option``, or other run-time settings than
    ``settings(operation)``) is an error, and so is a call whose custom_id is not the cache key
    of its judge, operation, arguments and settings."""
    for number, obj in _json_lines(path):
        where = {"path": path, "line": number}
        if not isinstance(obj, dict) or not isinstance(obj.get("custom_id"), str):
            raise UDCGInputError("expected a call object with a 'custom_id' string", **where)
        operation, args = obj.get("operation"), obj.get("args")
        if not isinstance(operation, str) or operation not in OPERATIONS:
            raise UDCGInputError(
                f"must be one of {', '.join(OPERATIONS)}, got {snippet(repr(operation))}",
                field="operation",
                **where,
            )
        if not isinstance(args, dict) or set(args) != set(OPERATIONS[operation]):
            raise UDCGInputError(
                f"must hold {', '.join(OPERATIONS[operation])}", field="args", **where
            )
        problem = _args_problem(operation, args)
        if problem is not None:
            raise UDCGInputError(problem, field="args", **where)
        if obj.get("judge") != fingerprint:
            raise UDCGInputError(
                f"exported for judge {snippet(repr(obj.get('judge')))}, not {fingerprint!r}:"
                " import with the same --judge and --judge-option as the export",
                field="judge",
                **where,
            )
        expected = dict(settings(operation))
        if obj.get("settings", {}) != expected:
            raise UDCGInputError(
                f"exported with the run-time settings {snippet(repr(obj.get('settings')))} of"
                f" {operation}, this judge has {expected!r} (its server's tokenizer gives"
                " another abstention token?): import with the judge the export used",
                field="settings",
                **where,
            )
        key = item_key(fingerprint, operation, args, expected)
        if obj["custom_id"] != key:
            raise UDCGInputError(
                f"{snippet(repr(obj['custom_id']))} is not the cache key of this call's judge,"
                f" operation and args ({key}): the line was edited; export the requests again",
                field="custom_id",
                **where,
            )
        yield Call(key, fingerprint, operation, args, expected)


@dataclass(frozen=True)
class ResultLine:
    """One line of a batch output file: where it is, its ``custom_id`` (None when the line has
    none), and either the reply ``body`` or the ``error`` that makes it unusable."""

    path: str
    line: int
    custom_id: str | None
    body: Any = None
    error: str | None = None


def result_of(obj: Any) -> tuple[str | None, Any, str | None]:
    """``(custom_id, body, error)`` of one parsed result line: ``error`` says why the line
    holds no usable reply (a batch error, a status other than 200, no body)."""
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
    if status != 200:
        return custom_id, None, f"HTTP status {status}: {snippet(json.dumps(body))}"
    if not isinstance(body, dict):
        return custom_id, None, "status 200 without a 'body' object"
    return custom_id, body, None


def read_results(path: PathType) -> Iterator[ResultLine]:
    """Every non-blank line of a batch output file as a :class:`ResultLine`; a line that is not
    JSON is a result with an error, not an exception (the other lines stay usable)."""
    for number, text in numbered_lines(path):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as exc:
            yield ResultLine(str(path), number, None, error=f"not valid JSON ({exc})")
            continue
        custom_id, body, error = result_of(obj)
        yield ResultLine(str(path), number, custom_id, body, error)


def reply_value(
    operation: str, body: Any, marker: str | None, top_logprobs: int
) -> tuple[Any, bool]:
    """``(value, whether it is an upper bound)`` of a chat completion ``body`` for a call of
    ``operation``, read as the online backend reads it: ``abstain_prob`` the probability of the
    first token of NO-RESPONSE (text ``marker``) among the top log-probs, ``yes_prob``
    P(Yes) / (P(Yes) + P(No)), ``generate`` the message text. Raises :class:`ReplyError`."""
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
    """One usable result of an import: its call, its value as the judge cache stores it
    (:func:`~udcg.judge.cached.encode_value` for probabilities, the text for ``generate``),
    whether that value is an upper bound, and the line it came from."""

    call: Call
    stored: Any
    bound: bool
    path: str
    line: int


@dataclass
class BatchResults:
    """Every result line of an import, read and checked: ``results`` (custom_id -> the first
    usable line of that id), ``errors`` (one message per unusable line: a batch error, another
    status than 200, a reply the online backend could not read either, a custom_id in no calls
    file) and ``duplicates`` (usable lines repeating a custom_id with the same value)."""

    results: dict[str, Result] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    duplicates: int = 0


def read_batch(
    paths: list[PathType],
    calls: Mapping[str, Call],
    marker: Callable[[], str],
    top_logprobs: int,
) -> BatchResults:
    """The results of the batch output files ``paths`` for ``calls`` (custom_id -> call), each
    value read as the online backend reads a reply (``marker()``: the text of the first token
    of NO-RESPONSE, asked for only when an ``abstain_prob`` result is read).

    Raises :class:`~udcg.errors.UDCGInputError` when a custom_id has two usable lines with
    different values (naming both) or a value is not a probability; nothing is stored here."""
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
            token = marker() if call.operation == "abstain_prob" else None
            try:
                value, bound = reply_value(call.operation, line.body, token, top_logprobs)
            except ReplyError as exc:
                batch.errors.append(where + str(exc))
                continue
            stored = value if call.operation == "generate" else encode_value(value, bound)
            if stored is None:
                raise UDCGInputError(
                    f"custom_id {call.custom_id}: {call.operation} value {value!r} is not a"
                    " probability in [0, 1]",
                    path=line.path,
                    line=line.line,
                )
            _add_result(batch, Result(call, stored, bound, line.path, line.line))
    return batch


def _add_result(batch: BatchResults, result: Result) -> None:
    """Keep ``result``, count it as a duplicate, or refuse it as a conflict."""
    first = batch.results.get(result.call.custom_id)
    if first is None:
        batch.results[result.call.custom_id] = result
    elif first.stored == result.stored:
        batch.duplicates += 1
    else:
        raise UDCGInputError(
            f"custom_id {result.call.custom_id}: another result than at {first.path}:"
            f"{first.line} ({snippet(repr(result.stored))} vs {snippet(repr(first.stored))}):"
            " a request answered twice with different values; keep one of the two lines",
            path=result.path,
            line=result.line,
        )


__all__ = [
    "ABSTAIN_MODES",
    "BATCH_URL",
    "OPENAI_MAX_LINES",
    "OPERATIONS",
    "BatchResults",
    "Call",
    "ChatSettings",
    "ReplyError",
    "RequestWriter",
    "Result",
    "ResultLine",
    "calls_path",
    "part_path",
    "read_batch",
    "read_calls",
    "read_results",
    "reply_value",
    "request_body",
    "request_line",
]
