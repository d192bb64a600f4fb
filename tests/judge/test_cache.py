"""The on-disk judge cache and the caching judge wrapper."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from udcg.errors import UDCGInputError
from udcg.judge.base import JSONResult, Judge
from udcg.judge.cache import JudgeCache, cache_key, default_cache_path
from udcg.judge.cached import CachedJudge
from udcg.judge.prompts import Messages

REPO = Path(__file__).resolve().parents[2]


def _python(script: str, *args: str) -> subprocess.Popen[str]:
    """A child Python process running ``script`` with the repository importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# -- keys ---------------------------------------------------------------------------------------


def test_cache_key_is_canonical_and_discriminating():
    messages = [{"role": "user", "content": "Is it? é"}]
    key = cache_key("fp", "yes_prob", messages, {"a": 1, "b": 2})
    assert key == cache_key(
        "fp", "yes_prob", [{"content": "Is it? é", "role": "user"}], {"b": 2, "a": 1}
    )
    assert len(key) == 64 and int(key, 16) >= 0
    others = {
        cache_key("fp2", "yes_prob", messages, {"a": 1, "b": 2}),
        cache_key("fp", "generate", messages, {"a": 1, "b": 2}),
        cache_key("fp", "yes_prob", [{"role": "user", "content": "Is it?"}], {"a": 1, "b": 2}),
        cache_key("fp", "yes_prob", messages, {"a": 1, "b": 3}),
        cache_key("fp", "yes_prob", messages, None),
    }
    assert key not in others and len(others) == 5


def test_default_location_follows_env(monkeypatch, tmp_path):
    # the real default, not the test-wide one under tmp_path (tests/conftest.py)
    monkeypatch.setattr("udcg.judge.cache.default_cache_path", default_cache_path)
    monkeypatch.setenv("UDCG_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_path() == tmp_path / "c" / "judge.sqlite"
    with JudgeCache() as cache:
        assert cache.path == tmp_path / "c" / "judge.sqlite"
        cache.put_many({"k": 1})
    assert (tmp_path / "c" / "judge.sqlite").is_file()
    monkeypatch.delenv("UDCG_CACHE_DIR")
    assert default_cache_path() == Path.home() / ".cache" / "udcg" / "judge.sqlite"


# -- the store ----------------------------------------------------------------------------------


def test_get_put_counters_and_persistence(tmp_path):
    path = tmp_path / "judge.sqlite"
    with JudgeCache(path) as cache:
        assert cache.get_many(["a", "b"]) == {}
        assert (cache.hits, cache.misses, cache.writes) == (0, 2, 0)
        values = {"a": 0.125, "b": "text", "c": {"value": [1, None, True], "attempts": 2}}
        assert cache.put_many(values) == 3
        assert cache.writes == 3
        assert cache.get_many(["a", "b", "c", "d", "a"]) == values
        assert (cache.hits, cache.misses) == (3, 3)  # distinct keys: a, b, c hit; d missed
        assert cache.put_many([]) == 0
        cache.put_many([("a", 0.5)])  # overwrite
        assert cache.get("a") == 0.5 and "a" in cache and "zz" not in cache
        assert len(cache) == 3
    with JudgeCache(path) as reopened:
        assert reopened.get_many(["a", "b", "c"]) == {**values, "a": 0.5}
        assert reopened.integrity_check()
        mode = reopened._connection().execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"


def test_floats_round_trip_exactly(tmp_path):
    values = {f"k{i}": float(x) for i, x in enumerate(np.random.default_rng(0).random(200))}
    values["tiny"] = 5e-324
    with JudgeCache(tmp_path / "j.sqlite") as cache:
        cache.put_many(values)
        assert cache.get_many(values) == values


def test_non_finite_or_unserialisable_values_are_refused_whole(tmp_path):
    with JudgeCache(tmp_path / "j.sqlite") as cache:
        with pytest.raises(ValueError, match="not storable"):
            cache.put_many({"ok": 1.0, "bad": math.nan})
        with pytest.raises(ValueError, match="not storable"):
            cache.put_many({"ok": 1.0, "bad": object()})
        assert len(cache) == 0 and cache.writes == 0


def test_many_keys_beyond_sqlite_variable_limit(tmp_path):
    with JudgeCache(tmp_path / "j.sqlite") as cache:
        cache.put_many({f"k{i}": i for i in range(2500)})
        got = cache.get_many(f"k{i}" for i in range(3000))
        assert len(got) == 2500 and got["k2499"] == 2499


_WRITER = """
    import sys
    from udcg.judge.cache import JudgeCache
    path, worker = sys.argv[1], int(sys.argv[2])
    cache = JudgeCache(path, timeout=60)
    # Overlapping key ranges: worker w writes keys w*100 .. w*100+299, in chunks of 20.
    keys = list(range(worker * 100, worker * 100 + 300))
    for start in range(0, len(keys), 20):
        chunk = keys[start:start + 20]
        cache.put_many({f"key{k}": {"k": k, "sq": k * k} for k in chunk})
        got = cache.get_many(f"key{k}" for k in chunk)
        assert all(got[f"key{k}"] == {"k": k, "sq": k * k} for k in chunk)
    print(cache.writes)
"""


def test_concurrent_writer_processes(tmp_path):
    path = tmp_path / "shared.sqlite"
    JudgeCache(path).close()
    procs = [_python(_WRITER, str(path), str(w)) for w in range(4)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert out.strip() == "300"
    with JudgeCache(path) as cache:
        assert cache.integrity_check()
        keys = [f"key{k}" for k in range(600)]
        got = cache.get_many(keys)
        assert len(cache) == 600 and len(got) == 600
        assert all(got[f"key{k}"] == {"k": k, "sq": k * k} for k in range(600))


_KILLED = """
    import sys
    from udcg.judge.cache import JudgeCache
    cache = JudgeCache(sys.argv[1])
    chunk, n = 50, 0
    while True:
        cache.put_many({f"c{n}-{i}": {"chunk": n, "i": i, "pad": "x" * 2000} for i in range(chunk)})
        n += 1
        print(n, flush=True)
"""


def test_sigkill_mid_run_keeps_committed_chunks(tmp_path):
    path = tmp_path / "killed.sqlite"
    proc = _python(_KILLED, str(path))
    try:
        deadline = time.monotonic() + 60
        committed = 0
        while committed < 5:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            committed = int(line)
            assert time.monotonic() < deadline
        time.sleep(0.05)  # let it get into the middle of further transactions
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    with JudgeCache(path) as cache:
        assert cache.integrity_check()
        total = len(cache)
        assert total >= 5 * 50 and total % 50 == 0  # whole chunks only
        rows = cache._connection().execute("SELECT key, value FROM judge_cache").fetchall()
        chunks = {}
        for key, _ in rows:
            n = int(key[1:].split("-")[0])
            chunks[n] = chunks.get(n, 0) + 1
        assert set(chunks.values()) == {50}
        assert sorted(chunks) == list(range(len(chunks)))  # a prefix of the run
        assert cache.get_many(["c0-0"])["c0-0"]["pad"] == "x" * 2000
        cache.put_many({"after": 1})  # still writable
        assert cache.get("after") == 1


# -- CachedJudge --------------------------------------------------------------------------------


class CountingJudge(Judge):
    """Deterministic outputs from the inputs' text; records every batch it is asked for."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.name = "counting"
        self.fingerprint = "counting:v1"
        self.calls: list[tuple[str, int]] = []
        self.fail_after = fail_after
        self.json_attempts: dict[str, int] = {}

    def _record(self, op: str, n: int) -> None:
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise RuntimeError("inner judge crashed")
        self.calls.append((op, n))

    @staticmethod
    def _score(text: str) -> float:
        return (sum(map(ord, text)) % 997) / 997.0 + 1e-3 / 3

    def abstain_prob(self, questions, passages, mode="first_token"):
        self._record(f"abstain:{mode}", len(questions))
        return np.array(
            [self._score(q + "|" + p + mode) for q, p in zip(questions, passages, strict=True)]
        )

    def answer_prob(self, questions, passages, answers):
        self._record("answer", len(questions))
        return np.array(
            [
                max(self._score(q + "|" + p + "|" + a) for a in options)
                for q, p, options in zip(questions, passages, answers, strict=True)
            ]
        )

    def yes_prob(self, prompts: Sequence[Messages]) -> np.ndarray:
        self._record("yes", len(prompts))
        return np.array([self._score(m[-1]["content"]) for m in prompts], dtype=np.float32)

    def generate(self, prompts, max_new_tokens=64):
        self._record("generate", len(prompts))
        return [m[-1]["content"][::-1][:max_new_tokens] for m in prompts]

    def generate_json(self, prompts, validate=None, max_new_tokens=256, retries=2):
        self._record("json", len(prompts))
        out = []
        for m in prompts:
            text = m[-1]["content"]
            self.json_attempts[text] = self.json_attempts.get(text, 0) + 1
            if text.startswith("bad"):
                out.append(JSONResult(error="no JSON object", attempts=retries + 1, raw=["oops"]))
            else:
                out.append(
                    JSONResult(value={"text": text, "n": len(text)}, raw=[f'{{"t":"{text}"}}'])
                )
        return out


def _msgs(texts):
    return [[{"role": "user", "content": t}] for t in texts]


def is_json_object(value):
    if not isinstance(value, dict):
        raise ValueError("not an object")


def test_cached_judge_matches_inner_and_computes_only_misses(tmp_path):
    inner, reference = CountingJudge(), CountingJudge()
    judge = CachedJudge(inner, JudgeCache(tmp_path / "j.sqlite"), chunk_size=3)
    assert (judge.name, judge.fingerprint) == (inner.name, inner.fingerprint)

    texts = [f"prompt {i}" for i in range(7)]
    first = judge.yes_prob(_msgs(texts))
    np.testing.assert_array_equal(first, reference.yes_prob(_msgs(texts)).astype(np.float64))
    assert inner.calls == [("yes", 3), ("yes", 3), ("yes", 1)]  # chunks of 3
    assert judge.cache.writes == 7

    inner.calls.clear()
    mixed = ["prompt 2", "new a", "prompt 5", "new a", "new b"]
    again = judge.yes_prob(_msgs(mixed))
    np.testing.assert_array_equal(again, reference.yes_prob(_msgs(mixed)).astype(np.float64))
    assert inner.calls == [("yes", 2)]  # only the distinct misses
    assert judge.yes_prob([]).shape == (0,)

    qs, ps = ["q1", "q2", "q1"], ["p1", "p2", "p1"]
    for mode in ("first_token", "sequence"):
        np.testing.assert_array_equal(
            judge.abstain_prob(qs, ps, mode=mode), reference.abstain_prob(qs, ps, mode)
        )
    inner.calls.clear()
    judge.abstain_prob(qs, ps, mode="sequence")
    judge.abstain_prob(["q2"], ["p1"])  # a new pair
    assert inner.calls == [("abstain:first_token", 1)]

    gen = judge.generate(_msgs(texts), max_new_tokens=4)
    assert gen == reference.generate(_msgs(texts), max_new_tokens=4)
    inner.calls.clear()
    assert judge.generate(_msgs(texts), max_new_tokens=4) == gen
    assert judge.generate(_msgs(texts[:1]), max_new_tokens=5) == reference.generate(
        _msgs(texts[:1]), 5
    )
    assert inner.calls == [("generate", 1)]  # max_new_tokens is part of the key

    # A fresh wrapper over a fresh inner judge reads everything from disk.
    fresh_inner = CountingJudge()
    fresh = CachedJudge(fresh_inner, tmp_path / "j.sqlite")
    np.testing.assert_array_equal(fresh.yes_prob(_msgs(texts)), first)
    assert fresh.generate(_msgs(texts), max_new_tokens=4) == gen
    assert fresh_inner.calls == []
    assert fresh.cache.hits == 14 and fresh.cache.misses == 0


def test_cached_answer_prob_keys_on_the_answer_set_and_normalisation(tmp_path, monkeypatch):
    inner, reference = CountingJudge(), CountingJudge()
    judge = CachedJudge(inner, JudgeCache(tmp_path / "j.sqlite"), chunk_size=2)
    qs, ps = ["q1", "q1", "q2", "q1"], ["p1", "p1", "p2", "p1"]
    answers = [["a", "b"], ["b", "a", "a"], ["c"], ["a"]]
    got = judge.answer_prob(qs, ps, answers)
    np.testing.assert_array_equal(got, reference.answer_prob(qs, ps, answers))
    # pairs 0 and 1 have the same answer set (order and repeats do not matter); 3 has another
    assert inner.calls == [("answer", 2), ("answer", 1)]
    inner.calls.clear()
    np.testing.assert_array_equal(judge.answer_prob(qs[::-1], ps[::-1], answers[::-1]), got[::-1])
    np.testing.assert_array_equal(
        judge.answer_prob(["q1"], ["p1"], [["b"]]),
        [reference.answer_prob(["q1"], ["p1"], [["b"]])[0]],
    )
    assert inner.calls == [("answer", 1)]  # only the new answer set
    # another normalisation is another key
    from udcg.judge import requests

    monkeypatch.setattr(requests, "ANSWER_NORMALISATION", "other")
    inner.calls.clear()
    judge.answer_prob(qs[:1], ps[:1], answers[:1])
    assert inner.calls == [("answer", 1)]
    with pytest.raises(UDCGInputError, match=r"answers\[0\]"):
        judge.answer_prob(["q"], ["p"], [[]])


def test_other_fingerprint_does_not_share_entries(tmp_path):
    cache = JudgeCache(tmp_path / "j.sqlite")
    CachedJudge(CountingJudge(), cache).yes_prob(_msgs(["x"]))
    other = CountingJudge()
    other.fingerprint = "counting:v2"
    CachedJudge(other, cache).yes_prob(_msgs(["x"]))
    assert other.calls == [("yes", 1)]


def test_a_value_another_writer_committed_meanwhile_is_kept_and_a_conflict_warned(tmp_path):
    """Two runs on one cache, a server whose values vary in the last digits: the first value
    committed stays (the cache only grows), and the run whose value differs says so."""
    from udcg.errors import UDCGWarning

    path = tmp_path / "j.sqlite"

    class Varying(Judge):
        name, fingerprint = "varying", "varying:v1"

        def __init__(self, value: float, meanwhile=None) -> None:
            self.value, self.meanwhile = value, meanwhile

        def abstain_prob(self, questions, passages, mode="first_token"):
            if self.meanwhile is not None:
                self.meanwhile()
            return np.full(len(questions), self.value)

    def other_run() -> None:
        with JudgeCache(path) as cache:
            CachedJudge(Varying(0.25), cache).abstain_prob(["q", "q2"], ["p", "p"])

    with (
        JudgeCache(path) as cache,
        pytest.warns(
            UDCGWarning, match="1 of the values this run.* another run \\(process or thread\\)"
        ),
    ):
        ours = CachedJudge(Varying(0.251, meanwhile=other_run), cache)
        ours.abstain_prob(["q", "q3"], ["p", "p"])
    with JudgeCache(path) as cache:
        rerun = CachedJudge(Varying(0.9), cache).abstain_prob(["q", "q2", "q3"], ["p"] * 3)
    assert rerun.tolist() == [0.25, 0.25, 0.251]


def test_crash_mid_run_resumes_from_committed_chunks(tmp_path):
    texts = [f"t{i}" for i in range(10)]
    crashing = CountingJudge(fail_after=2)  # the third chunk raises
    with pytest.raises(RuntimeError, match="crashed"):
        CachedJudge(crashing, tmp_path / "j.sqlite", chunk_size=4).yes_prob(_msgs(texts))
    resumed_inner = CountingJudge()
    resumed = CachedJudge(resumed_inner, tmp_path / "j.sqlite", chunk_size=4)
    values = resumed.yes_prob(_msgs(texts))
    assert resumed_inner.calls == [("yes", 2)]  # 8 of 10 were committed
    np.testing.assert_array_equal(values, CountingJudge().yes_prob(_msgs(texts)).astype(np.float64))


def test_non_finite_results_are_returned_but_not_cached(tmp_path):
    class NaNJudge(CountingJudge):
        def yes_prob(self, prompts):
            self._record("yes", len(prompts))
            return np.array([math.nan if "nan" in m[-1]["content"] else 0.5 for m in prompts])

    inner = NaNJudge()
    judge = CachedJudge(inner, tmp_path / "j.sqlite")
    out = judge.yes_prob(_msgs(["nan", "fine"]))
    assert math.isnan(out[0]) and out[1] == 0.5
    assert judge.uncached == 1 and judge.cache.writes == 1
    judge.yes_prob(_msgs(["nan", "fine"]))
    assert inner.calls == [("yes", 2), ("yes", 1)]


def test_generate_json_caches_successes_only(tmp_path):
    inner = CountingJudge()
    judge = CachedJudge(inner, tmp_path / "j.sqlite")
    prompts = _msgs(["good one", "bad one", "good two"])
    first = judge.generate_json(prompts, validate=is_json_object, max_new_tokens=32)
    assert [r.ok for r in first] == [True, False, True]
    assert first[0] == JSONResult(value={"text": "good one", "n": 8}, raw=['{"t":"good one"}'])
    second = judge.generate_json(prompts, validate=is_json_object, max_new_tokens=32)
    assert second == first
    assert inner.json_attempts == {"good one": 1, "bad one": 2, "good two": 1}  # failure retried
    # The validator and the options are part of the key.
    judge.generate_json(prompts[:1], validate=None, max_new_tokens=32)
    judge.generate_json(prompts[:1], validate=is_json_object, max_new_tokens=33)
    assert inner.json_attempts["good one"] == 3


def test_generate_json_with_unnamed_validator_is_not_cached(tmp_path):
    inner = CountingJudge()
    judge = CachedJudge(inner, tmp_path / "j.sqlite")
    unnamed = [lambda v: None, lambda v: None]  # both kept alive: distinct objects
    for validate in unnamed:  # each warned about once, neither cached
        with pytest.warns(UserWarning, match="not cached"):
            judge.generate_json(_msgs(["good"]), validate=validate)
    assert inner.json_attempts == {"good": 2} and judge.cache.writes == 0

    def named(value):
        return None

    named.cache_id = "my-validator-v1"
    judge.generate_json(_msgs(["good"]), validate=named)
    judge.generate_json(_msgs(["good"]), validate=named)
    assert inner.json_attempts == {"good": 3}


def test_wrong_result_count_from_inner_judge_is_an_error(tmp_path):
    class Short(CountingJudge):
        def generate(self, prompts, max_new_tokens=64):
            return ["only one"]

    with pytest.raises(RuntimeError, match="1 results for 2 inputs"):
        CachedJudge(Short(), tmp_path / "j.sqlite").generate(_msgs(["a", "b"]))
