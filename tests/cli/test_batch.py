"""``udcg batch export`` / ``import`` against the online path: the same requests, the same cache
keys, the same labels.

A scripted loopback server (replies computed from each request) checks that the request lines
are the bodies the online backend posts and that custom_ids are the keys the online cached judge
stores; the real proof runs the batch through llama-cpp-python's server (the session
``llama_server`` fixture) with the local batch runner ``bench/run_batch_file.py`` in a
subprocess, and compares with ``udcg annotate`` run online with a fresh cache.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.judge.test_openai_backend import ScriptedServer
from udcg.cli.annotate import main as annotate_main
from udcg.cli.batch import main as batch_main
from udcg.io.contexts.jsonl import Context, Passage, read_contexts, write_contexts
from udcg.judge.cache import JudgeCache, cache_key

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "bench" / "run_batch_file.py"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _top_logprobs(messages: list[dict[str, str]]) -> dict[str, float]:
    """Top first-token log-probs drawn from the prompt's hash, each below log(1/4) (they add up
    to less than 1); one prompt in three lacks the abstention token "NO" (its probability is
    then an upper bound)."""
    digest = hashlib.sha256(_canonical(messages).encode()).digest()
    top = {"Yes": -digest[1] / 64 - 1.4, "No": -digest[2] / 64 - 1.4, "The": -digest[3] / 32 - 1.41}
    if digest[0] % 3:
        top["NO"] = -digest[4] / 64 - 1.4
    return top


def _reply(body: dict[str, Any]) -> dict[str, Any]:
    """A chat completion computed from the request: log-probs when asked, else an answer
    ("Paris" when the prompt mentions France) or a grade."""
    messages = body["messages"]
    if body.get("logprobs"):
        top = _top_logprobs(messages)
        best = max(top, key=top.get)
        logprobs = {
            "content": [
                {
                    "token": best,
                    "logprob": top[best],
                    "top_logprobs": [{"token": t, "logprob": lp} for t, lp in top.items()],
                }
            ]
        }
        return {
            "model": body["model"],
            "choices": [{"message": {"content": best}, "logprobs": logprobs}],
        }
    user = messages[-1]["content"]
    if messages[0]["content"].startswith("Grade"):
        text = "CORRECT" if "Model answer: Paris" in user else "INCORRECT"
    else:
        text = " Paris." if "France" in user else "NO-RESPONSE"
    return {"model": body["model"], "choices": [{"message": {"content": text}, "logprobs": None}]}


class ChatServer(ScriptedServer):
    """Loopback OpenAI-compatible server answering with :func:`_reply`; ``bodies`` are the
    request bodies it received."""

    def __init__(self) -> None:
        super().__init__(self._answer)
        self.start()

    @staticmethod
    def _answer(path: str, body: Any, headers: dict[str, str]) -> Any:
        if body is None:
            return 200, {}, {"object": "list", "data": [{"id": "m"}]}
        return 200, {}, _reply(body)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [body for _, body, _ in self.requests if body is not None]


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    server = ChatServer()
    yield server
    server.close()


def _contexts(path: Path) -> None:
    paris = Passage(doc_id="a", text="Paris is the capital of France.")
    rome = Passage(doc_id="b", text="Rome is in Italy.")
    other = Passage(doc_id="c", text="Bread is baked.")
    france = "What is the capital of France?"
    write_contexts(
        path,
        [
            Context("q1", [paris, rome], question=france, answers=["Paris"]),
            Context("q2", [rome, other, paris], question="Where is Rome?", answers=["Italy"]),
            Context("q3", [other, rome], question=france, answers=["Paris"]),
        ],
    )


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _cache_keys(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {key for (key,) in conn.execute("SELECT key FROM judge_cache")}


def _run_batch(requests: Path, results: Path, base_url: str) -> None:
    """The local batch runner, in a subprocess, as a user runs it."""
    subprocess.run(
        [sys.executable, str(RUNNER), str(requests), str(results), "--base-url", base_url],
        check=True,
        capture_output=True,
        timeout=300,
    )


def _batch_round_trip(tmp_path: Path, judge: list[str], steps: list[str], base_url: str) -> Path:
    """export -> run -> import until nothing is left to export, then label from the cache;
    returns the labelled file. Checks that each round holds requests and the last none."""
    cache = ["--cache", str(tmp_path / "batch.sqlite")]
    contexts = str(tmp_path / "in.jsonl")
    imported: list[str] = []
    for round_ in range(1, 4):
        requests = tmp_path / f"round{round_}.jsonl"
        assert batch_main(["export", contexts, str(requests), *judge, *steps, *cache]) == 0
        if not _lines(requests):
            break
        results = tmp_path / f"results{round_}.jsonl"
        _run_batch(requests, results, base_url)
        imported = [str(results), "--calls", str(tmp_path / f"round{round_}.calls.jsonl")]
        assert batch_main(["import", *imported, *judge, *cache]) == 0
    assert round_ > 1 and not _lines(requests)  # every call is answered from the cache
    out = tmp_path / "batch_out.jsonl"
    label = ["--contexts", contexts, "--output", str(out)]
    assert batch_main(["import", *imported, *label, *judge, *steps, *cache]) == 0
    return out


STEPS = ["--steps", "abstain", "relevance", "outcomes", "--relevance", "llm", "--grader", "llm"]


@pytest.mark.filterwarnings("ignore:abstain_prob.*upper bound")
def test_batch_requests_are_the_online_bodies_and_keys_and_give_the_same_labels(
    chat_server, tmp_path, capsys
):
    _contexts(tmp_path / "in.jsonl")
    judge = [
        "--judge", f"openai:m@{chat_server.url}", "--judge-option", "abstain_token=NO",
        "--judge-option", 'extra_body={"seed": 7}', "--max-new-tokens", "8",
    ]  # fmt: skip
    online_cache = tmp_path / "online.sqlite"
    online = [str(tmp_path / "in.jsonl"), str(tmp_path / "online_out.jsonl")]
    assert annotate_main([*online, *judge, *STEPS, "--cache", str(online_cache)]) == 0
    online_bodies = sorted(map(_canonical, chat_server.bodies))
    chat_server.requests.clear()

    out = _batch_round_trip(tmp_path, judge, STEPS, chat_server.url)
    # 1 + 2: the answers first, their LLM grading once the answers are imported
    assert "the LLM grading of 3 answers waits for them" in capsys.readouterr().out
    requests = _lines(tmp_path / "round1.jsonl") + _lines(tmp_path / "round2.jsonl")
    assert {r["method"] for r in requests} == {"POST"}
    assert {r["url"] for r in requests} == {"/v1/chat/completions"}
    assert sorted(_canonical(r["body"]) for r in requests) == online_bodies
    assert sorted(map(_canonical, chat_server.bodies)) == online_bodies  # the runner sent them
    calls = [tmp_path / f"round{n}.calls.jsonl" for n in (1, 2)]
    records = {  # where a cached judge records its run-time settings, online and by import
        cache_key(c["judge"], "key_settings", c["operation"]) for p in calls for c in _lines(p)
    }
    assert {r["custom_id"] for r in requests} == _cache_keys(online_cache) - records
    assert _cache_keys(tmp_path / "batch.sqlite") == _cache_keys(online_cache)

    expected = [c.to_json() for c in read_contexts(tmp_path / "online_out.jsonl")]
    assert [c.to_json() for c in read_contexts(out)] == expected
    labels = [p.abstain_prob["m"] for c in read_contexts(out) for p in c.passages]
    assert len(set(labels)) > 2 and all(0 < v <= 1 for v in labels)
    bounded = [p.extra.get("bounds") for c in read_contexts(out) for p in c.passages]
    assert {"m": ["abstain_prob"]} in bounded and None in bounded  # bounds kept, as online

    # a contexts file the online run labelled: nothing left to export
    again = tmp_path / "again.jsonl"
    assert (
        batch_main(["export", online[0], str(again), *judge, *STEPS, "--cache", str(online_cache)])
        == 0
    )
    assert _lines(again) == [] and "wrote 0 requests" in capsys.readouterr().out


def test_split_files_hold_every_request_once(tmp_path, capsys):
    _contexts(tmp_path / "in.jsonl")
    judge = ["--judge", "openai:m@http://127.0.0.1:9/v1", "--judge-option", "abstain_token=NO"]
    args = ["export", str(tmp_path / "in.jsonl"), str(tmp_path / "req.jsonl"), *judge]
    cache = ["--cache", str(tmp_path / "c.sqlite"), "--steps", "abstain"]
    assert batch_main([*args, *cache, "--max-lines", "2"]) == 0
    parts = sorted(tmp_path.glob("req-*.jsonl"))
    assert [p.name for p in parts] == ["req-001.jsonl", "req-002.jsonl", "req-003.jsonl"]
    sizes = [len(_lines(p)) for p in parts]
    assert sizes == [2, 2, 2]  # 6 distinct (question, passage) pairs of 7 passages
    ids = [r["custom_id"] for p in parts for r in _lines(p)]
    calls = _lines(tmp_path / "req.calls.jsonl")
    assert len(set(ids)) == 6 and ids == [c["custom_id"] for c in calls]
    pairs = {(c.question, p.text) for c in read_contexts(tmp_path / "in.jsonl") for p in c.passages}
    assert {(c["args"]["question"], c["args"]["passage"]) for c in calls} == pairs


def _result(
    custom_id: str, top: dict[str, float] | None, status: int = 200, model: Any = "m"
) -> dict[str, Any]:
    logprobs = None
    if top is not None:
        entries = [{"token": t, "logprob": lp} for t, lp in top.items()]
        logprobs = {
            "content": [
                {
                    "token": entries[0]["token"],
                    "logprob": entries[0]["logprob"],
                    "top_logprobs": entries,
                }
            ]
        }
    body = {"model": model, "choices": [{"message": {"content": "x"}, "logprobs": logprobs}]}
    return {
        "id": "r",
        "custom_id": custom_id,
        "response": {"status_code": status, "body": body},
        "error": None,
    }


def test_import_reports_bad_lines_stores_the_good_ones_and_keeps_bounds(tmp_path, capsys):
    write_contexts(
        tmp_path / "in.jsonl",
        [Context("q1", [Passage(text=t) for t in ("A.", "B.", "C.")], question="Q?")],
    )
    judge = ["--judge", "openai:m@http://127.0.0.1:9/v1", "--judge-option", "abstain_token=NO"]
    cache = ["--cache", str(tmp_path / "c.sqlite")]
    steps = ["--steps", "abstain"]
    assert (
        batch_main(
            [
                "export",
                str(tmp_path / "in.jsonl"),
                str(tmp_path / "req.jsonl"),
                *judge,
                *steps,
                *cache,
            ]
        )
        == 0
    )
    first, second, third = (c["custom_id"] for c in _lines(tmp_path / "req.calls.jsonl"))
    error = {
        "id": "r",
        "custom_id": third,
        "response": None,
        "error": {"code": "x", "message": "boom"},
    }
    lines = [
        json.dumps(_result(first, {"NO": -0.5, "Yes": -1.25})),
        "{not json",
        json.dumps(_result(third, {"NO": -0.1}, status=500)),
        json.dumps(_result(third, None)),
        "",
        json.dumps(_result("f" * 64, {"NO": -0.2})),
        json.dumps(error),
        json.dumps(_result(second, {"A": -0.25, "B": -3.0})),  # NO not among the top: a bound
    ]
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join(lines) + "\n")
    calls = ["--calls", str(tmp_path / "req.calls.jsonl")]
    assert batch_main(["import", str(results), *calls, *judge, *cache]) == 1
    captured = capsys.readouterr()
    errors = [
        line for line in captured.err.splitlines() if line.startswith("udcg batch import: error:")
    ]
    assert [e.split(": ")[2].rsplit(":", 1)[1] for e in errors] == ["2", "3", "4", "6", "7"]
    assert "HTTP status 500" in errors[1] and "no log-probs" in errors[2]
    assert "in no calls file" in errors[3] and "boom" in errors[4]
    assert "imported 2 results (abstain_prob 2; 1 bounds)" in captured.out
    assert "5 lines with errors; 1 exported calls without a result" in captured.out
    stored = JudgeCache(tmp_path / "c.sqlite").get_many([first, second, third])
    assert stored == {first: math.exp(-0.5), second: {"value": math.exp(-3.0), "upper_bound": True}}

    # labelling from the cache names the context whose result is missing, and calls nobody
    out = ["--contexts", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out.jsonl")]
    assert batch_main(["import", str(results), *calls, *judge, *cache, *steps, *out]) == 2
    assert (
        "in.jsonl:1: context 'q1': no imported batch holds its abstain_prob result"
        in capsys.readouterr().err
    )
    assert not (tmp_path / "out.jsonl").exists()


def test_import_refuses_calls_of_another_judge_and_unknown_markers(tmp_path, capsys):
    write_contexts(tmp_path / "in.jsonl", [Context("q1", [Passage(text="A.")], question="Q?")])
    base = ["--judge", "openai:m@http://127.0.0.1:9/v1", "--cache", str(tmp_path / "c.sqlite")]
    export = [
        "export",
        str(tmp_path / "in.jsonl"),
        str(tmp_path / "req.jsonl"),
        "--steps",
        "abstain",
    ]
    assert batch_main([*export, *base]) == 2  # no abstain_token, and no server to ask
    assert "http://127.0.0.1:9/v1 does not answer" in capsys.readouterr().err
    no_tokenizer = ScriptedServer(lambda path, body, headers: (404, {}, {"error": path}))
    no_tokenizer.start()
    try:
        served = ["--judge", f"openai:m@{no_tokenizer.url}", *base[2:]]
        assert batch_main([*export, *served]) == 2  # a server without a tokenizer endpoint
    finally:
        no_tokenizer.close()
    err = capsys.readouterr().err
    assert "field 'abstain_token': the first token of NO-RESPONSE is unknown" in err
    assert batch_main([*export, *base, "--judge-option", "abstain_token=NO"]) == 0
    (tmp_path / "results.jsonl").write_text("")
    other = [
        "import",
        str(tmp_path / "results.jsonl"),
        "--calls",
        str(tmp_path / "req.calls.jsonl"),
    ]
    assert batch_main([*other, *base, "--judge-option", "abstain_token=N"]) == 2
    assert "req.calls.jsonl:1: field 'judge': exported for judge" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:abstain_prob.*upper bound")
@pytest.mark.filterwarnings("ignore:yes_prob.*upper bound")
def test_batch_through_a_local_model_equals_the_online_annotate(llama_server, tmp_path):
    paris, rome = Passage(text="Paris is the capital of France."), Passage(text="Rome.")
    write_contexts(
        tmp_path / "in.jsonl",
        [
            Context("q1", [paris, rome], question="Capital of France?", answers=["Paris"]),
            Context("q2", [paris], question="Where is Paris?", answers=["France"]),
        ],
    )
    judge = ["--judge", f"openai:smollm2@{llama_server}", "--max-new-tokens", "4"]
    online = [str(tmp_path / "in.jsonl"), str(tmp_path / "online_out.jsonl")]
    assert annotate_main([*online, *judge, *STEPS, "--cache", str(tmp_path / "online.sqlite")]) == 0
    out = _batch_round_trip(tmp_path, judge, STEPS, llama_server)
    batch = list(read_contexts(out))
    assert [c.to_json() for c in batch] == [c.to_json() for c in read_contexts(online[1])]
    assert all(
        "correct" in c.outcomes["smollm2"] or c.outcomes["smollm2"]["grade"] == "FAILED"
        for c in batch
    )
