"""HTTP client of the OpenAI-compatible judge: pooled connections, retries, key handling.

Requests go out concurrently (at most ``max_concurrency`` at once, from a thread pool over one
pooled ``httpx`` client). Connection errors, timeouts and HTTP 408/409/425/429/5xx replies are
retried up to ``max_retries`` times with exponential backoff and jitter (a numeric
``Retry-After`` header is honoured, capped at ``max_backoff``); other HTTP errors and malformed
JSON are not retried. Every failure raises :class:`JudgeServerError`, naming the URL and the
reason.

The API key is read from the environment variable ``api_key_env`` when the connection pool is
built, sent as a bearer token, and never stored, logged or put in error messages (any echo of it
in a server reply is masked).
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any, TypeVar

import httpx

from udcg.errors import UDCGInputError, UDCGServiceError

T = TypeVar("T")
R = TypeVar("R")

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
_ERRNO = re.compile(r"^\[Errno -?\d+\]")
_SNIPPET = 300


class JudgeServerError(UDCGServiceError):
    """An OpenAI-compatible server could not be reached, refused a request, or sent a reply
    that cannot be used."""


def snippet(text: str) -> str:
    """``text`` on one line, cut to its first 300 characters (for error messages)."""
    text = " ".join(text.split())
    return text if len(text) <= _SNIPPET else text[:_SNIPPET] + "..."


def split_base_url(base_url: str) -> tuple[str, str, str]:
    """(display URL, API base ending in /v1, server root) of ``base_url``; ``/v1`` is added
    when the URL has no path."""
    parts = urllib.parse.urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UDCGInputError(
            f"must be an http(s) URL such as http://127.0.0.1:8000/v1, got {base_url!r}",
            field="base_url",
        )
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
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        api, root = path, path[: -len("/v1")]
    elif path == "":
        api, root = "/v1", ""
    else:
        api, root = path, path
    origin = f"{parts.scheme}://{netloc}"
    return origin + api, origin + api, origin + root


class JudgeHTTPClient:
    """JSON POSTs to one server with retries, and a bounded thread pool to send many at once.

    ``model`` (the served model's name) and ``api_key_env`` only word the hints of HTTP 404 and
    401/403 errors. ``stats`` counts HTTP attempts (``requests``) and ``retries``; callers may
    count their own events there with :meth:`count`. The connection pool is built on first use
    and is not pickled.
    """

    def __init__(
        self,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        max_concurrency: int = 8,
        timeout: float = 60.0,
        max_retries: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
    ) -> None:
        for field, value, low in (
            ("max_concurrency", max_concurrency, 1),
            ("max_retries", max_retries, 0),
            ("backoff", backoff, 0),
            ("max_backoff", max_backoff, 0),
        ):
            if value < low:
                raise UDCGInputError(f"must be >= {low}, got {value}", field=field)
        if timeout <= 0:
            raise UDCGInputError(f"must be > 0 seconds, got {timeout}", field="timeout")
        self.model = model
        self.api_key_env = api_key_env
        self.max_concurrency = int(max_concurrency)
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.stats: Counter[str] = Counter()
        self._stats_lock = threading.Lock()
        self._client_lock = threading.Lock()
        self._client: httpx.Client | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for transient in ("_client", "_stats_lock", "_client_lock"):
            state.pop(transient)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._stats_lock = threading.Lock()
        self._client_lock = threading.Lock()
        self._client = None

    def _pool(self) -> httpx.Client:
        with self._client_lock:
            if self._client is None:
                headers = {"Accept": "application/json"}
                key = os.environ.get(self.api_key_env)
                if key:
                    headers["Authorization"] = f"Bearer {key}"
                self._client = httpx.Client(
                    timeout=httpx.Timeout(self.timeout),
                    limits=httpx.Limits(
                        max_connections=self.max_concurrency,
                        max_keepalive_connections=self.max_concurrency,
                    ),
                    headers=headers,
                )
            return self._client

    def close(self) -> None:
        """Close the connection pool (a later request opens a new one)."""
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def count(self, what: str, n: int = 1) -> None:
        """Add ``n`` to ``stats[what]`` (thread-safe)."""
        with self._stats_lock:
            self.stats[what] += n

    def error(self, message: str) -> JudgeServerError:
        """A :class:`JudgeServerError` with ``message``, the API key masked in it."""
        key = os.environ.get(self.api_key_env)
        if key and len(key) >= 4:
            message = message.replace(key, "***")
        return JudgeServerError(message)

    def post(self, url: str, body: Mapping[str, Any], retries: int | None = None) -> Any:
        """POST ``body`` as JSON and return the decoded JSON reply, retrying transient failures
        ``retries`` times (default ``max_retries``)."""
        retries = self.max_retries if retries is None else retries
        client = self._pool()
        last = "no attempt made"
        for attempt in range(retries + 1):
            retry_after: float | None = None
            self.count("requests")
            try:
                response = client.post(url, json=body)
            except httpx.TimeoutException:
                last = f"timed out after {self.timeout:g} s"
            except httpx.TransportError as exc:
                last = f"connection failed ({type(exc).__name__}: {exc})"
            else:
                status = response.status_code
                if status in RETRY_STATUS:
                    last = f"HTTP {status}: {snippet(response.text)}"
                    retry_after = _retry_after(response)
                elif status >= 400:
                    raise self.error(
                        f"{url}: HTTP {status}{self._hint(status)}: {snippet(response.text)}"
                    )
                else:
                    try:
                        return response.json()
                    except ValueError:
                        reply = snippet(response.text)
                        raise self.error(
                            f"{url}: malformed JSON reply (HTTP {status}): {reply}"
                        ) from None
            if attempt < retries:
                self.count("retries")
                if retry_after is not None:
                    delay = min(self.max_backoff, max(0.0, retry_after))
                else:
                    delay = min(self.max_backoff, self.backoff * 2**attempt)
                    delay *= random.uniform(0.5, 1.5)
                time.sleep(delay)
        raise self.error(
            f"{url}: server unreachable or failing after {retries + 1} attempt(s): {last}"
        )

    def status(self, url: str, timeout: float) -> int:
        """The HTTP status of one GET of ``url`` within ``timeout`` seconds, never retried; a
        :class:`JudgeServerError` saying why when no reply came (``connection refused``,
        ``no reply within 5 s``)."""
        self.count("requests")
        try:
            return self._pool().get(url, timeout=timeout).status_code
        except httpx.TimeoutException:
            raise self.error(f"no reply within {timeout:g} s") from None
        except httpx.TransportError as exc:
            reason = _ERRNO.sub("", str(exc)).strip() or type(exc).__name__
            raise self.error(reason[:1].lower() + reason[1:]) from None

    def _hint(self, status: int) -> str:
        if status in (401, 403):
            return f" (check the API key in the environment variable {self.api_key_env})"
        if status == 404:
            return f" (check base_url and that the server serves model {self.model!r})"
        return ""

    def map(self, function: Callable[[int, T], R], items: Sequence[T]) -> list[R]:
        """``function(i, item)`` for every item, at most ``max_concurrency`` at a time, in order.

        The first failure (in input order among those that failed) is raised once the requests
        in flight have ended; requests not yet started are cancelled.
        """
        if not items:
            return []
        workers = min(self.max_concurrency, len(items))
        if workers == 1:
            return [function(i, item) for i, item in enumerate(items)]
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="udcg-openai")
        try:
            futures = [pool.submit(function, i, item) for i, item in enumerate(items)]
            wait(futures, return_when=FIRST_EXCEPTION)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        for future in futures:
            if not future.cancelled() and future.exception() is not None:
                raise future.exception()  # type: ignore[misc]
        return [future.result() for future in futures]


def _retry_after(response: httpx.Response) -> float | None:
    """The numeric ``Retry-After`` header of ``response`` in seconds, if it has one."""
    header = response.headers.get("retry-after")
    try:
        return float(header) if header is not None else None
    except ValueError:
        return None
