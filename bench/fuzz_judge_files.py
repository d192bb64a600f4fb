"""Fuzz the judge's batch files (``udcg batch import``) and cache files (``JudgeCache``).

    python bench/fuzz_judge_files.py --per-target 10000
    python bench/fuzz_judge_files.py --per-target 500 --targets cache --seed 3

``batch``: each case writes a valid calls file and results file (abstain_prob, yes_prob and
generate calls of the judge ``openai:m@http://127.0.0.1:9/v1`` with ``abstain_token=NO``,
custom_ids their cache keys, results as a batch service writes them), then damages one or both
with the byte and JSON damage of ``bench/fuzz_readers.py`` or with edits aimed at the import's
checks (a custom_id moved to another call, a result line repeated with another value, a
result's custom_id changed), and runs ``udcg batch import`` on them (its ``main``, in this
process). Property: it returns 0, 1 or 2 (a UDCGInputError, one line) and never raises; when it
returns 2 the cache holds nothing; every key it stores is the cache key of a call line that is
also undamaged; an undamaged case returns 0.

``cache``: each case copies a real cache file (entries of every cached form, written by a
``CachedJudge``) and damages it: its bytes (flips, mostly in the header and the first pages,
truncation, inserted or deleted spans), its schema (foreign tables, other columns, a view, a
trigger, no table) or its values (not JSON, out of range, wrong form for the key, deep nesting,
blobs, non-numeric write times), sometimes with a damaged ``-wal`` beside it. Then it opens the
file (``JudgeCache``), reads every key, reads every item through a ``CachedJudge`` (which
computes the misses and stores them), asks ``summary``, ``len``, ``integrity_check`` and
``checkpoint``, and merges the file into a fresh cache. Property: each call returns or raises
:class:`~udcg.errors.UDCGInputError`, never another exception; the ``CachedJudge`` returns only
probabilities in [0, 1] and texts; an undamaged file raises nothing.

Every call runs under a time limit (``--time-limit`` seconds, SIGALRM); a call longer than that
is a hang. The table gives per target the cases tried and how they ended; the first details of
each failure kind follow. ``tests/faults/test_batch_faults.py`` and
``tests/faults/test_cache_faults.py`` run a small fixed-seed sample.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import io
import json
import math
import random
import shutil
import sqlite3
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from udcg.cli.batch import main as batch_main
from udcg.errors import UDCGInputError
from udcg.judge import load_judge
from udcg.judge.base import JSONResult, Judge
from udcg.judge.cache import JudgeCache, cache_key
from udcg.judge.cached import CachedJudge
from udcg.judge.requests import OPERATIONS, item_key


def _sibling(name: str) -> ModuleType:
    """``bench/NAME.py`` as the module ``NAME`` (the one already imported, if any)."""
    path = Path(__file__).resolve().with_name(f"{name}.py")
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "")).resolve() == path:
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


readers = _sibling("fuzz_readers")

SPEC = "openai:m@http://127.0.0.1:9/v1"
JUDGE_ARGS = ["--judge", SPEC, "--judge-option", "abstain_token=NO"]
#: How a case may end well: returned 0, returned 1 (lines with errors reported), refused (2).
PASSES = ("ok", "line_errors", "input_error")
FAILURES = ("valid_rejected", "stored_when_refused", "foreign_key", "bad_value", "other", "hang")


@cache
def judge() -> Judge:
    """The judge ``udcg batch import`` loads for :data:`JUDGE_ARGS` (never asked)."""
    return load_judge(SPEC, None, abstain_token="NO")


def fingerprint() -> str:
    """The fingerprint ``udcg batch import`` computes for :data:`JUDGE_ARGS`."""
    return judge().fingerprint


def settings_records() -> set[str]:
    """The keys under which an import records the judge's run-time settings."""
    return {cache_key(fingerprint(), "key_settings", op) for op in OPERATIONS}


@dataclass
class Outcome:
    """How one case ended: one of :data:`PASSES` or of :data:`FAILURES`."""

    kind: str
    detail: str = ""


# --------------------------------------------------------------------------------------------
# batch files

WORDS = ["Paris", "Rome", "é", "漢字", "", " ", "\n", "NO-RESPONSE", "Q?", "\u2028", "a" * 50]
TOKENS = ["NO", "Yes", "No", " Yes", " No", "The", "", "NO-RESPONSE"]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))


def _call_args(rng: random.Random, operation: str) -> dict[str, Any]:
    if operation == "abstain_prob":
        # a batch serves first-token values only (mode sequence is refused, as an edit)
        return {"question": _text(rng), "passage": _text(rng), "mode": "first_token"}
    messages = [{"role": "user", "content": _text(rng)}]
    if rng.random() < 0.3:
        messages.insert(0, {"role": "system", "content": _text(rng)})
    if operation == "yes_prob":
        return {"messages": messages}
    return {"messages": messages, "max_new_tokens": rng.choice([1, 8, 64])}


def _body(rng: random.Random, operation: str) -> dict[str, Any]:
    if operation == "generate":
        return {"model": "m", "choices": [{"message": {"content": _text(rng)}, "logprobs": None}]}
    tokens = rng.sample(TOKENS, rng.randint(1, 4))
    if operation == "yes_prob" and not {"Yes", "No", " Yes", " No"} & set(tokens):
        tokens.append("Yes")
    # a distribution: each of the n tokens at most 1/n
    top = [{"token": t, "logprob": math.log(rng.uniform(1e-4, 1) / len(tokens))} for t in tokens]
    first = {**top[0], "top_logprobs": top}
    content = {"content": tokens[0]}
    return {"model": "m", "choices": [{"message": content, "logprobs": {"content": [first]}}]}


def batch_files(rng: random.Random) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Valid call lines and result lines (one result per call, in another order)."""
    calls, results = [], []
    seen: set[str] = set()
    for _ in range(rng.randint(1, 6)):
        operation = rng.choice(["abstain_prob", "yes_prob", "generate"])
        args = _call_args(rng, operation)
        settings = judge().key_settings(operation)
        key = item_key(fingerprint(), operation, args, settings)
        if key in seen:
            continue
        seen.add(key)
        call = {"custom_id": key, "judge": fingerprint(), "operation": operation, "args": args}
        calls.append({**call, "settings": settings})
        response = {"status_code": 200, "request_id": "r", "body": _body(rng, operation)}
        results.append({"id": "b", "custom_id": key, "response": response, "error": None})
    rng.shuffle(results)
    return calls, results


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines).encode("utf-8")


def aimed_edit(
    rng: random.Random, calls: list[dict[str, Any]], results: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """An edit aimed at the import's checks, on copies of the lines."""
    calls, results = json.loads(json.dumps(calls)), json.loads(json.dumps(results))
    how = rng.choice(["move_id", "repeat_other", "repeat_same", "unknown_id", "other_judge"])
    if how == "move_id" and len(calls) > 1:
        i, j = rng.sample(range(len(calls)), 2)
        calls[i]["custom_id"] = calls[j]["custom_id"]
    elif how == "repeat_other":
        line = json.loads(json.dumps(rng.choice(results)))
        operation = next(c["operation"] for c in calls if c["custom_id"] == line["custom_id"])
        line["response"]["body"] = _body(rng, operation)
        results.insert(rng.randint(0, len(results)), line)
    elif how == "repeat_same":
        results.insert(rng.randint(0, len(results)), rng.choice(results))
    elif how == "unknown_id":
        rng.choice(results)["custom_id"] = hashlib.sha256(rng.randbytes(8)).hexdigest()
    elif how == "other_judge":
        rng.choice(calls)["judge"] = fingerprint().replace('"NO"', '"N"')
    return calls, results, how


@dataclass(frozen=True)
class BatchCase:
    """A calls file and a results file (bytes), the keys of the undamaged calls and what was
    done to them (empty: undamaged)."""

    calls: bytes
    results: bytes
    keys: frozenset[str]
    recipe: tuple[str, ...]


def batch_case(rng: random.Random) -> BatchCase:
    """Valid batch files, undamaged one time in ten, else damaged."""
    calls, results = batch_files(rng)
    keys = frozenset(c["custom_id"] for c in calls)
    if rng.random() < 0.1:
        return BatchCase(_jsonl(calls), _jsonl(results), keys, ())
    recipe = []
    if rng.random() < 0.35:
        calls, results, how = aimed_edit(rng, calls, results)
        recipe.append(how)
    files = {"calls": _jsonl(calls), "results": _jsonl(results)}
    if not recipe or rng.random() < 0.3:
        for name in sorted(set(rng.choices(list(files), k=rng.randint(1, 2)))):
            files[name], how = readers.mutate(rng, files[name])
            recipe.append(f"{name}: {how}")
    return BatchCase(files["calls"], files["results"], keys, tuple(recipe))


def _cache_rows(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return dict(conn.execute("SELECT key, value FROM judge_cache").fetchall())


def run_batch_case(case: BatchCase, folder: Path, limit: float) -> Outcome:
    """Write ``case`` into the empty ``folder``, run ``udcg batch import`` and classify."""
    (folder / "c.calls.jsonl").write_bytes(case.calls)
    (folder / "r.jsonl").write_bytes(case.results)
    db = folder / "cache.sqlite"
    argv = ["import", str(folder / "r.jsonl"), "--calls", str(folder / "c.calls.jsonl")]
    argv += [*JUDGE_ARGS, "--cache", str(db)]
    quiet = io.StringIO()
    try:
        with (
            readers.time_limit(limit),
            contextlib.redirect_stdout(quiet),
            contextlib.redirect_stderr(quiet),
        ):
            status = batch_main(argv)
    except readers.Hang:
        return Outcome("hang", f"longer than {limit} s")
    except BaseException:
        return Outcome("other", traceback.format_exc())
    stored = {k: v for k, v in _cache_rows(db).items() if k not in settings_records()}
    if status == 2 and stored:
        return Outcome("stored_when_refused", f"{len(stored)} entries; {quiet.getvalue()}")
    foreign = set(stored) - case.keys
    if foreign:
        return Outcome("foreign_key", f"stored under {sorted(foreign)[:3]}; {quiet.getvalue()}")
    if not case.recipe and status != 0:
        return Outcome("valid_rejected", quiet.getvalue())
    return Outcome({0: "ok", 1: "line_errors", 2: "input_error"}[status])


# --------------------------------------------------------------------------------------------
# cache files


class FuzzJudge(Judge):
    """A judge whose values are drawn from the inputs' hash (probabilities in (0, 1))."""

    name = "fuzz"
    fingerprint = "fuzz:v1"

    @staticmethod
    def _unit(*parts: Any) -> float:
        digest = hashlib.sha256(repr(parts).encode()).digest()
        return (int.from_bytes(digest[:4], "big") + 1) / (2**32 + 2)

    def abstain_prob(self, questions, passages, mode="first_token"):
        return np.array([self._unit(q, p, mode) for q, p in zip(questions, passages, strict=True)])

    def answer_prob(self, questions, passages, answers):
        items = zip(questions, passages, answers, strict=True)
        return np.array([self._unit(q, p, sorted(set(a))) for q, p, a in items])

    def yes_prob(self, prompts):
        return np.array([self._unit(m) for m in prompts])

    def generate(self, prompts, max_new_tokens=64):
        return [m[-1]["content"][::-1] for m in prompts]

    def generate_json(self, prompts, validate=None, max_new_tokens=256, retries=2, **_):
        return [JSONResult(value={"n": len(m[-1]["content"])}, raw=["{}"]) for m in prompts]


QUESTIONS = [f"question {i}?" for i in range(6)]
PASSAGES = [f"passage {i}." for i in range(6)]
PROMPTS = [[{"role": "user", "content": f"prompt {i}"}] for i in range(6)]
ANSWERS = [[f"answer {i}"] for i in range(6)]


def read_everything(judge: CachedJudge) -> list[Any]:
    """Every item of every operation through ``judge``; the values it returned."""
    values: list[Any] = []
    for mode in ("first_token", "sequence"):
        values += list(judge.abstain_prob(QUESTIONS, PASSAGES, mode))
    values += list(judge.answer_prob(QUESTIONS, PASSAGES, ANSWERS))
    values += list(judge.yes_prob(PROMPTS))
    values += judge.generate(PROMPTS, max_new_tokens=8)
    values += [r.value for r in judge.generate_json(PROMPTS, validate=None)]
    return values


def _value_problem(values: list[Any]) -> str | None:
    """What is wrong with values a cached judge returned (of :func:`read_everything`)."""
    numbers, texts = values[:24], values[24:30]
    for v in numbers:
        if not (isinstance(v, float) and 0.0 <= v <= 1.0):
            return f"probability {v!r}"
    if not all(isinstance(t, str) for t in texts):
        return f"texts {texts!r}"
    return None


@cache
def _template() -> tuple[bytes, tuple[str, ...]]:
    folder = Path(tempfile.mkdtemp(prefix="udcg-fuzz-template-"))
    try:
        with JudgeCache(folder / "t.sqlite") as store:
            read_everything(CachedJudge(FuzzJudge(), store))
        return (folder / "t.sqlite").read_bytes(), tuple(_cache_rows(folder / "t.sqlite"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def template() -> bytes:
    """A real cache file (checkpointed: no -wal) holding every item of every form."""
    return _template()[0]


def template_keys() -> tuple[str, ...]:
    """The keys of :func:`template`."""
    return _template()[1]


#: Stored values that are of no form, or of the wrong form for some keys.
BAD_VALUES: list[Any] = [
    *("7.5", "-0.1", "1.0000001", "NaN", "Infinity", "-Infinity", "1e999", "notjson", ""),
    *('{"value": 2}', '{"value": 0.5, "upper_bound": "yes"}', '{"value": "0.5"}', "[1]"),
    *("null", "true", '"text"', "0.5", '{"value": 1, "attempts": 0, "raw": []}', "{}"),
    *('{"value": NaN, "attempts": 1, "raw": []}', "[" * 100_000, '"\\ud800"', "\x00"),
    *(b"\x00\xff", b"0.\xb8", 3, 0.5, None),
]
BAD_CREATED: list[Any] = ["x", None, float("inf"), b"\x01", "2024-01-01"]
FOREIGN_SCHEMAS = [
    "CREATE TABLE judge_cache (key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE judge_cache (key, value, created, extra)",
    "CREATE TABLE judge_cache (k TEXT, v TEXT, c REAL)",
    "CREATE TABLE judge_cache (value TEXT, key TEXT, created REAL)",
    "CREATE TABLE judge_cache (key BLOB, value BLOB, created BLOB)",
    "CREATE TABLE other (x); CREATE VIEW judge_cache AS SELECT 1 AS key, 2 AS value, 3 AS created",
    "CREATE TABLE other (x)",
    "CREATE TABLE judge_cache (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL NOT NULL);"
    " CREATE TRIGGER no_insert BEFORE INSERT ON judge_cache BEGIN SELECT RAISE(ABORT, 'no'); END",
    "CREATE TABLE judge_cache (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL NOT NULL);"
    " CREATE TABLE more (y)",
    "",
]


def _flip_header(rng: random.Random, data: bytes) -> bytes:
    """Flip a byte in the 100-byte header or the first pages, where damage is seldom benign."""
    i = rng.randrange(min(len(data), rng.choice([100, 4096, 16384]))) if data else 0
    return data[:i] + bytes([data[i] ^ rng.randint(1, 255)]) + data[i + 1 :] if data else data


def _sql(path: Path, script: str, rows: list[tuple[Any, ...]] = ()) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.executescript(script)
        for row in rows:
            with contextlib.suppress(sqlite3.DatabaseError):
                conn.execute("INSERT INTO judge_cache VALUES (?, ?, ?)", row)
        conn.commit()


def damage_cache(rng: random.Random, folder: Path) -> tuple[str, ...]:
    """Write a damaged copy of :func:`template` as ``folder/c.sqlite``; returns the recipe."""
    path = folder / "c.sqlite"
    data = template()
    how = rng.choice(["bytes", "bytes", "schema", "values", "values", "wal"])
    if how == "bytes":
        steps = rng.choices(
            [_flip_header, _flip_header, readers.flip_byte, readers.truncate,
             readers.delete_span, readers.insert_bytes, readers.empty],
            k=rng.randint(1, 3),
        )  # fmt: skip
        for step in steps:
            data = step(rng, data)
        path.write_bytes(data)
        return tuple(f"bytes: {s.__name__}" for s in steps)
    path.write_bytes(data)
    if how == "schema":
        path.unlink()
        script = rng.choice(FOREIGN_SCHEMAS)
        rows = [("k" * 64, "0.5", 1.0), (rng.choice(["a", 1, b"b"]), "0.25", 2.0)]
        _sql(path, script, rows if "judge_cache (" in script else [])
        return (f"schema: {script[:60]}",)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        keys = [k for (k,) in conn.execute("SELECT key FROM judge_cache ORDER BY key")]
    picked = rng.sample(keys, rng.randint(1, 4))
    recipe = []
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        # a table without NOT NULL or type affinity, so any value can be written
        conn.executescript(
            "CREATE TABLE t AS SELECT * FROM judge_cache; DROP TABLE judge_cache;"
            " CREATE TABLE judge_cache (key PRIMARY KEY, value, created) WITHOUT ROWID;"
            " INSERT INTO judge_cache SELECT * FROM t; DROP TABLE t;"
        )
        for key in picked:
            if rng.random() < 0.75:
                value = rng.choice(BAD_VALUES)
                # bytes: a blob, or (cast) a text that is not UTF-8
                cast = "CAST(? AS TEXT)" if isinstance(value, bytes) and rng.random() < 0.5 else "?"
                conn.execute(f"UPDATE judge_cache SET value = {cast} WHERE key = ?", (value, key))
                recipe.append(f"value {cast} {value!r:.40}")
            else:
                created = rng.choice(BAD_CREATED)
                conn.execute("UPDATE judge_cache SET created = ? WHERE key = ?", (created, key))
                recipe.append(f"created {created!r}")
        conn.commit()
    if how == "wal":
        wal = folder / "c.sqlite-wal"
        wal.write_bytes(rng.choice([b"", rng.randbytes(rng.randint(1, 5000)), b"\x37\x7f\x06\x82"]))
        recipe.append("garbage -wal")
    return tuple(recipe)


@dataclass(frozen=True)
class CacheCase:
    """A seed for :func:`damage_cache` (None: the template undamaged)."""

    seed: int | None


def run_cache_case(case: CacheCase, folder: Path, limit: float) -> tuple[Outcome, tuple[str, ...]]:
    """Damage a cache file in ``folder`` as ``case`` says, run every reader on it, classify."""
    path = folder / "c.sqlite"
    if case.seed is None:
        path.write_bytes(template())
        recipe: tuple[str, ...] = ()
    else:
        recipe = damage_cache(random.Random(case.seed), folder)

    def open_read() -> None:
        with JudgeCache(path) as store:
            store.get_many(template_keys())
            values = read_everything(CachedJudge(FuzzJudge(), store))
        problem = _value_problem(values)
        if problem is not None:
            raise _BadValue(problem)

    def upkeep() -> None:
        with JudgeCache(path) as store:
            store.summary(), len(store), store.integrity_check(), store.checkpoint()

    def merge() -> None:
        with JudgeCache(folder / "dest.sqlite") as dest:
            dest.merge_from(path)

    calls: list[Callable[[], None]] = [open_read, upkeep, merge]
    errors = 0
    for call in calls:
        try:
            with readers.time_limit(limit):
                call()
        except readers.Hang:
            return Outcome("hang", f"{call.__name__}: longer than {limit} s"), recipe
        except UDCGInputError as exc:
            if not recipe:
                return Outcome("valid_rejected", f"{call.__name__}: {exc}"), recipe
            errors += 1
        except _BadValue as exc:
            return Outcome("bad_value", f"{call.__name__}: {exc}"), recipe
        except BaseException:
            return Outcome("other", f"{call.__name__}: {traceback.format_exc()}"), recipe
    return Outcome("input_error" if errors else "ok"), recipe


class _BadValue(Exception):
    """A cached judge returned a value that is not of its operation's form."""


# --------------------------------------------------------------------------------------------
# the bench


@contextlib.contextmanager
def scratch() -> Iterator[Callable[[], Path]]:
    """``fresh()`` gives an empty folder (the same one, cleared) for the next case."""
    with readers.scratch() as fresh:
        yield fresh


@dataclass
class Tally:
    """Outcomes of one target's cases, with the first few details of each failure kind."""

    counts: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0
    slowest: float = 0.0

    def add(self, outcome: Outcome, case: str, keep: int, seconds: float) -> None:
        self.counts[outcome.kind] += 1
        self.slowest = max(self.slowest, seconds)
        if outcome.kind in FAILURES:
            shown = self.examples.setdefault(outcome.kind, [])
            if len(shown) < keep:
                shown.append(f"{case}\n{outcome.detail}")


def fuzz_batch(n: int, seed: int, limit: float, keep: int = 3) -> Tally:
    """``n`` batch cases from ``seed``; case i draws from ``random.Random(f"{seed}:{i}")``."""
    tally = Tally()
    start = time.perf_counter()
    with scratch() as fresh:
        for i in range(n):
            case = batch_case(random.Random(f"{seed}:{i}"))
            began = time.perf_counter()
            outcome = run_batch_case(case, fresh(), limit)
            tally.add(outcome, f"case {seed}:{i} {case!r:.2000}", keep, time.perf_counter() - began)
    tally.seconds = time.perf_counter() - start
    return tally


def fuzz_cache(n: int, seed: int, limit: float, keep: int = 3) -> Tally:
    """``n`` cache cases from ``seed``: one undamaged in ten, else damaged."""
    tally = Tally()
    start = time.perf_counter()
    template()
    with scratch() as fresh:
        for i in range(n):
            rng = random.Random(f"{seed}:{i}")
            case = CacheCase(None if rng.random() < 0.1 else rng.getrandbits(64))
            began = time.perf_counter()
            outcome, recipe = run_cache_case(case, fresh(), limit)
            detail = f"case {seed}:{i} {case!r} recipe={recipe!r}"
            tally.add(outcome, detail, keep, time.perf_counter() - began)
    tally.seconds = time.perf_counter() - start
    return tally


TARGETS = {"batch": fuzz_batch, "cache": fuzz_cache}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-target", type=int, default=1000, help="cases per target")
    parser.add_argument("--targets", default=",".join(TARGETS), help="comma-separated names")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds per call")
    parser.add_argument("--show", type=int, default=3, help="details shown per failure kind")
    args = parser.parse_args(argv)
    names = args.targets.split(",")
    unknown = sorted(set(names) - set(TARGETS))
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)}; known: {', '.join(TARGETS)}")
    columns = ("tried", "ok", "exit 1", "UDCGInputError", *FAILURES, "seconds", "slowest case (s)")
    print("| target | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    tallies = {}
    for name in names:
        tally = tallies[name] = TARGETS[name](
            args.per_target, args.seed, args.time_limit, args.show
        )
        c = tally.counts
        row = [sum(c.values()), *(c[k] for k in PASSES), *(c[k] for k in FAILURES)]
        print(
            f"| {name} | " + " | ".join(map(str, row)) + f" | {tally.seconds:.0f} | "
            f"{tally.slowest:.2f} |",
            flush=True,
        )
    return readers.print_failures(tallies)


if __name__ == "__main__":
    sys.exit(main())
