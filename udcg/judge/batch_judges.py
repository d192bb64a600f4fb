"""The judges behind ``udcg batch``: each sits inside a :class:`~udcg.judge.cached.CachedJudge`
so that the cache hits and the deduplication are the cached judge's own.

* :class:`BatchRecorder` (export): the cache misses become request lines instead of server
  calls, each under the key the cached judge stores its result under
  (:func:`~udcg.judge.cached.item_key`); nothing is stored.
* :class:`RefusingJudge` (annotate from imported results): a cache miss is an error naming the
  context that needs it, never a server call.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NoReturn

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context
from udcg.judge.base import AbstainMode, Judge
from udcg.judge.batch_files import Call, ChatSettings, RequestWriter, request_body
from udcg.judge.cache import JudgeCache
from udcg.judge.cached import CachedJudge, item_key
from udcg.judge.prompts import Messages, abstain_messages

#: What the recording judge answers in place of a result (never used as a label).
_PLACEHOLDER_TEXT = "udcg-batch-request"


class _ReadOnlyCache(JudgeCache):
    """The judge cache, read as usual; nothing the cached judge stores is written."""

    def put_many(
        self, items: Mapping[str, Any] | Iterable[tuple[str, Any]], count: bool = True
    ) -> int:
        return 0


class _RecordingJudge(Judge):
    """Writes each call it is asked for as a request (:meth:`BatchRecorder.record`) and answers
    a placeholder (0.0, or a placeholder text for ``generate``); its run-time settings are the
    recorder's."""

    def __init__(self, recorder: BatchRecorder, name: str, fingerprint: str) -> None:
        self.recorder = recorder
        self.name = name
        self.fingerprint = fingerprint

    def key_settings(self, operation: str) -> dict[str, Any]:
        return dict(self.recorder.settings(operation))

    def abstain_prob(
        self, questions: Sequence[str], passages: Sequence[str], mode: AbstainMode = "first_token"
    ) -> np.ndarray:
        for q, p in zip(questions, passages, strict=True):
            self.recorder.record("abstain_prob", {"question": q, "passage": p, "mode": mode})
        return np.zeros(len(questions))

    def yes_prob(self, prompts: Sequence[Messages]) -> np.ndarray:
        for m in prompts:
            self.recorder.record("yes_prob", {"messages": list(m)})
        return np.zeros(len(prompts))

    def generate(self, prompts: Sequence[Messages], max_new_tokens: int = 64) -> list[str]:
        limit = int(max_new_tokens)
        for m in prompts:
            self.recorder.record("generate", {"messages": list(m), "max_new_tokens": limit})
        return [_PLACEHOLDER_TEXT] * len(prompts)


class BatchRecorder:
    """``judge`` is a cached judge with the fingerprint, name and run-time ``settings``
    (:meth:`~udcg.judge.base.Judge.key_settings`) of ``chat``'s judge over the cache at
    ``cache``: its hits are answered from the cache, and each distinct miss is written by
    ``writer`` as one request (custom_id: the key the cached judge stores its result under)
    instead of being computed; nothing is stored. ``counts`` holds the requests written per
    operation."""

    def __init__(
        self,
        name: str,
        fingerprint: str,
        chat: ChatSettings,
        writer: RequestWriter,
        cache: str | os.PathLike[str] | None = None,
        settings: Callable[[str], Mapping[str, Any]] = lambda operation: {},
    ) -> None:
        self.fingerprint = fingerprint
        self.settings = settings
        self.chat = chat
        self.writer = writer
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._written: set[str] = set()
        inner = _RecordingJudge(self, name, fingerprint)
        self.judge = CachedJudge(inner, _ReadOnlyCache(cache))

    def record(self, operation: str, args: dict[str, Any]) -> None:
        """Write one call as a request under its cache key; a key written before is skipped."""
        settings = dict(self.settings(operation))
        key = item_key(self.fingerprint, operation, args, settings)
        with self._lock:
            if key in self._written:
                return
            self._written.add(key)
            call = Call(key, self.fingerprint, operation, args, settings)
            self.writer.write(call, request_body(call, self.chat))
            self.counts[operation] += 1


class RefusingJudge(Judge):
    """A judge that computes nothing: asked for any item, it raises
    :class:`~udcg.errors.UDCGInputError` naming the first of ``contexts`` whose question the
    item's prompt holds (file and line when the contexts were read from a file). Its run-time
    ``settings`` are those of the judge it stands for."""

    def __init__(
        self,
        name: str,
        fingerprint: str,
        contexts: Sequence[Context],
        settings: Callable[[str], Mapping[str, Any]] = lambda operation: {},
    ) -> None:
        self.name = name
        self.fingerprint = fingerprint
        self.contexts = contexts
        self.settings = settings

    def key_settings(self, operation: str) -> dict[str, Any]:
        return dict(self.settings(operation))

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
