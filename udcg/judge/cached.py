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
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from udcg.errors import UDCGInputError, UDCGWarning
from udcg.judge.base import Judge, OnResult
from udcg.judge.cache import FORMS, JudgeCache, cache_key
from udcg.judge.requests import MissingResults, Request, Result


class _Commits(threading.Thread):
    """Buffered cache writes, committed together when ``size`` wait, every ``interval`` seconds
    (this thread, started at once) and at :meth:`close`; a key another writer committed
    meanwhile keeps its value (the cache only grows), counted in ``conflicts`` when it
    differs."""

    def __init__(self, cache: JudgeCache, interval: float, size: int) -> None:
        super().__init__(name="udcg-cache-commit", daemon=True)
        self.cache, self.size, self.interval = cache, size, interval
        self.pending: dict[str, Any] = {}
        self.conflicts = 0
        self.lock, self.stopped = threading.Lock(), threading.Event()
        self.start()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            self.flush()

    def add(self, key: str, value: Any) -> None:
        with self.lock:
            self.pending[key] = value
            full = len(self.pending) >= self.size
        if full:
            self.flush()

    def flush(self) -> None:
        with self.lock:
            pending, self.pending = self.pending, {}
        if pending:
            self.conflicts += self.cache.add_new(pending).conflicts

    def close(self) -> None:
        self.stopped.set()
        self.join()
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
        self.cache = cache if isinstance(cache, JudgeCache) else JudgeCache(cache)
        self.chunk_size = int(chunk_size)
        self.commit_interval, self.commit_size = float(commit_interval), int(commit_size)
        self._fingerprint = ""
        if judge is not None:
            self.name = judge.name
        self.inner_calls = self.uncached = 0
        self._warned_validators: set[int] = set()
        self._probe_pending = bool(probe)
        self._recorded: dict[str, dict[str, Any]] = {}  # settings read from the record
        self._settings: Callable[[str], Mapping[str, Any]] = lambda operation: {}
        self.inner = judge  # last: what is set after it may be the wrapped judge's option

    @property  # type: ignore[override]
    def fingerprint(self) -> str:
        """The wrapped judge's fingerprint as it is now (an option changed after wrapping
        changes the keys), or the one given to :meth:`from_cache`."""
        return self.inner.fingerprint if self.inner is not None else self._fingerprint

    @fingerprint.setter
    def fingerprint(self, value: str) -> None:
        self._fingerprint = value

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

    def __setattr__(self, attribute: str, value: Any) -> None:
        """An option of the wrapped judge (``judge.max_passage_tokens = 4``) is set on it: the
        keys follow its fingerprint."""
        inner = self.__dict__.get("inner")
        own = attribute in vars(self) or attribute[0] == "_" or hasattr(type(self), attribute)
        if not own and inner is not None and hasattr(inner, attribute):
            setattr(inner, attribute, value)
        else:
            super().__setattr__(attribute, value)

    @property
    def streams_results(self) -> bool:  # type: ignore[override]
        return self.inner is None or bool(getattr(self.inner, "streams_results", False))

    @property
    def provides(self) -> frozenset[str] | None:  # type: ignore[override]
        return None if self.inner is None else getattr(self.inner, "provides", None)

    def batch_settings(self, operations: Collection[str] | None = None) -> dict[str, Any]:
        return {} if self.inner is None else self.inner.batch_settings(operations)

    def close(self) -> None:
        self.cache.close()
        if self.inner is not None:
            self.inner.close()

    def probe(self) -> None:
        self._probe_pending = False
        if self.inner is not None:
            self.inner.probe()

    def key_settings(self, operation: str) -> dict[str, Any]:
        """The wrapped judge's run-time settings of ``operation``, recorded in the cache; the
        record serves when it cannot resolve them (a server that does not answer) until misses
        of ``operation`` must go to it, when :meth:`run` checks it against the record."""
        if self.inner is None:
            return dict(self._settings(operation))
        if operation in self._recorded:
            return dict(self._recorded[operation])
        record = cache_key(self.fingerprint, "key_settings", operation)
        try:
            settings = self.inner.key_settings(operation)
        except UDCGInputError:
            recorded = self.cache.get(record, count=False)
            if not isinstance(recorded, dict):
                raise
            self._recorded[operation] = recorded
            return dict(recorded)
        if settings and self.cache.get(record, count=False) != settings:
            self.cache.put_many({record: settings}, count=False)
        return settings

    def _confirm_recorded(self, operations: set[str]) -> None:
        """Before misses of ``operations`` go to a judge whose keys came from the cache's
        record: its settings now must be the record's, or its values would be stored under keys
        of other settings (a server back mid-run with another tokenizer)."""
        for operation in sorted(operations & self._recorded.keys()):
            recorded = self._recorded.pop(operation)
            settings = self.inner.key_settings(operation)  # type: ignore[union-attr]
            if settings != recorded:
                raise UDCGInputError(
                    f"judge {self.name!r}: its {operation} settings are now {settings}, but this"
                    f" run's cache keys were made from the cache's record {recorded} while it did"
                    " not answer; rerun the command"
                )

    def run(self, requests: Sequence[Request], on_result: OnResult | None = None) -> list[Result]:
        """Cache hits (checked against their operation's form), then the misses run on the
        wrapped judge and stored; requests without a key run uncached. ``on_result`` hears of
        every item, hits first."""
        requests = list(requests)
        results: list[Result | None] = [None] * len(requests)

        def done(i: int, value: Any, bound: bool) -> None:
            results[i] = Result(value, bound)
            if on_result is not None:
                on_result(i, value, bound)

        found = self.cache.get_many([r.key for r in requests if r.key is not None])
        todo: dict[str, list[int]] = {}
        loose: list[int] = []
        for i, request in enumerate(requests):
            if request.key is None:
                loose.append(i)
            elif request.key in found:
                try:
                    hit = FORMS[request.op][1](found[request.key])
                except ValueError as exc:
                    raise self.cache.bad_entry(
                        request.key, f"not a {request.op} value: {exc}"
                    ) from None
                done(i, *hit)
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
                done(i, *result)
        if not todo:
            return results  # type: ignore[return-value]
        assert self.inner is not None
        if self._probe_pending:
            self.probe()
        self._confirm_recorded({requests[positions[0]].op for positions in todo.values()})
        pending = list(todo)
        commits = _Commits(self.cache, self.commit_interval, self.commit_size)

        def record(key: str, value: Any, bound: bool) -> None:
            first = todo[key][0]
            if results[first] is not None:
                return
            op = requests[first].op
            if op == "generate" and not isinstance(value, str):
                raise TypeError(
                    f"judge {self.name!r} generate() returned {type(value).__name__}, not str"
                )
            encoded = FORMS[op][0](value, bound)
            if encoded is None:
                self.uncached += 1
            else:
                commits.add(key, encoded)
            for i in todo[key]:
                done(i, value, bound)

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
                    commits.flush()
        finally:
            commits.close()
        if commits.conflicts:
            warnings.warn(
                f"judge {self.name!r}: {commits.conflicts} of the values this run computed"
                f" differ from those another run (process or thread) stored in {self.cache.path}"
                " meanwhile; the cache keeps those (a rerun it answers gives them)",
                UDCGWarning,
                stacklevel=3,
            )
        return results  # type: ignore[return-value]
