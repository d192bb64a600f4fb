"""A judge that answers from the on-disk cache and asks the wrapped judge only for the misses.

Every operation looks up one key per item (see :func:`udcg.judge.cache.cache_key`: the judge's
fingerprint, the operation, the item's chat messages and the call's options), then computes the
missing items with the wrapped judge in batched calls of at most ``chunk_size`` items, committing
each chunk to the cache as soon as it is done: a run killed midway loses at most the chunk in
flight, and the next run computes only what is still missing. Identical items within one call are
computed once. Results come back in input order and are the values the wrapped judge returned
(floats round-trip exactly through JSON).

What is not cached:

* non-finite floats (a wrapped judge returning NaN or infinity is not trusted with the cache);
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

import math
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from udcg.judge.base import (
    ANSWER_NORMALISATION,
    AbstainMode,
    JSONResult,
    Judge,
    check_answer_inputs,
)
from udcg.judge.cache import JudgeCache, cache_key, canonical_json, finite_json
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


def _float_or_none(value: Any) -> float | None:
    number = float(value)
    return number if math.isfinite(number) else None


class CachedJudge(Judge):
    """Wraps any :class:`Judge`; same ``name`` and ``fingerprint``, same results, cached.

    ``cache`` is a :class:`JudgeCache`, a path to its SQLite file, or None for the default
    location. ``inner_calls`` counts the batched calls made to the wrapped judge and ``uncached``
    the computed results that were not stored (see the module docstring).
    """

    def __init__(
        self,
        judge: Judge,
        cache: JudgeCache | str | os.PathLike[str] | None = None,
        chunk_size: int = 64,
    ) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.inner = judge
        self.cache = cache if isinstance(cache, JudgeCache) else JudgeCache(cache)
        self.chunk_size = int(chunk_size)
        self.name = judge.name
        self.fingerprint = judge.fingerprint
        self.inner_calls = 0
        self.uncached = 0
        self._warned_validators: set[int] = set()

    def __repr__(self) -> str:
        return f"CachedJudge({self.inner!r}, cache={self.cache!r})"

    def __getattr__(self, attribute: str) -> Any:
        # Backend-specific attributes (e.g. an OpenAIJudge's ``stats``) stay reachable.
        if attribute == "inner":
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)

    def probe(self) -> None:
        self.inner.probe()

    # -- the shared lookup / compute / store loop ---------------------------------------------

    def _cached(
        self,
        operation: str,
        payloads: Sequence[Any],
        params: dict[str, Any],
        compute: Callable[[list[int]], Sequence[Any]],
        encode: Callable[[Any], Any],
        decode: Callable[[Any], Any],
    ) -> list[Any]:
        """Results for ``payloads``: decoded cache hits, else ``compute(indices)`` by chunks.

        ``encode`` turns a computed result into its cached JSON value, or None to not store it.
        """
        keys = [cache_key(self.fingerprint, operation, payload, params) for payload in payloads]
        found = self.cache.get_many(keys)
        results: list[Any] = [_MISSING] * len(keys)
        todo: dict[str, int] = {}
        for i, key in enumerate(keys):
            if key in found:
                results[i] = decode(found[key])
            elif key not in todo:
                todo[key] = i
        computed: dict[str, Any] = {}
        pending = list(todo.items())
        for start in range(0, len(pending), self.chunk_size):
            chunk = pending[start : start + self.chunk_size]
            indices = [i for _, i in chunk]
            self.inner_calls += 1
            out = list(compute(indices))
            if len(out) != len(indices):
                raise RuntimeError(
                    f"judge {self.name!r} returned {len(out)} results for {len(indices)} inputs"
                    f" ({operation})"
                )
            store: dict[str, Any] = {}
            for (key, _), result in zip(chunk, out, strict=True):
                computed[key] = result
                encoded = encode(result)
                if encoded is None:
                    self.uncached += 1
                else:
                    store[key] = encoded
            self.cache.put_many(store)
        for i, key in enumerate(keys):
            if results[i] is _MISSING:
                results[i] = computed[key]
        return results

    # -- operations ---------------------------------------------------------------------------

    def abstain_prob(
        self, questions: Sequence[str], passages: Sequence[str], mode: AbstainMode = "first_token"
    ) -> np.ndarray:
        questions, passages = list(questions), list(passages)
        if len(questions) != len(passages):
            raise ValueError(
                f"abstain_prob needs one passage per question, got {len(questions)} questions"
                f" and {len(passages)} passages"
            )
        payloads = [abstain_messages(q, p) for q, p in zip(questions, passages, strict=True)]

        def compute(indices: list[int]) -> np.ndarray:
            return np.asarray(
                self.inner.abstain_prob(
                    [questions[i] for i in indices], [passages[i] for i in indices], mode=mode
                ),
                dtype=np.float64,
            )

        values = self._cached(
            "abstain_prob", payloads, {"mode": mode}, compute, _float_or_none, float
        )
        return np.asarray(values, dtype=np.float64)

    def answer_prob(
        self,
        questions: Sequence[str],
        passages: Sequence[str],
        answers: Sequence[Sequence[str]],
    ) -> np.ndarray:
        """Cached per (abstention prompt, set of acceptable answers): the key holds the pair's
        messages and its distinct answers in sorted order (the max does not depend on their
        order), and the call's parameters name the normalisation."""
        questions, passages, answers = check_answer_inputs(questions, passages, answers)
        payloads = [
            {"messages": abstain_messages(q, p), "answers": sorted(set(a))}
            for q, p, a in zip(questions, passages, answers, strict=True)
        ]

        def compute(indices: list[int]) -> np.ndarray:
            return np.asarray(
                self.inner.answer_prob(
                    [questions[i] for i in indices],
                    [passages[i] for i in indices],
                    [answers[i] for i in indices],
                ),
                dtype=np.float64,
            )

        params = {"normalisation": ANSWER_NORMALISATION}
        values = self._cached("answer_prob", payloads, params, compute, _float_or_none, float)
        return np.asarray(values, dtype=np.float64)

    def yes_prob(self, prompts: Sequence[Messages]) -> np.ndarray:
        prompts = list(prompts)

        def compute(indices: list[int]) -> np.ndarray:
            return np.asarray(self.inner.yes_prob([prompts[i] for i in indices]), dtype=np.float64)

        values = self._cached("yes_prob", prompts, {}, compute, _float_or_none, float)
        return np.asarray(values, dtype=np.float64)

    def generate(self, prompts: Sequence[Messages], max_new_tokens: int = 64) -> list[str]:
        prompts = list(prompts)

        def compute(indices: list[int]) -> list[str]:
            out = self.inner.generate([prompts[i] for i in indices], max_new_tokens=max_new_tokens)
            for text in out:
                if not isinstance(text, str):
                    raise TypeError(
                        f"judge {self.name!r} generate() returned {type(text).__name__}, not str"
                    )
            return out

        return self._cached(
            "generate", prompts, {"max_new_tokens": int(max_new_tokens)}, compute, str, str
        )

    def generate_json(
        self,
        prompts: Sequence[Messages],
        validate: Any = None,
        max_new_tokens: int = 256,
        retries: int = 2,
    ) -> list[JSONResult]:
        prompts = list(prompts)
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
                prompts, validate, max_new_tokens=max_new_tokens, retries=retries
            )
            self.uncached += len(out)
            return out

        def compute(indices: list[int]) -> list[JSONResult]:
            return self.inner.generate_json(
                [prompts[i] for i in indices],
                validate,
                max_new_tokens=max_new_tokens,
                retries=retries,
            )

        def encode(result: JSONResult) -> dict[str, Any] | None:
            if not result.ok or not finite_json(result.value):
                return None
            stored = {"value": result.value, "attempts": result.attempts, "raw": list(result.raw)}
            try:
                canonical_json(stored)
            except (TypeError, ValueError):
                return None
            return stored

        def decode(stored: dict[str, Any]) -> JSONResult:
            return JSONResult(
                value=stored["value"], attempts=int(stored["attempts"]), raw=list(stored["raw"])
            )

        params = {
            "max_new_tokens": int(max_new_tokens),
            "retries": int(retries),
            "validate": validator,
        }
        return self._cached("generate_json", prompts, params, compute, encode, decode)
