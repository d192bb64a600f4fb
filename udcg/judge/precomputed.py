"""Judge probabilities computed elsewhere (vLLM, an API with top log-probs, another tool).

A JSONL file, one line per (question, passage) pair, with at least one stored value:
``{"question": "...", "passage": "...", "abstain_prob": 0.03, "answer_prob": 0.41}``; each
value may be given as a natural-log probability instead (``"abstain_logprob"``,
``"answer_logprob"``). ``answer_prob`` is the pair's answer likelihood, already normalised as
:meth:`~udcg.judge.base.Judge.answer_prob` states (max over acceptable answers of the per-token
geometric mean); the answers passed at lookup time are checked, not used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sqlite3
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.files import PathType, open_text
from udcg.judge.base import Judge, OnResult
from udcg.judge.cache import SELECT_BATCH, default_cache_path
from udcg.judge.requests import Request, column
from udcg.judge.spec import precomputed_key

#: Stored values: probability field -> its log-probability alternative.
VALUES = {"abstain_prob": "abstain_logprob", "answer_prob": "answer_logprob"}


class PrecomputedJudge(Judge):
    """A judge that only looks up the abstention and answer probabilities it was given;
    ``name`` defaults to the file's name without ``.gz`` and ``.jsonl``.

    A file of up to :attr:`in_memory_bytes` (decompressed) is held in a dict; a larger one is
    looked up in an on-disk index (:class:`PrecomputedIndex`), built once per file content.
    """

    #: Largest file (decompressed bytes) held in memory.
    in_memory_bytes = 4 << 20

    def __init__(self, path: PathType, name: str | None = None) -> None:
        self.path = Path(path)
        self.name = name or precomputed_key(self.path)
        probs: dict[str, dict[tuple[str, str], float]] | None = {v: {} for v in VALUES}
        digest = hashlib.sha256()
        size = 0
        with open_text(self.path) as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                data = line.encode()
                digest.update(data)
                size += len(data)
                if probs is not None and size > self.in_memory_bytes:
                    probs = None  # too large: validated and indexed below
                if probs is not None:
                    for field, pair, prob in self._values(line, number):
                        probs[field][pair] = prob
        self.fingerprint = f"precomputed:{digest.hexdigest()}"
        self._probs = probs
        self._index = None
        if probs is None:
            self._index = PrecomputedIndex.open(self.path, digest.hexdigest(), self._all_values)
        elif not any(probs.values()):
            raise UDCGInputError("empty file: no precomputed probabilities", path=self.path)

    def _all_values(self) -> Iterator[tuple[str, tuple[str, str], float]]:
        """Every stored value of the file, checked, in file order."""
        with open_text(self.path) as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    yield from self._values(line, number)

    def _values(self, line: str, number: int) -> Iterator[tuple[str, tuple[str, str], float]]:
        """``(value field, (question, passage), probability)`` for each value of one line."""

        def fail(message: str, field: str | None = None) -> UDCGInputError:
            return UDCGInputError(message, path=self.path, line=number, field=field)

        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise fail(f"malformed JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise fail("expected a JSON object")
        for field in ("question", "passage"):
            if not isinstance(row.get(field), str):
                raise fail("missing or not a string", field)
        found = []
        for prob_field, log_field in VALUES.items():
            if prob_field in row:
                value, field = row[prob_field], prob_field
            elif log_field in row:
                value, field = row[log_field], log_field
            else:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
            ):
                raise fail(f"{value!r} is not a finite number", field)
            prob = math.exp(value) if field == log_field else float(value)
            if not 0.0 <= prob <= 1.0 or (field == log_field and value > 0):
                raise fail(f"{value!r} is not a probability", field)
            found.append((prob_field, (row["question"], row["passage"]), prob))
        if not found:
            names = " or ".join(f"{p} ({lp})" for p, lp in VALUES.items())
            raise fail(f"needs {names}", "abstain_prob")
        return iter(found)

    def _lookup(self, what: str, questions: Sequence[str], passages: Sequence[str]) -> np.ndarray:
        pairs = list(zip(questions, passages, strict=True))
        if self._probs is not None:
            stored = self._probs[what]
            values = [stored.get(pair) for pair in pairs]
        else:
            assert self._index is not None
            values = self._index.get(what, pairs)
        for pair, value in zip(pairs, values, strict=True):
            if value is None:
                raise UDCGInputError(
                    f"no precomputed {what} for question {pair[0][:60]!r} with passage "
                    f"{pair[1][:60]!r}",
                    path=self.path,
                )
        return np.asarray(values, dtype=np.float64).reshape(len(pairs))

    def compute(self, op: str, requests: list[Request], on_result: OnResult | None) -> Any:
        """The stored ``abstain_prob`` or ``answer_prob`` of each pair (answers are checked,
        not used); a pair not in the file is an error, and so is any other operation."""
        if op not in VALUES:
            raise UDCGInputError(
                f"the precomputed judge only provides stored probabilities, not {op}; "
                "use a model judge for this step",
                field="judge",
            )
        return self._lookup(op, column(requests, "question"), column(requests, "passage"))


class PrecomputedIndex:
    """The values of a precomputed file in an SQLite table keyed by a hash of (question,
    passage): ``$UDCG_CACHE_DIR/precomputed/SHA256.sqlite`` (beside the judge cache), named by
    the file's digest, built once (streamed into a temporary file renamed when complete) and
    read-only afterwards. A later line overrides an earlier one's value, as in the dict."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False
        )

    @classmethod
    def open(
        cls,
        source: Path,
        digest: str,
        values: Callable[[], Iterable[tuple[str, tuple[str, str], float]]],
    ) -> PrecomputedIndex:
        """The index of ``source`` (content ``digest``), built from ``values()`` if missing."""
        path = default_cache_path().parent / "precomputed" / f"{digest}.sqlite"
        if not path.exists():
            cls._build(path, values(), source)
        return cls(path)

    @staticmethod
    def _build(
        path: Path, values: Iterable[tuple[str, tuple[str, str], float]], source: Path
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            conn = sqlite3.connect(tmp, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode = OFF")
                conn.execute("PRAGMA synchronous = OFF")
                conn.execute(
                    "CREATE TABLE probs (key BLOB PRIMARY KEY, abstain_prob REAL, "
                    "answer_prob REAL) WITHOUT ROWID"
                )
                conn.execute("BEGIN")
                rows = 0
                for field, pair, prob in values:
                    conn.execute(
                        f"INSERT INTO probs (key, {field}) VALUES (?, ?) ON CONFLICT (key) "
                        f"DO UPDATE SET {field} = excluded.{field}",
                        (_pair_key(pair), prob),
                    )
                    rows += 1
                conn.execute("COMMIT")
            finally:
                conn.close()
            if rows == 0:
                raise UDCGInputError("empty file: no precomputed probabilities", path=source)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def get(self, what: str, pairs: Sequence[tuple[str, str]]) -> list[float | None]:
        """The stored ``what`` (a :data:`VALUES` field) of each pair, None where absent."""
        if what not in VALUES:
            raise ValueError(f"unknown value field {what!r}")
        keys = [_pair_key(pair) for pair in pairs]
        found: dict[bytes, float | None] = {}
        with self._lock:
            for start in range(0, len(keys), SELECT_BATCH):
                batch = keys[start : start + SELECT_BATCH]
                marks = ",".join("?" * len(batch))
                found.update(
                    self._conn.execute(
                        f"SELECT key, {what} FROM probs WHERE key IN ({marks})", batch
                    ).fetchall()
                )
        return [found.get(key) for key in keys]


def _pair_key(pair: tuple[str, str]) -> bytes:
    """16 bytes of BLAKE2b over the JSON of (question, passage)."""
    text = json.dumps(pair, ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
