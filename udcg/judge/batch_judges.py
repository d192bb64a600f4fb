"""The judges behind ``udcg batch``: each sits inside a :class:`~udcg.judge.cached.CachedJudge`
so that the cache keys, the deduplication and the stored entries are the cached judge's own.

* :class:`BatchRecorder` (export): the cache misses become request lines instead of server
  calls; nothing is stored.
* :class:`ReplayJudge` (import): the cache misses are answered from batch results, so the
  cached judge stores them as it stores online results.
* :class:`RefusingJudge` (annotate from imported results): a cache miss is an error naming the
  context that needs it, never a server call.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.contexts import Context
from udcg.judge.base import AbstainMode, Judge, judge_values
from udcg.judge.batch_files import Call, ChatSettings, RequestWriter, request_body
from udcg.judge.cache import JudgeCache, canonical_json
from udcg.judge.cached import CachedJudge, decode_value
from udcg.judge.prompts import Messages, abstain_messages


def call_identity(operation: str, args: Mapping[str, Any]) -> str:
    """The identity of one item of ``operation`` (its arguments as canonical JSON)."""
    return canonical_json([operation, dict(args)])


class _RecordingCache(JudgeCache):
    """The judge cache, read as usual; what the cached judge stores is written as requests."""

    def __init__(self, recorder: BatchRecorder, path: str | os.PathLike[str] | None) -> None:
        super().__init__(path)
        self.recorder = recorder

    def put_many(self, items: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> int:
        pairs = items.items() if isinstance(items, Mapping) else items
        self.recorder.record([(key, _placeholder_number(value)) for key, value in pairs])
        return 0


_TEXT_PLACEHOLDER = "udcg-batch-request:"


def _placeholder_number(stored: Any) -> int:
    """The request number a placeholder result carries, from its cached form."""
    if isinstance(stored, str):
        return int(stored.removeprefix(_TEXT_PLACEHOLDER))
    return int(decode_value(stored)[0])


class _RecordingJudge(Judge):
    """Queues the calls it is asked for and returns, as each result, the call's number (a float,
    or a text holding it, for ``generate``): the placeholders are never used as labels."""

    def __init__(self, recorder: BatchRecorder, name: str, fingerprint: str) -> None:
        self.recorder = recorder
        self.name = name
        self.fingerprint = fingerprint

    def abstain_prob(
        self, questions: Sequence[str], passages: Sequence[str], mode: AbstainMode = "first_token"
    ) -> np.ndarray:
        numbers = [
            self.recorder.queue("abstain_prob", question=q, passage=p, mode=mode)
            for q, p in zip(questions, passages, strict=True)
        ]
        return np.asarray(numbers, dtype=np.float64)

    def yes_prob(self, prompts: Sequence[Messages]) -> np.ndarray:
        numbers = [self.recorder.queue("yes_prob", messages=list(m)) for m in prompts]
        return np.asarray(numbers, dtype=np.float64)

    def generate(self, prompts: Sequence[Messages], max_new_tokens: int = 64) -> list[str]:
        limit = int(max_new_tokens)
        numbers = [
            self.recorder.queue("generate", messages=list(m), max_new_tokens=limit) for m in prompts
        ]
        return [f"{_TEXT_PLACEHOLDER}{number}" for number in numbers]


class BatchRecorder:
    """``judge`` is a cached judge with the fingerprint and name of ``chat``'s judge over the
    cache at ``cache``: its hits are answered from the cache, and each distinct miss is written
    by ``writer`` as one request (custom_id: the key the cached judge stores it under) instead
    of being computed; nothing is stored. ``counts`` holds the requests written per
    operation."""

    def __init__(
        self,
        name: str,
        fingerprint: str,
        chat: ChatSettings,
        writer: RequestWriter,
        cache: str | os.PathLike[str] | None = None,
    ) -> None:
        self.fingerprint = fingerprint
        self.chat = chat
        self.writer = writer
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._queued: dict[int, tuple[str, dict[str, Any]]] = {}
        self._written: set[str] = set()
        self._numbers = itertools.count()
        inner = _RecordingJudge(self, name, fingerprint)
        self.judge = CachedJudge(inner, _RecordingCache(self, cache))

    def queue(self, operation: str, **args: Any) -> int:
        """Hold one call until the cached judge stores its result; returns its number."""
        with self._lock:
            number = next(self._numbers)
            self._queued[number] = (operation, args)
        return number

    def record(self, stored: list[tuple[str, int]]) -> None:
        """Write the calls numbered as in ``stored`` as requests under their keys (the keys the
        cached judge stores their results under); a key written before is skipped."""
        with self._lock:
            for key, number in stored:
                operation, args = self._queued.pop(number)
                if key in self._written:
                    continue
                self._written.add(key)
                call = Call(key, self.fingerprint, operation, args)
                self.writer.write(call, request_body(call, self.chat))
                self.counts[operation] += 1


class ReplayJudge(Judge):
    """Answers each item from ``results`` (:func:`call_identity` -> ``(value, is_bound)``);
    log-prob values come back as :class:`~udcg.judge.base.JudgeValues` with their bounds."""

    def __init__(
        self, name: str, fingerprint: str, results: Mapping[str, tuple[Any, bool]]
    ) -> None:
        self.name = name
        self.fingerprint = fingerprint
        self.results = results

    def _values(self, identities: list[str]) -> np.ndarray:
        found = [self.results[i] for i in identities]
        return judge_values([v for v, _ in found], [b for _, b in found])

    def abstain_prob(
        self, questions: Sequence[str], passages: Sequence[str], mode: AbstainMode = "first_token"
    ) -> np.ndarray:
        return self._values(
            [
                call_identity("abstain_prob", {"question": q, "passage": p, "mode": mode})
                for q, p in zip(questions, passages, strict=True)
            ]
        )

    def yes_prob(self, prompts: Sequence[Messages]) -> np.ndarray:
        return self._values([call_identity("yes_prob", {"messages": m}) for m in prompts])

    def generate(self, prompts: Sequence[Messages], max_new_tokens: int = 64) -> list[str]:
        return [
            self.results[
                call_identity("generate", {"messages": m, "max_new_tokens": max_new_tokens})
            ][0]
            for m in prompts
        ]


class RefusingJudge(Judge):
    """A judge that computes nothing: asked for any item, it raises
    :class:`~udcg.errors.UDCGInputError` naming the first of ``contexts`` whose question the
    item's prompt holds (file and line when the contexts were read from a file)."""

    def __init__(self, name: str, fingerprint: str, contexts: Sequence[Context]) -> None:
        self.name = name
        self.fingerprint = fingerprint
        self.contexts = contexts

    def _refuse(self, operation: str, messages: Messages) -> NoReturn:
        user = messages[-1]["content"]
        for ctx in self.contexts:
            if ctx.question and f"Question: {ctx.question}\n" in user:
                raise UDCGInputError(
                    f"context {ctx.qid!r}: no imported batch holds its {operation} result;"
                    " export its requests, run them and import the results",
                    **ctx.location(),
                )
        raise UDCGInputError(f"no imported batch holds the {operation} result of {user[:80]!r}")

    def abstain_prob(
        self, questions: Sequence[str], passages: Sequence[str], mode: AbstainMode = "first_token"
    ) -> np.ndarray:
        self._refuse("abstain_prob", abstain_messages(questions[0], passages[0]))

    def yes_prob(self, prompts: Sequence[Messages]) -> np.ndarray:
        self._refuse("yes_prob", prompts[0])

    def generate(self, prompts: Sequence[Messages], max_new_tokens: int = 64) -> list[str]:
        self._refuse("generate", prompts[0])
