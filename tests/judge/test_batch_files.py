"""Batch files: request lines, calls files and result lines, checked against hand computation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from udcg.errors import UDCGInputError
from udcg.judge.base import Judge, upper_bounds
from udcg.judge.batch_files import (
    Call,
    ChatSettings,
    ReplyError,
    RequestWriter,
    calls_path,
    read_batch,
    read_calls,
    read_results,
    reply_value,
    request_body,
)
from udcg.judge.cache import JudgeCache
from udcg.judge.cached import CachedJudge
from udcg.judge.requests import item_key


def _chat(top: dict[str, float] | None, content: str = "x") -> dict:
    logprobs = None
    if top is not None:
        entries = [{"token": t, "logprob": lp} for t, lp in top.items()]
        first = {**entries[0], "top_logprobs": entries}
        logprobs = {"content": [first]}
    return {"model": "m", "choices": [{"message": {"content": content}, "logprobs": logprobs}]}


def test_reply_values_as_hand_computed():
    top = {"Yes": math.log(0.6), " Yes": math.log(0.1), "No": math.log(0.2)}
    value, bound = reply_value("yes_prob", _chat(top), None, 20)
    assert value == pytest.approx(0.7 / 0.9, abs=1e-12) and not bound
    value, bound = reply_value("yes_prob", _chat({"Yes": -0.1, "Maybe": -2.5}), None, 20)
    no = 1 - math.exp(-0.1) - math.exp(-2.5)  # No unlisted: at most what the list leaves
    assert value == pytest.approx(math.exp(-0.1) / (math.exp(-0.1) + no), abs=1e-12) and bound
    value, bound = reply_value("abstain_prob", _chat({"NO": -0.7, "The": -1.0}), "NO", 20)
    assert value == pytest.approx(math.exp(-0.7), abs=1e-15) and not bound
    value, bound = reply_value("abstain_prob", _chat({"A": -0.2, "B": -4.0}), "NO", 20)
    assert value == pytest.approx(math.exp(-4.0), abs=1e-15) and bound
    assert reply_value("generate", _chat(None, " Paris."), None, 20) == (" Paris.", False)
    with pytest.raises(ReplyError, match="no log-probs"):
        reply_value("abstain_prob", _chat(None), "NO", 20)
    with pytest.raises(ReplyError, match="neither 'Yes' nor 'No'"):
        reply_value("yes_prob", _chat({"Maybe": -0.1}), None, 20)


def test_result_lines_report_each_problem_at_its_line(tmp_path):
    good = {"custom_id": "a", "response": {"status_code": 200, "body": _chat({"NO": -1.0})}}
    lines = [
        json.dumps(good),
        "",
        "[1, 2",
        json.dumps({"response": {}}),
        json.dumps({"custom_id": "b", "response": {"status_code": 429, "body": {"e": 1}}}),
        json.dumps({"custom_id": "c", "response": None, "error": {"message": "expired"}}),
        json.dumps({"custom_id": "d", "response": {"status_code": 200}}),
    ]
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join(lines) + "\n")
    results = list(read_results(path))
    assert [r.line for r in results] == [1, 3, 4, 5, 6, 7]
    assert [r.custom_id for r in results] == ["a", None, None, "b", "c", "d"]
    assert results[0].error is None and results[0].body == good["response"]["body"]
    errors = [r.error for r in results[1:]]
    for error, words in zip(
        errors,
        ["not valid JSON", "no 'custom_id'", "HTTP status 429", "expired", "without a 'body'"],
        strict=True,
    ):
        assert words in error


def _call(**args) -> Call:
    args = {"question": "Q?", "passage": "P.", "mode": "first_token", **args}
    return Call(item_key("fp", "abstain_prob", args), "fp", "abstain_prob", args)


def test_writer_splits_requests_and_calls_round_trip(tmp_path):
    chat = ChatSettings("m", {"seed": 3}, 5)
    calls = [_call(passage=f"P{i}.") for i in range(5)]
    with RequestWriter(tmp_path / "req.jsonl", max_lines=2) as writer:
        for call in calls:
            writer.write(call, request_body(call, chat))
    assert [p.name for p in writer.paths] == ["req-001.jsonl", "req-002.jsonl", "req-003.jsonl"]
    lines = [json.loads(x) for p in writer.paths for x in p.read_text().splitlines()]
    assert [len(p.read_text().splitlines()) for p in writer.paths] == [2, 2, 1]
    assert [x["custom_id"] for x in lines] == [c.custom_id for c in calls]
    body = lines[1]["body"]
    assert body["model"] == "m" and body["seed"] == 3 and body["top_logprobs"] == 5
    assert body["max_tokens"] == 1 and body["logprobs"] is True and body["temperature"] == 0
    assert "Document: P1.\nQuestion: Q?" in body["messages"][1]["content"]
    assert calls_path(tmp_path / "req.jsonl") == tmp_path / "req.calls.jsonl"
    assert list(read_calls(writer.calls, "fp", lambda op: {})) == calls
    with pytest.raises(UDCGInputError, match=r"req.calls.jsonl:1: field 'judge'"):
        list(read_calls(writer.calls, "other", lambda op: {}))
    with pytest.raises(UDCGInputError, match=r"req.calls.jsonl:1: field 'settings'"):
        list(read_calls(writer.calls, "fp", lambda op: {"abstain_token": "N"}))


class _NoCalls(Judge):
    """A judge with fingerprint "fp" that must not be asked anything."""

    name, fingerprint = "m", "fp"

    def abstain_prob(self, questions, passages, mode="first_token"):
        raise AssertionError("asked for abstain_prob")

    def yes_prob(self, prompts):
        raise AssertionError("asked for yes_prob")

    def generate(self, prompts, max_new_tokens=64):
        raise AssertionError("asked for generate")


def test_imported_results_are_cached_with_their_bounds(tmp_path):
    calls = {c.custom_id: c for c in (_call(passage="A."), _call(passage="B."))}
    first, second = calls
    lines = [
        {"custom_id": first, "response": {"status_code": 200, "body": _chat({"NO": -1.5})}},
        {"custom_id": second, "response": {"status_code": 200, "body": _chat({"X": -2.0})}},
    ]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    batch = read_batch([tmp_path / "r.jsonl"], calls, lambda: "NO", 20)
    assert batch.errors == [] and batch.duplicates == 0
    with JudgeCache(tmp_path / "c.sqlite") as cache:
        counts = cache.add_new({key: r.stored for key, r in batch.results.items()})
    assert (counts.added, counts.same, counts.conflicts) == (2, 0, 0)
    reread = CachedJudge(_NoCalls(), JudgeCache(tmp_path / "c.sqlite"))
    again = reread.abstain_prob(["Q?", "Q?"], ["A.", "B."])  # from the cache: nothing computed
    np.testing.assert_array_equal(again, [math.exp(-1.5), math.exp(-2.0)])
    np.testing.assert_array_equal(upper_bounds(again), [False, True])
