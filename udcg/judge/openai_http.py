"""HTTP client of the OpenAI-compatible judge: requests kept in flight, retries, key handling.

:meth:`JudgeHTTPClient.map` keeps up to ``max_concurrency`` requests in flight over the whole
item list (a sliding window: as one ends the next starts, with no barrier between groups of
items), on an asyncio event loop: one worker per request in flight, each with its own
``httpx.AsyncClient`` holding one kept-alive connection (one pool shared by all would cost time
quadratic in the connections: httpcore scans its whole pool at every request). The loop runs in
a helper thread for the duration of the call, so the synchronous methods also work from a thread
that already runs an event loop (Jupyter); results reach the caller's ``on_result`` in the
calling thread, as they finish.

Each attempt of a request is limited to ``timeout`` seconds in all, and its connection to
``connect_timeout`` seconds (a server that does not accept connections fails sooner than one
that accepts and then computes). Connection errors, timeouts and HTTP 408/409/425/429/5xx
replies are retried up to ``max_retries`` times with exponential backoff (``backoff *
2**attempt``, times a random jitter in [0.5, 1.5]) or, when the reply carries a ``Retry-After``
header (seconds or an HTTP date), after the time it asks for; every wait is capped at
``max_backoff``. One request never takes more than ``deadline`` seconds, its attempts and waits
together: an attempt is cut short, and no wait starts, past it. Other HTTP errors and malformed
JSON are not retried. Every failure raises :class:`JudgeServerError`, naming the URL and the
reason.

Waits are visible: a retry is announced by a :class:`~udcg.errors.UDCGWarning` issued in the
calling thread (``URL: attempt 1 of 6 failed (timed out after 60 s); next attempt in 0.7 s``;
the command-line tools print it as one line on stderr), once per attempt number and call, so
many requests failing together make one line per round, not one per request.

The API key is read from the environment variable ``api_key_env`` when a call opens its
connection pool, sent as a bearer token, and never stored, logged or put in error messages (any
echo of it in a server reply is masked).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import email.utils
import functools
import math
import os
import queue
import random
import re
import ssl
import threading
import time
import urllib.parse
import warnings
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

import httpx

from udcg.errors import UDCGInputError, UDCGServiceError, UDCGWarning

T = TypeVar("T")
R = TypeVar("R")

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
_ERRNO = re.compile(r"^\[Errno -?\d+\]")
_SNIPPET = 300
#: Seconds the calling thread waits for the next result before checking the loop thread again.
_POLL = 0.5
#: Seconds the calling thread lets results gather before handling them together.
_BATCH = 0.01

# The client of the worker running in the current asyncio context (set by ``connection``).
_POOL: contextvars.ContextVar[httpx.AsyncClient] = contextvars.ContextVar("udcg_judge_pool")
# Where a retry notice of the current call goes (set by ``JudgeHTTPClient.run``).
_NOTICE: contextvars.ContextVar[Callable[[int, str], None]] = contextvars.ContextVar(
    "udcg_judge_notice"
)


@functools.lru_cache(maxsize=1)
def _tls() -> ssl.SSLContext:
    """One TLS context per process for every connection (loading the CA bundle takes ~50 ms)."""
    return httpx.create_ssl_context()


class JudgeServerError(UDCGServiceError):
    """An OpenAI-compatible server could not be reached, refused a request, or sent a reply
    that cannot be used. ``status`` is the HTTP status of a refused request (else None) and
    ``reply`` the start of the server's reply to it (for callers that react to a refusal)."""

    def __init__(self, message: str, status: int | None = None, reply: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reply = reply


def snippet(text: str) -> str:
    """``text`` on one line, cut to its first 300 characters (for error messages)."""
    text = " ".join(text.split())
    return text if len(text) <= _SNIPPET else text[:_SNIPPET] + "..."


def split_base_url(base_url: str) -> tuple[str, str, str]:
    """(display URL, API base ending in /v1, server root) of ``base_url``; ``/v1`` is added
    when the URL has no path."""
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
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        api, root = path, path[: -len("/v1")]
    elif path == "":
        api, root = "/v1", ""
    else:
        api, root = path, path
    origin = f"{parts.scheme}://{netloc}"
    return origin + api, origin + api, origin + root


def retry_after(header: str | None, now: float | None = None) -> float | None:
    """Seconds to wait per a ``Retry-After`` header: a number of seconds, or an HTTP date
    (``now``, default the current time, is the reference); None when absent or unreadable."""
    if header is None:
        return None
    try:
        return max(0.0, float(header))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # HTTP dates are GMT
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def transport_reason(exc: BaseException) -> str:
    """Why a connection failed, from the innermost OS error behind ``exc`` when there is one
    (``[Errno 111] Connection refused``), else ``exc``'s own text."""
    cause: BaseException | None = exc
    seen: set[int] = set()
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        errno = getattr(cause, "errno", None)
        if isinstance(cause, OSError) and isinstance(errno, int):
            return f"[Errno {errno}] {os.strerror(errno)}"
        cause = cause.__cause__ or cause.__context__
    return str(exc) or type(exc).__name__


def seconds(value: Any, field: str, zero: bool = False) -> float:
    """``value`` as a finite number of seconds, > 0 (>= 0 with ``zero``); else an error naming
    ``field``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UDCGInputError(f"must be a number of seconds, got {value!r}", field=field)
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        bound = ">= 0" if zero else "> 0"
        raise UDCGInputError(
            f"must be a finite number {bound} of seconds, got {value}", field=field
        )
    return float(value)


class JudgeHTTPClient:
    """JSON requests to one server with retries, up to ``max_concurrency`` of them in flight.

    ``model`` (the served model's name) and ``api_key_env`` only word the hints of HTTP 404 and
    401/403 errors. ``timeout``, ``connect_timeout`` and ``deadline`` are described in the
    module docstring. ``stats`` counts HTTP attempts (``requests``) and ``retries``; callers may
    count their own events there with :meth:`count`. Each call of :meth:`map`, :meth:`post` or
    :meth:`status` opens its own connections and closes them at its end, so the client holds
    no connection, thread or loop between calls and pickles as plain settings.
    """

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
        self._stats_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_stats_lock")
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._stats_lock = threading.Lock()

    def close(self) -> None:
        """Nothing to release: every call closes its own connections."""

    def count(self, what: str, n: int = 1) -> None:
        """Add ``n`` to ``stats[what]`` (thread-safe)."""
        with self._stats_lock:
            self.stats[what] += n

    def error(self, message: str, status: int | None = None, reply: str = "") -> JudgeServerError:
        """A :class:`JudgeServerError` with ``message``, the API key masked in it."""
        key = os.environ.get(self.api_key_env)
        if key and len(key) >= 4:
            message, reply = message.replace(key, "***"), reply.replace(key, "***")
        return JudgeServerError(message, status, reply)

    # -- running coroutines from synchronous code ----------------------------------------------

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[None]:
        """A client with one kept-alive connection for the requests of the current asyncio
        context (:meth:`apost` uses it), closed at the end of the block."""
        headers = {"Accept": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        client = httpx.AsyncClient(
            timeout=httpx.Timeout(self.timeout, connect=min(self.connect_timeout, self.timeout)),
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            headers=headers,
            verify=_tls(),
        )
        async with client:
            token = _POOL.set(client)
            try:
                yield
            finally:
                _POOL.reset(token)

    def run(
        self,
        work: Callable[[Callable[[Any], None]], Coroutine[Any, Any, R]],
        on_event: Callable[[Any], None] | None = None,
    ) -> R:
        """Run ``work(emit)`` on an event loop in a helper thread and return its result; every
        ``emit(event)`` reaches ``on_event(event)`` in the calling thread, in order, before this
        returns. Retry notices of the work's requests are issued as :class:`UDCGWarning` in
        the calling thread, once per attempt number. An exception of the work, or of
        ``on_event``, is raised here; the loop is then cancelled."""
        events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        loop = asyncio.new_event_loop()
        task: asyncio.Task[R] | None = None
        noticed: set[int] = set()

        def notify(attempt: int, message: str) -> None:
            if attempt not in noticed:
                noticed.add(attempt)
                events.put(("notice", message))

        def main() -> None:
            nonlocal task
            context = contextvars.copy_context()
            context.run(_NOTICE.set, notify)
            try:
                task = loop.create_task(work(emit), context=context)
                events.put(("done", loop.run_until_complete(task)))
            except BaseException as exc:  # handed to the calling thread
                events.put(("error", exc))
            finally:
                loop.close()

        def emit(event: Any) -> None:
            events.put(("event", event))

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
                    if kind == "event":
                        if on_event is not None:
                            on_event(payload)
                    elif kind == "notice":
                        warnings.warn(payload, UDCGWarning, stacklevel=2)
                    elif kind == "error":
                        raise payload
                    else:
                        return payload
                # Wake up at most every _BATCH seconds: the loop thread then rarely waits for
                # the GIL on this thread's behalf.
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

    # -- requests -------------------------------------------------------------------------------

    async def apost(self, url: str, body: Mapping[str, Any], retries: int | None = None) -> Any:
        """POST ``body`` as JSON on the current :meth:`connection` and return the decoded JSON
        reply, retrying transient failures ``retries`` times (default ``max_retries``), all
        within ``deadline`` seconds; each retry is announced (see the module docstring)."""
        retries = self.max_retries if retries is None else retries
        pool = _POOL.get()
        last = "no attempt made"
        end = time.monotonic() + self.deadline
        attempts = retries + 1
        for attempt in range(1, attempts + 1):
            wait: float | None = None
            limit = min(self.timeout, end - time.monotonic())
            self.count("requests")
            try:
                response = await asyncio.wait_for(pool.post(url, json=body), limit)
            except (asyncio.TimeoutError, httpx.TimeoutException):
                last = f"timed out after {limit:.3g} s"
            except httpx.TransportError as exc:
                last = f"connection failed ({type(exc).__name__}: {transport_reason(exc)})"
            else:
                status = response.status_code
                if status in RETRY_STATUS:
                    last = f"HTTP {status}: {snippet(response.text)}"
                    wait = retry_after(response.headers.get("retry-after"))
                elif status >= 400:
                    text = snippet(response.text)
                    raise self.error(
                        f"{url}: HTTP {status}{self._hint(status)}: {text}", status, text
                    )
                else:
                    try:
                        return response.json()
                    except ValueError:
                        reply = snippet(response.text)
                        raise self.error(
                            f"{url}: malformed JSON reply (HTTP {status}): {reply}"
                        ) from None
            if attempt == attempts:
                break
            if wait is None:
                wait = self.backoff * 2 ** (attempt - 1) * random.uniform(0.5, 1.5)
            wait = min(self.max_backoff, wait)
            if time.monotonic() + wait >= end:
                raise self.error(
                    f"{url}: no usable reply within the deadline of {self.deadline:g} s "
                    f"({attempt} attempt(s)): {last}"
                )
            self.count("retries")
            notice = _NOTICE.get(None)
            if notice is not None:
                notice(
                    attempt,
                    f"{url}: attempt {attempt} of {attempts} failed ({last}); next attempt in "
                    f"{wait:.2g} s",
                )
            await asyncio.sleep(wait)
        raise self.error(
            f"{url}: server unreachable or failing after {attempts} attempt(s): {last}"
        )

    def post(self, url: str, body: Mapping[str, Any], retries: int | None = None) -> Any:
        """:meth:`apost` of one request, from synchronous code."""

        async def one(_: Callable[[Any], None]) -> Any:
            async with self.connection():
                return await self.apost(url, body, retries)

        return self.run(one)

    def status(self, url: str, timeout: float) -> int:
        """The HTTP status of one GET of ``url`` within ``timeout`` seconds, never retried; a
        :class:`JudgeServerError` saying why when no reply came (``connection refused``,
        ``no reply within 5 s``)."""
        return self.get(url, timeout).status_code

    def get(self, url: str, timeout: float) -> httpx.Response:
        """The reply (read whole) to one GET of ``url`` within ``timeout`` seconds, never
        retried; a :class:`JudgeServerError` saying why when no reply came."""

        async def get(_: Callable[[Any], None]) -> httpx.Response:
            self.count("requests")
            try:
                async with self.connection():
                    reply = await asyncio.wait_for(_POOL.get().get(url, timeout=timeout), timeout)
            except (asyncio.TimeoutError, httpx.TimeoutException):
                raise self.error(f"no reply within {timeout:g} s") from None
            except httpx.TransportError as exc:
                reason = _ERRNO.sub("", transport_reason(exc)).strip()
                raise self.error(reason[:1].lower() + reason[1:]) from None
            return reply

        return self.run(get)

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
    ) -> list[R]:
        """``await function(i, item)`` for every item, in input order, with up to
        ``max_concurrency`` of them in flight at any time: as one ends, the next starts.

        ``on_result(i, result)`` is called in the calling thread as soon as item ``i`` is done,
        once per item. The first failure cancels the requests in flight and those not started,
        and is raised.
        """
        if not items:
            return []
        workers = min(self.max_concurrency, len(items))
        results: list[Any] = [None] * len(items)

        async def window(emit: Callable[[Any], None]) -> None:
            upcoming = iter(enumerate(items))
            failures: list[BaseException] = []

            async def worker() -> None:
                try:
                    async with self.connection():
                        for i, item in upcoming:
                            results[i] = await function(i, item)
                            emit(i)
                except Exception as exc:
                    failures.append(exc)
                    raise

            tasks = [asyncio.ensure_future(worker()) for _ in range(workers)]
            try:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            if failures:
                raise failures[0]

        def deliver(i: int) -> None:
            if on_result is not None:
                on_result(i, results[i])

        self.run(window, deliver)
        return results
