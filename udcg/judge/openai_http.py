"""HTTP client of the OpenAI-compatible judge, on the ``openai`` SDK's ``AsyncOpenAI``: up to
``max_concurrency`` requests in flight on an event loop in a helper thread, the SDK's retries
(connection errors, timeouts, HTTP 408/409/429/5xx) with our waits (exponential backoff with
jitter or ``Retry-After``, at most ``max_backoff``), ``timeout`` per read, ``connect_timeout``
to connect, ``deadline`` per request with all its attempts; each retry one
:class:`~udcg.errors.UDCGWarning` per attempt number and call (docs/integrity.md). The API key,
from ``api_key_env`` (``EMPTY`` when unset), is never stored and is masked in every error and
warning that quotes a server (:func:`masked`).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import math
import os
import queue
import random
import re
import ssl
import sys
import threading
import time
import urllib.parse
import warnings
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import httpx
import openai

from udcg.errors import UDCGInputError, UDCGServiceError, UDCGWarning
from udcg.io.contexts.checks import LONE_SURROGATE, lone_surrogate
from udcg.judge.requests import RefusedRequest

T = TypeVar("T")
R = TypeVar("R")

_ERRNO = re.compile(r"^\[Errno -?\d+\]")
_SNIPPET = 300
#: What servers say of a prompt over the model's context (vLLM, SGLang, llama.cpp, OpenAI, TGI).
_OVER_CONTEXT = re.compile(
    r"context|too long|longer than|exceed|less than \d+ tokens|must be <= \d+", re.IGNORECASE
)
_POLL = 0.5  # seconds the calling thread waits for an event before checking again
_BATCH = 0.01  # seconds it lets events gather before handling them together
_STATS_LOCK = threading.Lock()  # of every client's ``stats`` (a lock attribute would not pickle)
#: Names of the environment variables whose API keys :func:`masked` hides (never the keys).
_KEY_VARIABLES: set[str] = set()
#: The SDK client lent to the current task (one request at a time).
_CLIENT: contextvars.ContextVar[_SDKClient] = contextvars.ContextVar("udcg_judge_client")


class JudgeServerError(UDCGServiceError):
    """A server unreachable, refusing a request (HTTP ``status``, the start of its ``reply``)
    or sending a reply that cannot be used."""

    def __init__(self, message: str, status: int | None = None, reply: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reply = reply


def masked(text: str) -> str:
    """``text`` with every API key a client has sent (the value of its ``api_key_env``, when
    4 characters or more) replaced by ``***``, also as JSON or Python quote it (``\\/`` for
    ``/``, escaped quotes and backslashes)."""
    for name in tuple(_KEY_VARIABLES):
        key = os.environ.get(name)
        if key and len(key) >= 4:
            quoted = json.dumps(key)[1:-1]
            forms = {key, quoted, quoted.replace("/", "\\/"), repr(key)[1:-1]}
            for form in sorted(forms, key=len, reverse=True):
                text = text.replace(form, "***")
    return text


def snippet(text: str) -> str:
    """``text`` on one line, API keys masked, then cut to its first 300 characters: how a
    server's text appears in every message and warning."""
    text = masked(" ".join(text.split()))
    return text if len(text) <= _SNIPPET else text[:_SNIPPET] + "..."


def reply_json(response: httpx.Response) -> Any:
    """The JSON value of ``response``'s UTF-8 body; ValueError saying why there is none: not
    JSON (the start of the text), nested too deeply to decode, or a string holding a lone
    surrogate."""
    try:
        text = response.content.decode("utf-8")
        value = json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except ValueError:
        raise ValueError(snippet(response.text)) from None
    field = lone_surrogate(text, value)
    if field is not None:
        raise ValueError(f"field {field!r} {LONE_SURROGATE}" if field else LONE_SURROGATE)
    return value


def split_base_url(base_url: str) -> tuple[str, str]:
    """(API base, server root) of ``base_url``; ``/v1`` added without a path."""
    example = "an http(s) URL such as http://127.0.0.1:8000/v1"
    try:
        parts = urllib.parse.urlsplit(base_url.strip())
        port = parts.port
    except ValueError as exc:  # a bad IPv6 literal, a port out of range or not a number
        raise UDCGInputError(
            f"must be {example}, got {base_url!r}: {exc}", field="base_url"
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UDCGInputError(f"must be {example}, got {base_url!r}", field="base_url")
    if parts.username or parts.password:
        raise UDCGInputError(
            "must not hold credentials; put the API key in the environment variable"
            " named by api_key_env",
            field="base_url",
        )
    if parts.query or parts.fragment:
        raise UDCGInputError("must not have a query string or fragment", field="base_url")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    origin = f"{parts.scheme}://{host}" + ("" if port is None else f":{port}")
    path = parts.path.rstrip("/")
    return origin + (path or "/v1"), origin + path.removesuffix("/v1")


def transport_reason(exc: BaseException) -> str:
    """The innermost OS error behind ``exc`` (``[Errno 111] Connection refused``), else its
    text."""
    cause: BaseException | None = exc
    seen: set[int] = set()
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        errno = getattr(cause, "errno", None)
        if isinstance(cause, OSError) and isinstance(errno, int):
            return f"[Errno {errno}] {os.strerror(errno)}"
        cause = cause.__cause__ or cause.__context__
    return str(exc) or type(exc).__name__


def failure(exc: BaseException, timeout: float) -> str:
    """Why an attempt failed (``exc`` an httpx exception): HTTP reply, timeout or connection."""
    response = getattr(exc, "response", None)
    if response is not None:
        return f"HTTP {response.status_code}: {snippet(response.text)}"
    if any(cls.__name__ == "TimeoutException" for cls in type(exc).__mro__):
        return f"timed out after {timeout:.3g} s"
    return f"connection failed ({type(exc).__name__}: {transport_reason(exc)})"


def seconds(value: Any, field: str, zero: bool = False) -> float:
    """``value`` as a finite number of seconds > 0 (>= 0 with ``zero``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UDCGInputError(f"must be a number of seconds, got {value!r}", field=field)
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        bound = ">= 0" if zero else "> 0"
        raise UDCGInputError(
            f"must be a finite number {bound} of seconds, got {value}", field=field
        )
    return float(value)


@functools.lru_cache(maxsize=1)
def _tls() -> ssl.SSLContext:
    """One TLS context per process (loading the CA bundle takes ~50 ms)."""
    return httpx.create_ssl_context()


class _SDKClient(openai.AsyncOpenAI):
    """``AsyncOpenAI`` lent to one request at a time: it counts the attempts of the request to
    ``url`` due by ``end`` (monotonic), keeps why the ``last`` failed, and waits before each
    retry as ``owner`` says, announced to ``notice``, within the deadline."""

    def __init__(
        self, owner: JudgeHTTPClient, notice: Callable[[int, str], None], **options: Any
    ) -> None:
        super().__init__(**options)
        self.owner, self.notice = owner, notice
        self.start("", math.inf)

    def start(self, url: str, end: float) -> None:
        self.url, self.end, self.count, self.last = url, end, 0, "timed out"

    def give_up(self, deadline: bool = False) -> JudgeServerError:
        """The request's error: no reply by its deadline, or none after its last attempt."""
        why = (
            f"no usable reply within the deadline of {self.owner.deadline:g} s"
            f" ({self.count} attempt(s))"
            if deadline
            else f"server unreachable or failing after {self.count} attempt(s)"
        )
        return self.owner.error(f"{self.url}: {why}: {self.last}")

    async def _prepare_request(self, request: Any) -> None:
        self.owner.count("requests")
        self.count += 1

    def _calculate_retry_timeout(
        self, remaining_retries: int, options: Any, response_headers: Any = None
    ) -> float:
        # called by the SDK before each retry's wait, in the ``except`` clause of the failure
        self.last = failure(sys.exc_info()[1], self.owner.timeout)
        total = options.get_max_retries(self.max_retries) + 1
        wait = self.owner.wait(
            total - 1 - remaining_retries, self._parse_retry_after_header(response_headers)
        )
        if time.monotonic() + wait >= self.end:
            raise self.give_up(deadline=True)
        self.owner.count("retries")
        self.notice(
            self.count,
            f"{self.url}: attempt {self.count} of {total} failed ({self.last});"
            f" next attempt in {wait:.2g} s",
        )
        return wait


class JudgeHTTPClient:
    """JSON requests to one server with retries, up to ``max_concurrency`` in flight; ``stats``
    counts ``requests``, ``retries`` and callers' events. Every call opens and closes its own
    SDK clients, so the client pickles as plain settings."""

    def __init__(
        self,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        max_concurrency: int = 64,
        timeout: float = 60.0,
        max_retries: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        connect_timeout: float = 10.0,
        deadline: float = 300.0,
    ) -> None:
        for field, value, low in (
            ("max_concurrency", max_concurrency, 1),
            ("max_retries", max_retries, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise UDCGInputError(f"must be an integer >= {low}, got {value!r}", field=field)
        self.model = model
        self.api_key_env = api_key_env
        self.max_concurrency = int(max_concurrency)
        self.timeout = seconds(timeout, "timeout")
        self.max_retries = int(max_retries)
        self.backoff = seconds(backoff, "backoff", zero=True)
        self.max_backoff = seconds(max_backoff, "max_backoff", zero=True)
        self.connect_timeout = seconds(connect_timeout, "connect_timeout")
        self.deadline = seconds(deadline, "deadline")
        self.stats: Counter[str] = Counter()

    def count(self, what: str, n: int = 1) -> None:
        """Add ``n`` to ``stats[what]`` (thread-safe)."""
        with _STATS_LOCK:
            self.stats[what] += n

    def error(
        self,
        message: str,
        status: int | None = None,
        reply: str = "",
        kind: type[JudgeServerError] = JudgeServerError,
    ) -> JudgeServerError:
        """A ``kind`` error with ``message``, the API key masked in it (:func:`masked`)."""
        return kind(masked(message), status, masked(reply))

    def wait(self, retry: int, asked: float | None) -> float:
        """Seconds before retry ``retry + 1``: ``asked`` (``Retry-After``), else ``backoff *
        2**retry`` times a jitter in [0.5, 1.5]; at most ``max_backoff``."""
        if asked is None or not math.isfinite(asked):
            asked = self.backoff * 2**retry * random.uniform(0.5, 1.5)
        return min(self.max_backoff, max(0.0, asked))

    async def apost(self, url: str, body: Mapping[str, Any], retries: int | None = None) -> Any:
        """The JSON reply to ``body`` POSTed with the current task's SDK client, retried
        ``retries`` times (default ``max_retries``), all within ``deadline`` seconds."""
        client = _CLIENT.get()
        client.start(url, time.monotonic() + self.deadline)
        options: Any = {} if retries is None else {"max_retries": retries}
        try:
            send = client.post(url, body=dict(body), cast_to=httpx.Response, options=options)
            response = await asyncio.wait_for(send, self.deadline)
        except TimeoutError:
            raise client.give_up(deadline=True) from None
        except openai.APIStatusError as exc:
            status, text = exc.status_code, snippet(exc.response.text)
            if status not in (408, 409, 429) and status < 500:  # not retried by the SDK
                raise self.error(
                    f"{url}: HTTP {status}{self._hint(status)}: {text}", status, text
                ) from None
            client.last = f"HTTP {status}: {text}"
            raise client.give_up() from None
        except openai.APIConnectionError as exc:  # timeouts included
            client.last = failure(exc.__cause__ or exc, self.timeout)
            raise client.give_up() from None
        try:
            return reply_json(response)
        except ValueError as exc:
            raise self.error(
                f"{url}: malformed JSON reply (HTTP {response.status_code}): {exc}"
            ) from None

    def post(self, url: str, body: Mapping[str, Any], retries: int | None = None) -> Any:
        """:meth:`apost` of one request, from synchronous code."""
        return self.map(lambda _, __: self.apost(url, body, retries), [url])[0]

    def get(self, url: str, timeout: float) -> httpx.Response:
        """The reply to one GET of ``url`` within ``timeout`` seconds, never retried."""

        async def get(_: int, __: str) -> httpx.Response:
            options: Any = {"max_retries": 0, "timeout": timeout}
            try:
                send = _CLIENT.get().get(url, cast_to=httpx.Response, options=options)
                return await asyncio.wait_for(send, timeout)
            except openai.APIStatusError as exc:
                return exc.response
            except (TimeoutError, openai.APITimeoutError):
                raise self.error(f"no reply within {timeout:g} s") from None
            except openai.APIConnectionError as exc:
                reason = _ERRNO.sub("", transport_reason(exc.__cause__ or exc)).strip()
                raise self.error(reason[:1].lower() + reason[1:]) from None

        return self.map(get, [url])[0]

    def _hint(self, status: int) -> str:
        if status in (401, 403):
            return f" (check the API key in the environment variable {self.api_key_env})"
        if status == 404:
            return f" (check base_url and that the server serves model {self.model!r})"
        return ""

    def map(
        self,
        function: Callable[[int, T], Awaitable[R]],
        items: Sequence[T],
        on_result: Callable[[int, R], None] | None = None,
        owner: Callable[[int], int] | None = None,
    ) -> list[R]:
        """``await function(i, item)`` for every item, in input order, up to ``max_concurrency``
        in flight (as one ends, the next starts), on an event loop in a helper thread;
        ``on_result(i, result)`` in the calling thread as each is done, in order, and retry
        notices as warnings there (once per attempt number). The first failure cancels the
        rest and is raised; with ``owner`` (item i -> the position of the request that holds
        it), a server's refusal of a prompt over its context (HTTP 400, 413 or 422 saying so) as
        :class:`~udcg.judge.requests.RefusedRequest` of that request."""
        if not items:
            return []
        results: list[Any] = [None] * len(items)
        events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        loop = asyncio.new_event_loop()
        task: asyncio.Task[None] | None = None
        noticed: set[int] = set()

        def notice(attempt: int, message: str) -> None:
            if attempt not in noticed:
                noticed.add(attempt)
                events.put(("notice", message))

        async def window() -> None:
            gate = asyncio.Semaphore(self.max_concurrency)
            idle: list[_SDKClient] = []  # at most max_concurrency, each lent to one request

            async def one(i: int, item: T) -> None:
                async with gate:
                    client = idle.pop() if idle else self._client(notice)
                    _CLIENT.set(client)  # in this task's own context
                    try:
                        results[i] = await function(i, item)
                    except JudgeServerError as exc:
                        refused = exc.status in (400, 413, 422) and owner is not None
                        if refused and _OVER_CONTEXT.search(exc.reply):
                            raise RefusedRequest(str(exc), item=owner(i)) from None
                        raise
                    finally:
                        idle.append(client)
                events.put(("done", i))

            tasks = [asyncio.ensure_future(one(i, item)) for i, item in enumerate(items)]
            try:
                await asyncio.gather(*tasks)
            finally:
                for each in tasks:
                    each.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await asyncio.gather(*(client.close() for client in idle))

        def main() -> None:
            nonlocal task
            try:
                task = loop.create_task(window())
                loop.run_until_complete(task)
                events.put(("end", None))
            except BaseException as exc:  # handed to the calling thread
                events.put(("error", exc))
            finally:
                loop.close()

        thread = threading.Thread(target=main, name="udcg-judge-loop", daemon=True)
        thread.start()
        try:
            while True:
                try:
                    batch = [events.get(timeout=_POLL)]
                except queue.Empty:
                    continue
                while not events.empty():
                    batch.append(events.get())
                for kind, payload in batch:
                    if kind == "done":
                        if on_result is not None:
                            on_result(payload, results[payload])
                    elif kind == "notice":
                        warnings.warn(payload, UDCGWarning, stacklevel=1)
                    elif kind == "error":
                        raise payload
                    else:
                        return results
                # at most every _BATCH s: the loop thread then rarely waits for the GIL
                time.sleep(_BATCH)
        except BaseException:
            if not loop.is_closed():
                try:
                    loop.call_soon_threadsafe(lambda: task is not None and task.cancel())
                except RuntimeError:  # the loop closed meanwhile
                    pass
            raise
        finally:
            thread.join()

    def _client(self, notice: Callable[[int, str], None]) -> _SDKClient:
        """A new SDK client with one connection, for one request at a time (httpcore scans a
        shared pool at every request: quadratic time)."""
        one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        _KEY_VARIABLES.add(self.api_key_env)  # the name: replies may quote the key it holds
        return _SDKClient(
            self,
            notice,
            api_key=os.environ.get(self.api_key_env) or "EMPTY",  # the SDK needs one
            max_retries=self.max_retries,
            timeout=httpx.Timeout(self.timeout, connect=min(self.connect_timeout, self.timeout)),
            http_client=openai.DefaultAsyncHttpxClient(limits=one, verify=_tls()),
        )
