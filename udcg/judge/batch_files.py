"""Batch files of the OpenAI-compatible judge: request lines in the OpenAI Batch API input format
(which vLLM's ``run-batch`` reads too), the calls file that says which judge call each request
is, and the reading of result lines.

* request line: ``{"custom_id": KEY, "method": "POST", "url": "/v1/chat/completions",
  "body": BODY}``; BODY is built by :mod:`udcg.judge.openai_requests`, as the online backend
  builds it, and KEY is the call's judge-cache key (:func:`udcg.judge.cache.cache_key`).
* call line (the calls file, written beside the requests): ``{"custom_id": KEY, "judge":
  FINGERPRINT, "operation": OP, "args": ARGS}`` with OP and ARGS one of ``abstain_prob``
  (``question``, ``passage``, ``mode``), ``yes_prob`` (``messages``) and ``generate``
  (``messages``, ``max_new_tokens``): the judge method and the arguments of one item.
* result line (OpenAI Batch output, ``vllm run-batch`` output): ``{"id", "custom_id",
  "response": {"status_code", "request_id", "body"}, "error"}``; a result is usable when
  ``error`` is null, ``status_code`` 200 and ``body`` a chat completion that
  :mod:`udcg.judge.openai_replies` reads as the online backend does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from udcg.errors import UDCGInputError
from udcg.io.files import STDIO, PathType, numbered_lines
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


@dataclass(frozen=True)
class Call:
    """One judge call of a batch: its cache key, the judge's fingerprint, the method and the
    arguments of one item (see :data:`OPERATIONS`)."""

    custom_id: str
    judge: str
    operation: str
    args: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "custom_id": self.custom_id,
            "judge": self.judge,
            "operation": self.operation,
            "args": dict(self.args),
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
    (:func:`part_path`), else all to ``requests``; ``paths`` lists the files written.
    """

    def __init__(self, requests: PathType, max_lines: int | None = None) -> None:
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
        self.paths: list[Path] = []
        self.count = 0
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
        except ValueError as exc:
            raise UDCGInputError(f"not valid JSON ({exc})", path=path, line=number) from None


def read_calls(path: PathType, fingerprint: str) -> Iterator[Call]:
    """The calls of a calls file, each checked; a call exported for another judge (another
    fingerprint: other ``--judge`` or ``--judge-option``) is an error."""
    for number, obj in _json_lines(path):
        where = {"path": path, "line": number}
        if not isinstance(obj, dict) or not isinstance(obj.get("custom_id"), str):
            raise UDCGInputError("expected a call object with a 'custom_id' string", **where)
        operation, args = obj.get("operation"), obj.get("args")
        if operation not in OPERATIONS:
            raise UDCGInputError(
                f"must be one of {', '.join(OPERATIONS)}, got {operation!r}",
                field="operation",
                **where,
            )
        if not isinstance(args, dict) or set(args) != set(OPERATIONS[operation]):
            raise UDCGInputError(
                f"must hold {', '.join(OPERATIONS[operation])}", field="args", **where
            )
        if obj.get("judge") != fingerprint:
            raise UDCGInputError(
                f"exported for judge {obj.get('judge')!r}, not {fingerprint!r}: import with the"
                " same --judge and --judge-option as the export",
                field="judge",
                **where,
            )
        yield Call(obj["custom_id"], fingerprint, operation, args)


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
        except ValueError as exc:
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


__all__ = [
    "BATCH_URL",
    "OPENAI_MAX_LINES",
    "OPERATIONS",
    "Call",
    "ChatSettings",
    "ReplyError",
    "RequestWriter",
    "ResultLine",
    "calls_path",
    "part_path",
    "read_calls",
    "read_results",
    "reply_value",
    "request_body",
    "request_line",
]
