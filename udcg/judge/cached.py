"""A judge that answers from the on-disk cache and asks the wrapped judge only for the misses.

Identical requests of one call are computed once; results come back in input order, exactly as
the wrapped judge returned them. A streaming wrapped judge gets all misses in one call, each
result committed in groups (every ``commit_interval`` s or ``commit_size`` results); otherwise
the misses go in chunks of ``chunk_size``, each committed when done. A killed run loses only
what finished last. Upper bounds are stored as ``{"value": v, "upper_bound": true}``.

Not cached: non-finite values and probabilities outside [0, 1], failed ``generate_json``
results, and ``generate_json`` requests whose validator has no stable name (no key: see
:func:`udcg.judge.requests.validator_id`; a validator is named, not hashed by code).
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from udcg.errors import UDCGInputError
from udcg.judge.base import Judge, OnResult
from udcg.judge.cache import (
    JudgeCache,
    cache_key,
    canonical_json,
    finite_json,
    json_entry,
    probability_entry,
    text_entry,
)
from udcg.judge.requests import MissingResults, Request, Result
from udcg.judge.structured import JSONResult


def encode_value(value: float, upper_bound: bool) -> float | dict[str, Any] | None:
    """The cached form of a probability: the number, ``{"value": v, "upper_bound": true}`` for
    an upper bound, or None (not cached) when not in [0, 1].

    Examples:
        >>> encode_value(0.25, False), encode_value(0.25, True), encode_value(float("nan"), False)
        (0.25, {'value': 0.25, 'upper_bound': True}, None)
    """
    number = float(value)
    if not 0.0 <= number <= 1.0:  # False for NaN too
        return None
    return {"value": number, "upper_bound": True} if upper_bound else number


def _encode_json(result: JSONResult, _: bool) -> dict[str, Any] | None:
    if not result.ok or not finite_json(result.value):
        return None
    stored = {"value": result.value, "attempts": result.attempts, "raw": list(result.raw)}
    try:
        canonical_json(stored)
    except (TypeError, ValueError):
        return None
    return stored


def _decode_json(stored: Any) -> tuple[JSONResult, bool]:
    value, attempts, raw = json_entry(stored)
    return JSONResult(value=value, attempts=attempts, raw=raw), False


#: operation -> (encode(result, bound) -> cached JSON or None, decode(cached) -> (result, bound))
_FORMS: dict[str, tuple[Callable[[Any, bool], Any], Callable[[Any], tuple[Any, bool]]]] = {
    "abstain_prob": (encode_value, probability_entry),
    "answer_prob": (encode_value, probability_entry),
    "yes_prob": (encode_value, probability_entry),
    "generate": (lambda text, _: str(text), lambda stored: (text_entry(stored), False)),
    "generate_json": (_encode_json, _decode_json),
}


class GroupCommit:
    """Buffers cache writes and commits them together: when ``size`` wait, every ``interval``
    seconds (a background thread), and at :meth:`close`.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     cache = JudgeCache(f"{folder}/judge.sqlite")
        ...     commits = GroupCommit(cache, interval=60)
        ...     commits.add("key", 0.5)
        ...     waiting = cache.get("key")
        ...     commits.close()
        ...     stored = cache.get("key")
        ...     cache.close()
        >>> waiting, stored
        (None, 0.5)
    """

    def __init__(self, cache: JudgeCache, interval: float = 0.2, size: int = 256) -> None:
        self.cache, self.size, self.interval = cache, size, interval
        self._pending: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="udcg-cache-commit", daemon=True)
        self._thread.start()

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            self.flush()

    def add(self, key: str, value: Any) -> None:
        with self._lock:
            self._pending[key] = value
            full = len(self._pending) >= self.size
        if full:
            self.flush()

    def flush(self) -> None:
        """Commit what waits, in one transaction."""
        with self._lock:
            pending, self._pending = self._pending, {}
        if pending:
            self.cache.put_many(pending)

    def close(self) -> None:
        """Stop the background commits and commit what waits."""
        self._stop.set()
        self._thread.join()
        self.flush()


class CachedJudge(Judge):
    """Wraps any :class:`Judge` (same ``name``, ``fingerprint``, results) behind ``cache`` (a
    :class:`JudgeCache`, its path, or None: the default). With ``probe`` the wrapped judge is
    probed before its first call. ``inner_calls`` counts calls to it, ``uncached`` computed
    results not stored. It streams iff the wrapped judge does.

    Examples:
        >>> import tempfile
        >>> import numpy as np
        >>> class Quarter(Judge):
        ...     name = fingerprint = "quarter"
        ...     def abstain_prob(self, questions, passages, mode="first_token"):
        ...         return np.full(len(questions), 0.25)
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     judge = CachedJudge(Quarter(), f"{folder}/judge.sqlite")
        ...     values = [judge.abstain_prob(["q"], ["p"]).tolist() for _ in range(2)]
        >>> values, judge.inner_calls, judge.name
        ([[0.25], [0.25]], 1, 'quarter')
    """

    def __init__(
        self,
        judge: Judge | None,
        cache: JudgeCache | str | os.PathLike[str] | None = None,
        chunk_size: int = 64,
        commit_interval: float = 0.2,
        commit_size: int = 256,
        probe: bool = False,
    ) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        if commit_interval <= 0 or commit_size < 1:
            raise ValueError(
                f"commit_interval must be > 0 and commit_size >= 1, got {commit_interval} and"
                f" {commit_size}"
            )
        self.inner = judge
        self.cache = cache if isinstance(cache, JudgeCache) else JudgeCache(cache)
        self.chunk_size = int(chunk_size)
        self.commit_interval, self.commit_size = float(commit_interval), int(commit_size)
        if judge is not None:
            self.name, self.fingerprint = judge.name, judge.fingerprint
        self.inner_calls = self.uncached = 0
        self._warned_validators: set[int] = set()
        self._probe_pending = bool(probe)
        self._settings: Callable[[str], Mapping[str, Any]] = lambda operation: {}

    @classmethod
    def from_cache(
        cls,
        name: str,
        fingerprint: str,
        cache: JudgeCache | str | os.PathLike[str] | None = None,
        settings: Callable[[str], Mapping[str, Any]] = lambda operation: {},
    ) -> CachedJudge:
        """The judge ``name`` with ``fingerprint`` and run-time ``settings`` answering from
        ``cache`` alone (it streams): misses raise :class:`~udcg.judge.requests.MissingResults`
        with all of them.

        Examples:
            >>> import tempfile
            >>> from udcg.judge.requests import MissingResults
            >>> with tempfile.TemporaryDirectory() as folder:
            ...     judge = CachedJudge.from_cache("llama3", "fp", f"{folder}/judge.sqlite")
            ...     try:
            ...         judge.yes_prob([[{"role": "user", "content": "Ok?"}]] * 2)
            ...     except MissingResults as missing:
            ...         print(len(missing.requests), missing.requests[0].op)
            1 yes_prob
        """
        judge = cls(None, cache)
        judge.name, judge.fingerprint, judge._settings = name, fingerprint, settings
        return judge

    def __repr__(self) -> str:
        return f"CachedJudge({self.inner!r}, cache={self.cache!r})"

    def __getattr__(self, attribute: str) -> Any:
        if attribute == "inner":
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)

    @property
    def streams_results(self) -> bool:  # type: ignore[override]
        return self.inner is None or bool(getattr(self.inner, "streams_results", False))

    def probe(self) -> None:
        self._probe_pending = False
        if self.inner is not None:
            self.inner.probe()

    def key_settings(self, operation: str) -> dict[str, Any]:
        """The wrapped judge's run-time settings of ``operation``, recorded in the cache; the
        record serves when it cannot resolve them (a server that does not answer)."""
        if self.inner is None:
            return dict(self._settings(operation))
        record = cache_key(self.fingerprint, "key_settings", operation)
        try:
            settings = self.inner.key_settings(operation)
        except UDCGInputError:
            recorded = self.cache.get(record, count=False)
            if not isinstance(recorded, dict):
                raise
            return recorded
        if settings and self.cache.get(record, count=False) != settings:
            self.cache.put_many({record: settings}, count=False)
        return settings

    def run(self, requests: Sequence[Request], on_result: OnResult | None = None) -> list[Result]:
        """Cache hits (checked against their operation's form), then the misses run on the
        wrapped judge and stored; requests without a key run uncached. ``on_result`` hears of
        every item, hits first."""
        requests = list(requests)
        results: list[Result | None] = [None] * len(requests)
        found = self.cache.get_many([r.key for r in requests if r.key is not None])
        todo: dict[str, list[int]] = {}
        loose: list[int] = []
        for i, request in enumerate(requests):
            if request.key is None:
                loose.append(i)
            elif request.key in found:
                try:
                    value, bound = _FORMS[request.op][1](found[request.key])
                except ValueError as exc:
                    raise self.cache.bad_entry(
                        request.key, f"not a {request.op} value: {exc}"
                    ) from None
                results[i] = Result(value, bound)
                if on_result is not None:
                    on_result(i, value, bound)
            else:
                todo.setdefault(request.key, []).append(i)
        if self.inner is None and (todo or loose):
            firsts = sorted([*loose, *(positions[0] for positions in todo.values())])
            raise MissingResults([requests[i] for i in firsts], firsts[0])
        for i in loose:  # generate_json with a validator of no stable name
            validate = requests[i].params.get("validate")
            if id(validate) not in self._warned_validators:
                self._warned_validators.add(id(validate))
                warnings.warn(
                    f"generate_json validator {validate!r} has no stable name (lambda, local"
                    " function or object without a 'cache_id' string): its results are not"
                    " cached",
                    stacklevel=3,
                )
        if loose:
            self.inner_calls += 1
            out = self.inner.run([requests[i] for i in loose])  # type: ignore[union-attr]
            self.uncached += len(out)
            for i, result in zip(loose, out, strict=True):
                results[i] = result
        if todo:
            self._run_misses(requests, todo, results, on_result)
        return results  # type: ignore[return-value]

    def _run_misses(
        self,
        requests: list[Request],
        todo: dict[str, list[int]],
        results: list[Result | None],
        on_result: OnResult | None,
    ) -> None:
        assert self.inner is not None
        if self._probe_pending:
            self.probe()
        pending = list(todo)
        committer = GroupCommit(self.cache, self.commit_interval, self.commit_size)

        def record(key: str, value: Any, bound: bool) -> None:
            first = todo[key][0]
            if results[first] is not None:
                return
            op = requests[first].op
            if op == "generate" and not isinstance(value, str):
                raise TypeError(
                    f"judge {self.name!r} generate() returned {type(value).__name__}, not str"
                )
            encoded = _FORMS[op][0](value, bound)
            if encoded is None:
                self.uncached += 1
            else:
                committer.add(key, encoded)
            for i in todo[key]:
                results[i] = Result(value, bound)
                if on_result is not None:
                    on_result(i, value, bound)

        def ask(keys: list[str], sink: OnResult | None) -> None:
            self.inner_calls += 1
            stream = {} if sink is None else {"on_result": sink}
            out = self.inner.run([requests[todo[key][0]] for key in keys], **stream)
            if len(out) != len(keys):
                raise RuntimeError(
                    f"judge {self.name!r} returned {len(out)} results for {len(keys)} inputs"
                )
            for key, (value, bound) in zip(keys, out, strict=True):
                record(key, value, bool(bound))

        try:
            if self.streams_results:
                ask(pending, lambda j, value, bound: record(pending[j], value, bound))
            else:
                for start in range(0, len(pending), self.chunk_size):
                    ask(pending[start : start + self.chunk_size], None)
                    committer.flush()
        finally:
            committer.close()
