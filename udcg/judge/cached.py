"""A judge that answers from the on-disk cache and asks the wrapped judge only for the misses.

Every operation looks up one key per item (see :func:`udcg.judge.cache.cache_key`: the judge's
fingerprint, the operation, the item's chat messages and the call's options), then computes the
missing items with the wrapped judge. Identical items within one call are computed once. Results
come back in input order and are the values the wrapped judge returned (floats round-trip
exactly through JSON).

* When the wrapped judge streams (``streams_results``, see :mod:`udcg.judge.base`), all the
  missing items go to it in one call and each result is stored as it arrives: what finished since
  the last commit is committed together, at least every ``commit_interval`` seconds (0.2) and
  whenever ``commit_size`` results wait. A run killed midway (even by SIGKILL) loses only what
  finished within the last moment; the next run computes only what is still missing. The cached
  judge then streams too: ``on_result`` reports cache hits at once and computed items as they
  arrive.
* Otherwise the missing items go in calls of at most ``chunk_size`` items, each chunk committed
  as soon as it is done: a run killed midway loses at most the chunk in flight.

``abstain_prob``, ``yes_prob`` and ``answer_prob`` return :class:`~udcg.judge.base.JudgeValues`:
a value the wrapped judge marked as an upper bound is stored with that mark (as
``{"value": v, "upper_bound": true}``; other values as plain numbers, the form every entry had
before bounds were marked, so such entries read as exact) and comes back marked.

Every value read from the cache is checked against the form of its operation
(:func:`~udcg.judge.cache.probability_entry`: a finite probability in [0, 1], possibly marked as
a bound; :func:`~udcg.judge.cache.text_entry`; :func:`~udcg.judge.cache.json_entry`): an entry
of another form (a foreign or damaged cache file, a merge of one) is a
:class:`~udcg.errors.UDCGInputError` naming the cache file and the key, with the command that
drops it.

What is not cached:

* non-finite floats, and probabilities outside [0, 1] (a wrapped judge returning them is not
  trusted with the cache);
* failed ``generate_json`` results: only ``ok`` results are stored, so a rerun retries the
  failures (with a fresh call to the model) instead of replaying them;
* ``generate_json`` calls whose validator has no stable identity (a lambda, a local function, a
  ``functools.partial``, an object without ``cache_id``): the cache could not tell two such
  validators apart, so these calls go straight to the wrapped judge. Give a validator a string
  attribute ``cache_id`` (or make it a module-level function) to cache its results. A validator
  is identified by name, not by code: after changing what a validator accepts, clear the cache or
  rename it.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from udcg.errors import UDCGInputError
from udcg.judge.base import (
    ANSWER_NORMALISATION,
    AbstainMode,
    JSONResult,
    Judge,
    JudgeValues,
    OnResult,
    check_abstain_inputs,
    check_answer_inputs,
    judge_values,
    upper_bounds,
)
from udcg.judge.cache import (
    JudgeCache,
    cache_key,
    canonical_json,
    finite_json,
    json_entry,
    probability_entry,
    text_entry,
)
from udcg.judge.prompts import Messages, abstain_messages

_MISSING = object()


def _validator_id(validate: Any) -> str | None:
    """A stable name for a ``generate_json`` validator, or None when it has none."""
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


def item_key(
    fingerprint: str,
    operation: str,
    args: Mapping[str, Any],
    settings: Mapping[str, Any] | None = None,
) -> str:
    """The key :class:`CachedJudge` stores one item under: ``operation`` (``abstain_prob``,
    ``yes_prob`` or ``generate``) of the judge ``fingerprint`` with the method's arguments for
    one item, ``args`` (``question``, ``passage``, ``mode``; ``messages``; ``messages``,
    ``max_new_tokens``), and the judge's run-time ``settings`` of the operation
    (:meth:`~udcg.judge.base.Judge.key_settings`).

    Examples:
        The abstention mode is part of the key:

        >>> args = {"question": "Who wrote Emma?", "passage": "Austen did.", "mode": "first_token"}
        >>> first = item_key("fingerprint", "abstain_prob", args)
        >>> first == item_key("fingerprint", "abstain_prob", {**args, "mode": "sequence"})
        False
    """
    if operation == "abstain_prob":
        payload = abstain_messages(args["question"], args["passage"])
        params: dict[str, Any] = {"mode": args["mode"]}
    elif operation == "yes_prob":
        payload, params = list(args["messages"]), {}
    elif operation == "generate":
        payload, params = list(args["messages"]), {"max_new_tokens": int(args["max_new_tokens"])}
    else:
        raise ValueError(f"no item key for operation {operation!r}")
    return cache_key(fingerprint, operation, payload, {**params, **(settings or {})})


def encode_value(value: float, upper_bound: bool) -> float | dict[str, Any] | None:
    """The cached form of a judge value: the number, or ``{"value": v, "upper_bound": true}``
    for an upper bound; None (not cached) when it is not a probability (not finite, or outside
    [0, 1]).

    Examples:
        >>> encode_value(0.25, False), encode_value(0.25, True), encode_value(float("nan"), False)
        (0.25, {'value': 0.25, 'upper_bound': True}, None)
    """
    number = float(value)
    if not 0.0 <= number <= 1.0:  # False for NaN too
        return None
    return {"value": number, "upper_bound": True} if upper_bound else number


def _decode_text(stored: Any) -> tuple[str, bool]:
    return text_entry(stored), False


def _decode_json(stored: Any) -> tuple[JSONResult, bool]:
    value, attempts, raw = json_entry(stored)
    return JSONResult(value=value, attempts=attempts, raw=raw), False


class GroupCommit:
    """Buffers cache writes and commits them together: when ``size`` entries wait, every
    ``interval`` seconds from a background thread, and at :meth:`close`.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     cache = JudgeCache(Path(folder) / "judge.sqlite")
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
        self.cache = cache
        self.size = size
        self.interval = interval
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
    """Wraps any :class:`Judge`; same ``name`` and ``fingerprint``, same results, cached.

    ``cache`` is a :class:`JudgeCache`, a path to its SQLite file, or None for the default
    location. ``chunk_size`` bounds the calls to a wrapped judge that does not stream;
    ``commit_interval`` and ``commit_size`` pace the commits of one that does. With ``probe``
    the wrapped judge is probed (:meth:`Judge.probe`) before its first call, so a run the cache
    answers whole never reaches it.
    ``inner_calls`` counts the calls made to the wrapped judge and ``uncached`` the computed
    results that were not stored (see the module docstring). It streams iff the wrapped judge
    does.

    Examples:
        The second call is answered by the cache; the wrapped judge was called once:

        >>> import tempfile
        >>> from pathlib import Path
        >>> import numpy as np
        >>> class Quarter(Judge):
        ...     name = fingerprint = "quarter"
        ...     def abstain_prob(self, questions, passages, mode="first_token"):
        ...         return np.full(len(questions), 0.25)
        ...     yes_prob = generate = None  # not used here
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     judge = CachedJudge(Quarter(), cache=Path(folder) / "judge.sqlite")
        ...     values = [judge.abstain_prob(["q"], ["p"]).tolist() for _ in range(2)]
        >>> values, judge.inner_calls, judge.name
        ([[0.25], [0.25]], 1, 'quarter')
    """

    def __init__(
        self,
        judge: Judge,
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
        self.commit_interval = float(commit_interval)
        self.commit_size = int(commit_size)
        self.name = judge.name
        self.fingerprint = judge.fingerprint
        self.inner_calls = 0
        self.uncached = 0
        self._warned_validators: set[int] = set()
        self._probe_pending = bool(probe)

    def __repr__(self) -> str:
        return f"CachedJudge({self.inner!r}, cache={self.cache!r})"

    def __getattr__(self, attribute: str) -> Any:
        # Backend-specific attributes (e.g. an OpenAIJudge's ``stats``) stay reachable.
        if attribute == "inner":
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)

    @property
    def streams_results(self) -> bool:  # type: ignore[override]
        return bool(getattr(self.inner, "streams_results", False))

    def probe(self) -> None:
        self._probe_pending = False
        self.inner.probe()

    # -- the shared lookup / compute / store loop ---------------------------------------------

    def _cached(
        self,
        operation: str,
        keys: list[str],
        compute: Callable[[list[int], OnResult | None], Sequence[Any]],
        encode: Callable[[Any, bool], Any],
        decode: Callable[[Any], tuple[Any, bool]],
        on_result: OnResult | None = None,
        streamed: bool = False,
    ) -> tuple[list[Any], list[bool]]:
        """(results, upper-bound flags) for the items of ``keys``: decoded cache hits, else
        ``compute(indices, sink)`` of all the misses at once with a ``sink`` that stores each
        result as it arrives when ``streamed``, else by chunks (``sink`` None).

        ``encode(result, bound)`` turns a computed result into its cached JSON value, or None to
        not store it; ``decode`` reverses it, raising ``ValueError`` for a value not of the
        operation's form (an error naming the cache file and the key). ``on_result(i, result,
        bound)`` hears of every item, hits first.
        """
        found = self.cache.get_many(keys)
        results: list[Any] = [_MISSING] * len(keys)
        flags = [False] * len(keys)
        todo: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            if key in found:
                try:
                    results[i], flags[i] = decode(found[key])
                except ValueError as exc:
                    raise self.cache.bad_entry(key, f"not a {operation} value: {exc}") from None
                if on_result is not None:
                    on_result(i, results[i], flags[i])
            else:
                todo.setdefault(key, []).append(i)
        pending = list(todo)
        if not pending:
            return results, flags
        if self._probe_pending:  # the first call the cache cannot answer
            self.probe()
        committer = GroupCommit(self.cache, self.commit_interval, self.commit_size)

        def record(key: str, result: Any, bound: bool) -> None:
            if results[todo[key][0]] is not _MISSING:
                return
            encoded = encode(result, bound)
            if encoded is None:
                self.uncached += 1
            else:
                committer.add(key, encoded)
            for i in todo[key]:
                results[i], flags[i] = result, bound
                if on_result is not None:
                    on_result(i, result, bound)

        def check(out: Sequence[Any], asked: int) -> None:
            if len(out) != asked:
                raise RuntimeError(
                    f"judge {self.name!r} returned {len(out)} results for {asked} inputs"
                    f" ({operation})"
                )

        try:
            if streamed:
                self.inner_calls += 1
                indices = [todo[key][0] for key in pending]
                out = compute(indices, lambda j, result, bound: record(pending[j], result, bound))
                check(out, len(indices))
                for key, result, bound in zip(pending, out, upper_bounds(out), strict=True):
                    record(key, result, bool(bound))
            else:
                for start in range(0, len(pending), self.chunk_size):
                    chunk = pending[start : start + self.chunk_size]
                    self.inner_calls += 1
                    out = compute([todo[key][0] for key in chunk], None)
                    check(out, len(chunk))
                    for key, result, bound in zip(chunk, out, upper_bounds(out), strict=True):
                        record(key, result, bool(bound))
                    committer.flush()
        finally:
            committer.close()
        return results, flags

    def _values(
        self,
        operation: str,
        keys: list[str],
        compute: Callable[[list[int], OnResult | None], Any],
        on_result: OnResult | None,
    ) -> JudgeValues:
        """:meth:`_cached` of an operation returning floats, as :class:`JudgeValues`."""

        def floats(indices: list[int], sink: OnResult | None) -> JudgeValues:
            out = compute(indices, sink)
            return judge_values(out, upper_bounds(out))

        values, flags = self._cached(
            operation,
            keys,
            floats,
            encode_value,
            probability_entry,
            on_result,
            self.streams_results,
        )
        return judge_values(values, flags)

    def _key_settings(self, operation: str, items: Sequence[Any]) -> dict[str, Any]:
        """:meth:`key_settings` of ``operation``, part of every item's key (not asked for an
        empty call)."""
        return self.key_settings(operation) if items else {}

    def key_settings(self, operation: str) -> dict[str, Any]:
        """The wrapped judge's run-time settings of ``operation``.

        The settings the wrapped judge resolves are recorded in the cache (one entry per judge
        fingerprint and operation); when it cannot resolve them (a server that does not answer)
        the recorded ones serve, so a rerun the cache answers whole needs no server. Without a
        record its error stands."""
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

    def _streaming(self, sink: OnResult | None) -> dict[str, Any]:
        """The keyword arguments that pass ``sink`` to the wrapped judge (none without one)."""
        return {} if sink is None else {"on_result": sink}

    # -- operations ---------------------------------------------------------------------------

    def abstain_prob(
        self,
        questions: Sequence[str],
        passages: Sequence[str],
        mode: AbstainMode = "first_token",
        *,
        on_result: OnResult | None = None,
    ) -> JudgeValues:
        questions, passages = check_abstain_inputs(questions, passages)
        settings = self._key_settings("abstain_prob", questions)
        keys = [
            item_key(
                self.fingerprint,
                "abstain_prob",
                {"question": q, "passage": p, "mode": mode},
                settings,
            )
            for q, p in zip(questions, passages, strict=True)
        ]

        def compute(indices: list[int], sink: OnResult | None) -> Any:
            return self.inner.abstain_prob(
                [questions[i] for i in indices],
                [passages[i] for i in indices],
                mode=mode,
                **self._streaming(sink),
            )

        return self._values("abstain_prob", keys, compute, on_result)

    def answer_prob(
        self,
        questions: Sequence[str],
        passages: Sequence[str],
        answers: Sequence[Sequence[str]],
        *,
        on_result: OnResult | None = None,
    ) -> JudgeValues:
        """Cached per (abstention prompt, set of acceptable answers): the key holds the pair's
        messages and its distinct answers in sorted order (the max does not depend on their
        order), and the call's parameters name the normalisation."""
        questions, passages, answers = check_answer_inputs(questions, passages, answers)
        payloads = [
            {"messages": abstain_messages(q, p), "answers": sorted(set(a))}
            for q, p, a in zip(questions, passages, answers, strict=True)
        ]

        def compute(indices: list[int], sink: OnResult | None) -> Any:
            return self.inner.answer_prob(
                [questions[i] for i in indices],
                [passages[i] for i in indices],
                [answers[i] for i in indices],
                **self._streaming(sink),
            )

        params = {"normalisation": ANSWER_NORMALISATION}
        params.update(self._key_settings("answer_prob", payloads))
        keys = [cache_key(self.fingerprint, "answer_prob", p, params) for p in payloads]
        return self._values("answer_prob", keys, compute, on_result)

    def yes_prob(
        self, prompts: Sequence[Messages], *, on_result: OnResult | None = None
    ) -> JudgeValues:
        prompts = list(prompts)

        def compute(indices: list[int], sink: OnResult | None) -> Any:
            return self.inner.yes_prob([prompts[i] for i in indices], **self._streaming(sink))

        settings = self._key_settings("yes_prob", prompts)
        keys = [item_key(self.fingerprint, "yes_prob", {"messages": m}, settings) for m in prompts]
        return self._values("yes_prob", keys, compute, on_result)

    def generate(
        self,
        prompts: Sequence[Messages],
        max_new_tokens: int = 64,
        *,
        on_result: OnResult | None = None,
    ) -> list[str]:
        prompts = list(prompts)

        def compute(indices: list[int], sink: OnResult | None) -> list[str]:
            out = self.inner.generate(
                [prompts[i] for i in indices],
                max_new_tokens=max_new_tokens,
                **self._streaming(sink),
            )
            for text in out:
                if not isinstance(text, str):
                    raise TypeError(
                        f"judge {self.name!r} generate() returned {type(text).__name__}, not str"
                    )
            return out

        limit = {"max_new_tokens": max_new_tokens}
        settings = self._key_settings("generate", prompts)
        texts, _ = self._cached(
            "generate",
            [
                item_key(self.fingerprint, "generate", {"messages": m, **limit}, settings)
                for m in prompts
            ],
            compute,
            lambda text, _: str(text),
            _decode_text,
            on_result,
            self.streams_results,
        )
        return texts

    def generate_json(
        self,
        prompts: Sequence[Messages],
        validate: Any = None,
        max_new_tokens: int = 256,
        retries: int = 2,
        *,
        schema: Mapping[str, Any] | None = None,
    ) -> list[JSONResult]:
        """Cached per prompt, validator name and options; a ``schema`` is part of the key (when
        given) and passed to the wrapped judge. Calls go by chunks (``generate_json`` does not
        stream)."""
        prompts = list(prompts)
        asked = {} if schema is None else {"schema": schema}
        validator = _validator_id(validate)
        if validator is None:
            if id(validate) not in self._warned_validators:
                self._warned_validators.add(id(validate))
                warnings.warn(
                    f"generate_json validator {validate!r} has no stable name (lambda, local"
                    " function or object without a 'cache_id' string): its results are not"
                    " cached",
                    stacklevel=2,
                )
            self.inner_calls += 1
            out = self.inner.generate_json(
                prompts, validate, max_new_tokens=max_new_tokens, retries=retries, **asked
            )
            self.uncached += len(out)
            return out

        def compute(indices: list[int], _: OnResult | None) -> list[JSONResult]:
            return self.inner.generate_json(
                [prompts[i] for i in indices],
                validate,
                max_new_tokens=max_new_tokens,
                retries=retries,
                **asked,
            )

        def encode(result: JSONResult, _: bool) -> dict[str, Any] | None:
            if not result.ok or not finite_json(result.value):
                return None
            stored = {"value": result.value, "attempts": result.attempts, "raw": list(result.raw)}
            try:
                canonical_json(stored)
            except (TypeError, ValueError):
                return None
            return stored

        params = {
            "max_new_tokens": int(max_new_tokens),
            "retries": int(retries),
            "validate": validator,
            **asked,
        }
        params.update(self._key_settings("generate_json", prompts))
        keys = [cache_key(self.fingerprint, "generate_json", p, params) for p in prompts]
        results, _ = self._cached("generate_json", keys, compute, encode, _decode_json)
        return results
