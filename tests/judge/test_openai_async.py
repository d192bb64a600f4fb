"""The OpenAI-compatible judge's request window, retries, streaming and structured output,
against loopback HTTP servers started by the tests (the harness of test_openai_backend.py)."""

from __future__ import annotations

import asyncio
import email.utils
import math
import pickle
import threading
import time
import warnings
from typing import Any

import numpy as np
import pytest

from tests.judge.test_openai_backend import (
    ScriptedServer,
    _chat_reply,
    _fast,
    _openai_logprobs,
    _user,
)
from tests.local_servers import servers
from udcg.judge.base import upper_bounds
from udcg.judge.openai_backend import JudgeServerError, OpenAIJudge
from udcg.judge.openai_http import JudgeHTTPClient


def _abstain_reply(body: dict[str, Any]) -> dict[str, Any]:
    """P(NO) = 0.01 * (number in the question) + 0.001, read from 'Question: q<number>'."""
    return _chat_reply(logprobs=_openai_logprobs({"NO": math.log(_p(body)), "Yes": math.log(0.1)}))


def _p(body: dict[str, Any]) -> float:
    text = body["messages"][-1]["content"]
    number = int(text.split("Question: q", 1)[1].split()[0])
    return 0.01 * (number % 90) + 0.001


def _questions(n: int) -> tuple[list[str], list[str]]:
    return [f"q{i}" for i in range(n)], [f"passage {i}" for i in range(n)]


class InFlight:
    """Counts the requests a server is handling; ``seen`` holds the count each request saw on
    arrival (itself included)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.seen: list[int] = []

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.seen.append(self.now)

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.now -= 1


def test_window_keeps_max_concurrency_in_flight_without_barrier():
    flight = InFlight()

    def reply(path, body, headers):
        with flight:  # the count drops before the reply is sent
            time.sleep(0.01 + 0.03 * (_p(body) * 100 % 7))  # uneven: 10 ms to 190 ms
        return 200, {}, _abstain_reply(body)

    with ScriptedServer(reply) as server:
        judge = _fast(server.url, max_concurrency=10, abstain_token="NO")
        questions, passages = _questions(100)
        values = judge.abstain_prob(questions, passages)
    assert max(flight.seen) == 10
    # After the first 10, each request starts as one ends: it finds the other 9 in flight
    # (fewer only while another reply is on its way). Chunks of 10 with a barrier would have
    # requests find 0..9 others, 4.5 on average (7 leaves room for a loaded machine).
    steady = flight.seen[10:90]
    assert sum(steady) / len(steady) >= 7.0, flight.seen
    np.testing.assert_allclose(values, [0.01 * (i % 90) + 0.001 for i in range(100)])


def test_429_with_retry_after_waits_as_asked():
    script = [(429, {"retry-after": "1"}, {"error": "slow down"})]

    def reply(path, body, headers):
        return script.pop(0) if script else (200, {}, _chat_reply("fine"))

    with ScriptedServer(reply) as server:
        judge = _fast(server.url, max_backoff=5.0)
        start = time.monotonic()
        assert judge.generate([_user("x")]) == ["fine"]
        assert time.monotonic() - start >= 1.0
        assert server.chat_requests() == 2 and judge.stats["retries"] == 1


def test_retry_after_is_capped_by_max_backoff():
    script = [(503, {"retry-after": "120"}, {})]

    def reply(path, body, headers):
        return script.pop(0) if script else (200, {}, _chat_reply("fine"))

    with ScriptedServer(reply) as server:
        start = time.monotonic()
        assert _fast(server.url, max_backoff=0.2).generate([_user("x")]) == ["fine"]
        assert time.monotonic() - start < 20.0  # far below the 120 s asked for


def test_retry_after_ms_and_http_dates_are_waited_for():
    def in_3s() -> str:  # dated when sent; whole seconds, so a wait of 2 to 3 s
        return email.utils.formatdate(time.time() + 3, usegmt=True)

    script = [
        lambda: (429, {"retry-after-ms": "400"}, {}),
        lambda: (503, {"retry-after": in_3s()}, {}),
    ]

    def reply(path, body, headers):
        return script.pop(0)() if script else (200, {}, _chat_reply("fine"))

    with ScriptedServer(reply) as server:
        start = time.monotonic()
        assert _fast(server.url, max_backoff=5.0).generate([_user("x")]) == ["fine"]
        assert time.monotonic() - start >= 2.3  # 0.4 s, then 2 to 3 s
        assert server.chat_requests() == 3


def test_waits_follow_retry_after_else_backoff_within_max_backoff():
    http = JudgeHTTPClient("m", backoff=0.5, max_backoff=10.0)
    assert http.wait(0, 2.5) == 2.5 and http.wait(3, 90.0) == 10.0 and http.wait(0, -30.0) == 0.0
    assert 0.25 <= http.wait(0, None) <= 0.75 and 1.0 <= http.wait(2, None) <= 3.0
    assert http.wait(9, None) == 10.0


def test_timeout_is_per_request_not_per_call():
    def reply(path, body, headers):
        time.sleep(2.0 if "slow" in json_text(body) else 0.15)
        return 200, {}, _chat_reply("ok")

    with ScriptedServer(reply) as server:
        # 12 requests of 0.15 s, 2 at a time: 0.9 s in all, each well within 0.5 s
        judge = _fast(server.url, max_concurrency=2, timeout=0.5, max_retries=0)
        assert judge.generate([_user(str(i)) for i in range(12)]) == ["ok"] * 12
        start = time.monotonic()
        with pytest.raises(JudgeServerError, match=r"after 1 attempt\(s\): timed out after 0.5 s"):
            judge.generate([_user("slow")])
        assert time.monotonic() - start < 1.5


def json_text(body: Any) -> str:
    return str(body.get("messages")) if isinstance(body, dict) else ""


def test_connection_refused_message():
    url = f"http://127.0.0.1:{servers.free_port()}/v1"  # nothing listens there
    with pytest.raises(JudgeServerError) as err:
        _fast(url, max_retries=0).generate([_user("x")])
    assert str(err.value) == (
        f"{url}/chat/completions: server unreachable or failing after 1 attempt(s): connection"
        " failed (ConnectError: [Errno 111] Connection refused)"
    )


def test_first_failure_cancels_the_rest():
    def reply(path, body, headers):
        if "bad" in json_text(body):
            return 400, {}, {"error": "bad request"}
        time.sleep(0.3)
        return 200, {}, _chat_reply("ok")

    with ScriptedServer(reply) as server:
        prompts = [_user("bad")] + [_user(str(i)) for i in range(200)]
        start = time.monotonic()
        with pytest.raises(JudgeServerError, match=r"HTTP 400: .*bad request"):
            _fast(server.url, max_concurrency=4).generate(prompts)
        assert time.monotonic() - start < 8.0  # all 200 would take 15 s
        time.sleep(0.4)  # the cancelled requests' handlers finish
        assert server.chat_requests() <= 8


def test_on_result_once_per_index_in_the_calling_thread():
    def reply(path, body, headers):
        if "Question:" not in json_text(body):
            return 200, {}, _chat_reply("hi")
        time.sleep(0.002 * (_p(body) * 1000 % 13))  # finish out of order
        return 200, {}, _abstain_reply(body)

    calls: list[tuple[int, float, bool, int]] = []
    with ScriptedServer(reply) as server:
        judge = _fast(server.url, max_concurrency=8, abstain_token="NO")
        assert judge.streams_results
        questions, passages = _questions(40)
        values = judge.abstain_prob(
            questions,
            passages,
            on_result=lambda i, v, b: calls.append((i, v, b, threading.get_ident())),
        )
        texts: dict[int, str] = {}
        generated = judge.generate(
            [_user(str(i)) for i in range(5)],
            on_result=lambda i, text, bound: texts.setdefault(i, text),
        )
    assert sorted(i for i, *_ in calls) == list(range(40))
    assert {thread for *_, thread in calls} == {threading.get_ident()}
    for i, value, bound, _ in calls:
        assert value == values[i] == pytest.approx(0.01 * i + 0.001) and bound is False
    assert [texts[i] for i in range(5)] == generated == ["hi"] * 5


def test_bounds_are_marked_and_warned_once_per_judge():
    def reply(path, body, headers):
        top = {"Paris": math.log(0.6), "The": math.log(0.05)}
        if _p(body) > 0.05:  # q5 and up: the marker is among the top tokens
            top["NO"] = math.log(_p(body))
        return 200, {}, _chat_reply(logprobs=_openai_logprobs(top))

    with ScriptedServer(reply) as server:
        judge = _fast(server.url, abstain_token="NO")
        questions, passages = _questions(8)
        with pytest.warns(UserWarning, match=r"upper_bound.*stats\['abstain_bound'\]") as caught:
            first = judge.abstain_prob(questions, passages)
            second = judge.abstain_prob(questions[:3], passages[:3])
    assert len([w for w in caught if "abstain_prob" in str(w.message)]) == 1
    expected_mask = [i < 5 for i in range(8)]
    assert upper_bounds(first).tolist() == expected_mask
    np.testing.assert_allclose(first[:5], 0.05)  # the smallest top-k probability
    np.testing.assert_allclose(first[5:], [0.051, 0.061, 0.071])
    assert upper_bounds(second).all() and judge.stats["abstain_bound"] == 8


def test_called_from_a_running_event_loop():
    with ScriptedServer(lambda p, body, h: (200, {}, _abstain_reply(body))) as server:
        judge = _fast(server.url, abstain_token="NO")
        questions, passages = _questions(6)

        async def notebook_cell() -> np.ndarray:
            return judge.abstain_prob(questions, passages)

        values = asyncio.run(notebook_cell())
    np.testing.assert_allclose(values, [0.01 * i + 0.001 for i in range(6)])


def test_pickled_judge_keeps_settings_and_works():
    with ScriptedServer(lambda p, body, h: (200, {}, _abstain_reply(body))) as server:
        judge = _fast(server.url, abstain_token="NO", max_concurrency=3)
        judge.abstain_prob(["q1"], ["p"])
        clone = pickle.loads(pickle.dumps(judge))
        assert clone.fingerprint == judge.fingerprint and clone.http.max_concurrency == 3
        assert clone.abstain_prob(["q2"], ["p"])[0] == pytest.approx(0.021)


def test_default_keeps_64_requests_in_flight():
    assert OpenAIJudge("m").http.max_concurrency == 64


# -- structured output --------------------------------------------------------------------------


def _json_server(accepts: bool):
    def reply(path, body, headers):
        if "response_format" in body and not accepts:
            return 400, {}, {"error": {"message": "'response_format' is not supported"}}
        return 200, {}, _chat_reply('Sure: {"answer": 42}')

    return reply


def test_structured_output_is_asked_and_dropped_when_refused():
    with ScriptedServer(_json_server(accepts=False)) as server:
        judge = _fast(server.url)
        prompts = [_user("a"), _user("b"), _user("c")]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = judge.generate_json(prompts)
        assert [r.value for r in out] == [{"answer": 42}] * 3
        asked = [body for _, body, _ in server.requests if "response_format" in body]
        assert 1 <= len(asked) <= 3 and asked[0]["response_format"] == {"type": "json_object"}
        before = len(server.requests)
        assert judge.generate_json([_user("d")])[0].value == {"answer": 42}
        assert len(server.requests) == before + 1  # asked without it right away
        assert "response_format" not in server.requests[-1][1]
        assert judge.stats["structured_output_refused"] == len(asked)


def test_structured_output_sends_the_schema_when_given():
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
    with ScriptedServer(_json_server(accepts=True)) as server:
        judge = _fast(server.url)
        out = judge.generate_json([_user("a")], schema=schema)
        assert out[0].value == {"answer": 42}
        sent = server.requests[-1][1]["response_format"]
        assert sent == {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
        judge.generate_json([_user("b")])
        assert server.requests[-1][1]["response_format"] == {"type": "json_object"}
        off = _fast(server.url, structured_output="off")
        assert off.generate_json([_user("c")])[0].value == {"answer": 42}
        assert "response_format" not in server.requests[-1][1]
        assert off.fingerprint == judge.fingerprint


def test_structured_output_option_is_checked():
    with pytest.raises(Exception, match="'auto' or 'off'") as err:
        OpenAIJudge("m", structured_output="json")
    assert err.value.field == "structured_output"
