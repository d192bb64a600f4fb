"""Damaged, foreign and killed judge caches: one-line errors instead of tracebacks, values
checked where they enter (read and merge), every committed entry kept after kill -9 by a
checkpoint; and a fixed-seed sample of ``bench/fuzz_judge_files.py``'s cache target."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from tests.bench_scripts import load
from udcg.cli.main import main
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage, write_contexts
from udcg.judge.base import JSONResult, Judge
from udcg.judge.cache import JudgeCache, cache_key
from udcg.judge.prompts import abstain_messages

REPO = Path(__file__).resolve().parents[2]
JUDGE = ["--judge", "openai:m@http://127.0.0.1:9/v1", "--judge-option", "abstain_token=NO"]


def _one_error_line(capsys: pytest.CaptureFixture[str], prog: str) -> str:
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"{prog}: error: "), err
    return err[0]


def _sql(path: Path, *statements: str) -> Path:
    with sqlite3.connect(path) as conn:
        for statement in statements:
            conn.execute(statement)
    return path


def _cache_table(path: Path, rows: list[tuple[object, object, object]]) -> Path:
    """A file with the cache's table but no type or NOT NULL checks, holding ``rows``."""
    _sql(path, "CREATE TABLE judge_cache (key PRIMARY KEY, value, created) WITHOUT ROWID")
    with sqlite3.connect(path) as conn:
        conn.executemany("INSERT INTO judge_cache VALUES (?, ?, ?)", rows)
    return path


@pytest.mark.parametrize("kind", ["text file", "directory", "foreign sqlite", "old schema"])
def test_a_cache_option_naming_no_judge_cache_is_one_line(tmp_path, capsys, kind):
    contexts = tmp_path / "in.jsonl"
    write_contexts(contexts, [Context("q1", [Passage(text="A.")], question="Q?")])
    cache = tmp_path / "cache"
    if kind == "text file":
        cache.write_text("not a database\n" * 300)
    elif kind == "directory":
        cache.mkdir()
    elif kind == "foreign sqlite":
        _sql(cache, "CREATE TABLE notes (x)")
    else:
        _sql(cache, "CREATE TABLE judge_cache (key TEXT PRIMARY KEY, value TEXT)")
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = [
        "annotate",
        str(contexts),
        "-o",
        str(tmp_path / "out.jsonl"),
        *JUDGE,
        "--steps",
        "abstain",
    ]
    assert main([*argv, "--cache", str(cache)]) == 2
    line = _one_error_line(capsys, "udcg annotate")
    assert f"error: {cache}: " in line
    if kind == "foreign sqlite":  # its tables named, and no judge_cache table added to it
        assert "its tables: 'notes'" in line
        with sqlite3.connect(cache) as conn:
            assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("notes",)]
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_merge_and_stats_of_an_older_schema_are_one_line(tmp_path, capsys):
    old = _sql(
        tmp_path / "old.sqlite",
        "CREATE TABLE judge_cache (key TEXT PRIMARY KEY, value TEXT)",
        "INSERT INTO judge_cache VALUES ('k', '0.5')",
    )
    assert main(["cache", "merge", str(tmp_path / "out.sqlite"), str(old)]) == 2
    line = _one_error_line(capsys, "udcg cache merge")
    assert "judge_cache has the columns 'key', 'value', expected 'key', 'value', 'created'" in line
    assert not (tmp_path / "out.sqlite").exists()
    assert main(["cache", "stats", str(old)]) == 2
    _one_error_line(capsys, "udcg cache stats")


def test_merge_skips_and_counts_values_of_no_cached_form_then_stats_is_one_line(tmp_path, capsys):
    good = "a" * 64
    source = _cache_table(
        tmp_path / "in.sqlite",
        [
            (good, "0.25", 1.7e9),
            ("b" * 64, "7.5", 1.7e9),  # a probability out of range
            ("c" * 64, "not json", 1.7e9),
            ("d" * 64, "0.5", "yesterday"),  # a write time that is not a number
            ("e" * 64, '{"value": 0.5, "upper_bound": "yes"}', 1.7e9),
        ],
    )
    out = tmp_path / "out.sqlite"
    assert main(["cache", "merge", str(out), str(source)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"{source}: 1 added, 0 already there, 4 invalid entries skipped (not a cached value;"
        f" first: {'b' * 64})",
        f"{out}: 1 entries",
    ]
    with sqlite3.connect(out) as conn:
        assert conn.execute("SELECT key, value FROM judge_cache").fetchall() == [(good, "0.25")]
    for path in (out, source):  # the source's write times include a text: still one line
        assert main(["cache", "stats", str(path)]) == 0
        assert capsys.readouterr().out.startswith(f"{path}: ")


class FixedJudge(Judge):
    """Answers 0.25, "computed" and {"ok": true}; counts the items it is asked for."""

    name, fingerprint = "fixed", "fixed:v1"

    def __init__(self) -> None:
        self.asked = 0

    def abstain_prob(self, questions, passages, mode="first_token"):
        self.asked += len(questions)
        return np.full(len(questions), 0.25)

    def answer_prob(self, questions, passages, answers):
        self.asked += len(questions)
        return np.full(len(questions), 0.25)

    def yes_prob(self, prompts):
        self.asked += len(prompts)
        return np.full(len(prompts), 0.25)

    def generate(self, prompts, max_new_tokens=64):
        self.asked += len(prompts)
        return ["computed"] * len(prompts)

    def generate_json(self, prompts, validate=None, max_new_tokens=256, retries=2):
        self.asked += len(prompts)
        return [JSONResult(value={"ok": True}, raw=["{}"]) for _ in prompts]


MESSAGES = [{"role": "user", "content": "Is it?"}]
QUESTION, PASSAGE = "Q?", "P."


def _entry(operation: str) -> str:
    """The key :class:`CachedJudge` reads for the one item each call below asks for."""
    payloads = {
        "abstain_prob": (abstain_messages(QUESTION, PASSAGE), {"mode": "first_token"}),
        "answer_prob": (
            {"messages": abstain_messages(QUESTION, PASSAGE), "answers": ["x"]},
            {"normalisation": "max_over_answers(exp(mean_token_logprob))"},
        ),
        "yes_prob": (MESSAGES, {}),
        "generate": (MESSAGES, {"max_new_tokens": 64}),
        "generate_json": (
            MESSAGES,
            {"max_new_tokens": 256, "retries": 2, "validate": "none"},
        ),
    }
    payload, params = payloads[operation]
    return cache_key(FixedJudge.fingerprint, operation, payload, params)


CALLS = {
    "abstain_prob": lambda j: j.abstain_prob([QUESTION], [PASSAGE])[0],
    "answer_prob": lambda j: j.answer_prob([QUESTION], [PASSAGE], [["x"]])[0],
    "yes_prob": lambda j: j.yes_prob([MESSAGES])[0],
    "generate": lambda j: j.generate([MESSAGES])[0],
    "generate_json": lambda j: j.generate_json([MESSAGES])[0].value,
}
COMPUTED = {"generate": "computed", "generate_json": {"ok": True}}


@pytest.mark.parametrize(
    ("operation", "stored"),
    [
        ("abstain_prob", "7.5"),
        ("abstain_prob", "-0.5"),
        ("abstain_prob", "NaN"),
        ("abstain_prob", '"0.5"'),
        ("answer_prob", '{"value": 2, "upper_bound": true}'),
        ("yes_prob", "not json"),
        ("generate", "0.5"),
        ("generate_json", '{"value": 1, "attempts": "2", "raw": []}'),
    ],
)
def test_a_cached_value_not_of_its_operations_form_is_refused_naming_file_and_key(
    tmp_path, capsys, operation, stored
):
    from udcg.judge.cached import CachedJudge

    path = tmp_path / "c.sqlite"
    key = _entry(operation)
    with JudgeCache(path):  # the real schema
        pass
    _sql(path, f"INSERT INTO judge_cache VALUES ('{key}', '{stored}', 1.7e9)")
    inner = FixedJudge()
    with pytest.raises(UDCGInputError) as caught:
        CALLS[operation](CachedJudge(inner, JudgeCache(path)))
    message = str(caught.value)
    assert message.startswith(f"{path}: cache entry {key}: ")
    assert f"drop it with `udcg cache drop {path} {key}`" in message
    assert inner.asked == 0
    # the remedy: drop it, and the next run computes it again
    assert main(["cache", "drop", str(path), key]) == 0
    assert capsys.readouterr().out == f"{path}: dropped 1 of 1 keys\n"
    assert CALLS[operation](CachedJudge(inner, JudgeCache(path))) == COMPUTED.get(operation, 0.25)
    assert inner.asked == 1


def test_drop_bounds_deletes_the_upper_bounds_only(tmp_path, capsys) -> None:
    path = tmp_path / "c.sqlite"
    with JudgeCache(path):  # the real schema
        pass
    rows = {
        "a": '{"value": 0.25, "upper_bound": true}',  # a bound: asked again
        "b": '{"value": 0.25, "upper_bound": false}',
        "c": "0.5",
        "d": '"text mentioning upper_bound"',  # a generation
        "e": '{"value": {"upper_bound": true}, "attempts": 1, "raw": []}',  # a JSON result
    }
    for key, stored in rows.items():
        _sql(path, f"INSERT INTO judge_cache VALUES ('{key}', '{stored}', 1.7e9)")
    assert main(["cache", "drop", str(path), "c", "--bounds"]) == 0
    said = capsys.readouterr().out
    assert said == f"{path}: dropped 2 entries (1 keys named and every upper bound)\n"
    with sqlite3.connect(path) as conn:
        left = {key for (key,) in conn.execute("SELECT key FROM judge_cache")}
    assert left == {"b", "d", "e"}
    assert main(["cache", "drop", str(path)]) == 2  # nothing named: a user mistake
    assert "name the keys to drop, or give --bounds" in capsys.readouterr().err


_WRITER = """
import sys, time
from udcg.judge.cache import JudgeCache
cache = JudgeCache(sys.argv[1])
i = 0
while True:
    cache.put_many({f"k{i}-{j}": 0.5 for j in range(20)})
    i += 1
    print(i, flush=True)
    time.sleep(0.01)
"""


def _keys(path: Path) -> set[str]:
    with JudgeCache(path) as cache:
        return {k for (k,) in cache._connection().execute("SELECT key FROM judge_cache")}


def test_after_kill_9_a_checkpoint_puts_every_committed_entry_in_the_one_file(tmp_path, capsys):
    path = tmp_path / "judge.sqlite"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_WRITER), str(path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        committed, deadline = 0, time.monotonic() + 60
        while committed < 10:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            committed = int(line)
            assert time.monotonic() < deadline
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    expected = {f"k{i}-{j}" for i in range(committed) for j in range(20)}
    assert Path(f"{path}-wal").stat().st_size > 0  # the last entries live in the WAL

    alone = tmp_path / "copy" / "judge.sqlite"  # the recipe that loses them: FILE alone
    alone.parent.mkdir()
    shutil.copy(path, alone)
    assert not expected <= _keys(alone)

    merged = tmp_path / "merged.sqlite"  # merge reads the WAL that sits beside its input
    assert main(["cache", "merge", str(merged), str(path)]) == 0
    assert expected <= _keys(merged)

    assert main(["cache", "checkpoint", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith(f"all in {path}")
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    shutil.copy(path, alone)  # now FILE alone carries every committed entry
    for side in ("-wal", "-shm"):
        Path(f"{alone}{side}").unlink(missing_ok=True)
    assert expected <= _keys(alone)


def test_fuzzed_cache_files_end_in_a_result_or_one_line():
    fuzz = load("fuzz_judge_files")
    tally = fuzz.fuzz_cache(200, seed=7, limit=30.0, keep=1)
    assert not tally.examples, tally.examples
    assert tally.counts["input_error"] > 50 and tally.counts["ok"] > 10


def test_the_cache_entries_of_a_real_run_are_all_of_a_cached_form(tmp_path):
    fuzz = load("fuzz_judge_files")
    path = tmp_path / "t.sqlite"
    path.write_bytes(fuzz.template())
    with sqlite3.connect(path) as conn:
        values = [json.loads(v) for (v,) in conn.execute("SELECT value FROM judge_cache")]
    from udcg.judge.cache import is_entry

    assert len(values) == 36 and all(map(is_entry, values))
