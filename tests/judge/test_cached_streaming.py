"""CachedJudge over a streaming judge: results committed as they arrive, bounds kept, on_result
for hits and misses; over a judge that does not stream: chunked calls as before."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from tests.judge.test_openai_async import _abstain_reply, _p, _questions
from tests.judge.test_openai_backend import ScriptedServer, _chat_reply, _fast, _openai_logprobs
from udcg.judge.base import Judge, OnResult, judge_values, upper_bounds
from udcg.judge.cache import JudgeCache, cache_key
from udcg.judge.cached import CachedJudge
from udcg.judge.prompts import abstain_messages


def test_results_reach_the_cache_while_the_call_runs_and_a_rerun_asks_nothing(tmp_path):
    release = threading.Event()

    def reply(path, body, headers):
        if "Question: q9\n" in body["messages"][-1]["content"]:
            release.wait(10)  # the last item hangs until the test has looked at the cache
        return 200, {}, _abstain_reply(body)

    path = tmp_path / "judge.sqlite"
    questions, passages = _questions(10)
    with ScriptedServer(reply) as server:
        cached = CachedJudge(_fast(server.url, abstain_token="NO", timeout=20), path)
        assert cached.streams_results
        out: dict[str, Any] = {}
        call = threading.Thread(
            target=lambda: out.update(v=cached.abstain_prob(questions, passages))
        )
        call.start()
        try:
            reader = JudgeCache(path)
            deadline = time.monotonic() + 5
            while len(reader) < 10 and time.monotonic() < deadline:  # 9 values, the settings
                time.sleep(0.05)
            committed = len(reader)
            running = call.is_alive()
        finally:
            release.set()
            call.join()
        assert committed == 10 and running  # committed by the running call, before it returned
        np.testing.assert_allclose(out["v"], [0.01 * i + 0.001 for i in range(10)])
        asked = server.chat_requests()
        rerun = CachedJudge(_fast(server.url, abstain_token="NO"), path)
        np.testing.assert_array_equal(rerun.abstain_prob(questions, passages), out["v"])
        assert server.chat_requests() == asked and rerun.inner_calls == 0


def test_bound_flags_round_trip_and_plain_entries_read_as_exact(tmp_path):
    def reply(path, body, headers):
        top = {"Paris": math.log(0.6), "The": math.log(0.05)}
        if _p(body) > 0.03:  # q3 and up: the marker is among the top tokens
            top["NO"] = math.log(_p(body))
        return 200, {}, _chat_reply(logprobs=_openai_logprobs(top))

    path = tmp_path / "judge.sqlite"
    questions, passages = _questions(6)
    with ScriptedServer(reply) as server:
        with pytest.warns(UserWarning, match="upper_bound"):
            first = CachedJudge(_fast(server.url, abstain_token="NO"), path).abstain_prob(
                questions, passages
            )
        asked = server.chat_requests()
        again = CachedJudge(_fast(server.url, abstain_token="NO"), path)
        hits = again.abstain_prob(questions, passages)
        assert server.chat_requests() == asked
    mask = [True, True, True, False, False, False]
    assert upper_bounds(first).tolist() == upper_bounds(hits).tolist() == mask
    np.testing.assert_array_equal(hits, first)

    # An entry written before bounds were marked: a plain number under the same key.
    judge = _fast("http://127.0.0.1:9/v1", abstain_token="NO")  # never asked
    settings = {"mode": "first_token", **judge.key_settings("abstain_prob")}
    key = cache_key(judge.fingerprint, "abstain_prob", abstain_messages("q7", "old"), settings)
    JudgeCache(path).put_many({key: 0.25})
    old = CachedJudge(judge, path).abstain_prob(["q7"], ["old"])
    assert old.tolist() == [0.25] and upper_bounds(old).tolist() == [False]


class StreamingJudge(Judge):
    """P(abstain) = len(question) / 100, an upper bound when the question ends with '?';
    results are reported last item first."""

    name = fingerprint = "streaming-test"
    streams_results = True

    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    def abstain_prob(self, questions, passages, mode="first_token", *, on_result=None):
        self.asked.append(list(questions))
        values = [len(q) / 100 for q in questions]
        bounds = [q.endswith("?") for q in questions]
        for i in reversed(range(len(questions))):
            if on_result is not None:
                on_result(i, values[i], bounds[i])
        return judge_values(values, bounds)

    def yes_prob(self, prompts):
        raise NotImplementedError

    def generate(self, prompts, max_new_tokens=64):
        raise NotImplementedError


class ChunkedJudge(StreamingJudge):
    streams_results = False

    def abstain_prob(self, questions, passages, mode="first_token"):
        return super().abstain_prob(questions, passages, mode)


def _collect() -> tuple[list[tuple[int, float, bool]], OnResult]:
    seen: list[tuple[int, float, bool]] = []
    return seen, lambda i, value, bound: seen.append((i, value, bound))


def test_on_result_hears_hits_and_misses_once_per_index(tmp_path):
    inner = StreamingJudge()
    cached = CachedJudge(inner, tmp_path / "c.sqlite", chunk_size=2)
    cached.abstain_prob(["a", "bb?"], ["p", "p"])
    questions: Sequence[str] = ["bb?", "ccc", "a", "ccc", "dddd?"]  # 2 hits, a duplicate miss
    seen, on_result = _collect()
    values = cached.abstain_prob(questions, ["p"] * 5, on_result=on_result)
    assert inner.asked[-1] == ["ccc", "dddd?"]  # the misses in one call, no chunks
    assert sorted(seen) == [
        (0, 0.03, True),
        (1, 0.03, False),
        (2, 0.01, False),
        (3, 0.03, False),
        (4, 0.05, True),
    ]
    assert values.tolist() == [0.03, 0.03, 0.01, 0.03, 0.05]
    assert upper_bounds(values).tolist() == [True, False, False, False, True]


def test_a_judge_that_does_not_stream_is_called_by_chunks(tmp_path):
    inner = ChunkedJudge()
    cached = CachedJudge(inner, tmp_path / "c.sqlite", chunk_size=2)
    assert not cached.streams_results
    values = cached.abstain_prob(["a", "bb?", "ccc", "dddd", "e"], ["p"] * 5)
    assert inner.asked == [["a", "bb?"], ["ccc", "dddd"], ["e"]] and cached.inner_calls == 3
    assert upper_bounds(values).tolist() == [False, True, False, False, False]
    assert len(JudgeCache(tmp_path / "c.sqlite")) == 5


def test_open_judge_probes_the_server_only_when_the_cache_lacks_a_call(tmp_path):
    """A run the cache answers whole needs no server (as after ``udcg batch import``); the
    first miss probes it, and a server that does not answer is the probe's one-line error."""
    from udcg.errors import UDCGInputError
    from udcg.judge import open_judge

    path = tmp_path / "judge.sqlite"
    questions, passages = _questions(4)
    with ScriptedServer(lambda p, body, h: (200, {}, _abstain_reply(body))) as server:
        url = server.url
        expected = CachedJudge(_fast(url, abstain_token="NO"), path).abstain_prob(
            questions, passages
        )
    options = {"abstain_token": "NO", "max_retries": 0}
    judge = open_judge(f"openai:m@{url}", options=options, cache=path)  # server gone: no probe
    np.testing.assert_array_equal(judge.abstain_prob(questions, passages), expected)
    assert judge.inner_calls == 0
    with pytest.raises(UDCGInputError) as err:
        judge.abstain_prob(["q7"], ["passage 7"])
    assert str(err.value) == (
        f"field 'judge': the server at {url} does not answer (connection refused)"
    )
    assert judge.inner_calls == 0  # the probe stopped it before any request


def test_an_option_set_on_the_wrapper_reaches_the_wrapped_judge_and_its_keys(tmp_path):
    """``judge.scale = 0.5`` on what ``CachedJudge`` returns changes the wrapped judge, so the
    values and the keys follow it; the wrapper's own settings stay its own."""

    class Scaled(Judge):
        name = "scaled"

        def __init__(self) -> None:
            self.scale = 1.0

        @property
        def fingerprint(self) -> str:
            return f"scaled|{self.scale}"

        def abstain_prob(self, questions, passages, mode="first_token"):
            return np.full(len(questions), 0.25 * self.scale)

    judge = CachedJudge(Scaled(), tmp_path / "judge.sqlite")
    assert judge.abstain_prob(["q"], ["p"]).tolist() == [0.25]
    judge.scale = 0.5
    assert judge.inner.scale == 0.5 and "scale" not in vars(judge)
    assert judge.abstain_prob(["q"], ["p"]).tolist() == [0.125]
    judge.chunk_size = 3
    assert judge.chunk_size == 3 and not hasattr(judge.inner, "chunk_size")
    wrapped_twice = CachedJudge(judge, tmp_path / "outer.sqlite")
    assert wrapped_twice.inner_calls == 0 and judge.inner_calls == 2
