"""``udcg batch import|export`` against results that do not answer the export, imports one by
one, a busy or unwritable output and requests file names: each refused in one line, nothing
stored by a refused import, the same cache whatever the order of the imports."""

from __future__ import annotations

import fcntl
import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.judge.test_openai_backend import ScriptedServer
from udcg.cli.annotate import main as annotate_main
from udcg.cli.batch import main as batch_main
from udcg.io.contexts.jsonl import Context, Passage, read_contexts, write_contexts

SERVER = "openai:m@http://127.0.0.1:9/v1"
JUDGE = ["--judge", SERVER, "--judge-option", "abstain_token=NO"]
STEPS = ["--steps", "abstain,outcomes", "--max-new-tokens", "8"]


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _values(cache: Path, keys: list[str]) -> dict[str, Any]:
    """The cached values of ``keys`` (the other entries record the judge's settings)."""
    if not cache.exists():
        return {}
    with sqlite3.connect(cache) as conn:
        rows = conn.execute("SELECT key, value FROM judge_cache").fetchall()
    return {key: json.loads(value) for key, value in rows if key in keys}


def _line(custom_id: str, body: dict[str, Any], status: Any = 200) -> str:
    response = {"status_code": status, "request_id": "r", "body": body}
    return json.dumps({"id": "b", "custom_id": custom_id, "response": response, "error": None})


def _first_token(logprob: float, model: str = "m") -> dict[str, Any]:
    top = [{"token": "NO", "logprob": logprob}, {"token": "Yes", "logprob": -5.0}]
    logprobs = {"content": [{**top[0], "top_logprobs": top}]}
    choice = {"message": {"role": "assistant", "content": "NO"}, "logprobs": logprobs}
    return {"model": model, "choices": [choice]}


def _generation(text: str, tokens: int, model: str = "m") -> dict[str, Any]:
    choice = {"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    return {"model": model, "choices": [choice], "usage": {"completion_tokens": tokens}}


@pytest.fixture
def exported(tmp_path: Path) -> dict[str, Any]:
    """One context with two passages, its abstain_prob and generate calls exported for
    :data:`JUDGE`: the calls file, the ids of each operation, the cache option."""
    passages = [Passage(text="Paris is in France."), Passage(text="Rome.")]
    contexts = [Context("q1", passages, question="Capital of France?", answers=["Paris"])]
    write_contexts(tmp_path / "in.jsonl", contexts)
    cache = ["--cache", str(tmp_path / "c.sqlite")]
    argv = ["export", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "req.jsonl")]
    assert batch_main([*argv, *JUDGE, *STEPS, *cache]) == 0
    calls = _lines(tmp_path / "req.calls.jsonl")
    ids = {
        op: [c["custom_id"] for c in calls if c["operation"] == op]
        for op in ("abstain_prob", "generate")
    }
    return {"calls": tmp_path / "req.calls.jsonl", "ids": ids, "cache": cache}


def _import(
    tmp_path: Path, exported: dict[str, Any], name: str, lines: list[str], *more: str
) -> int:
    (tmp_path / name).write_text("".join(line + "\n" for line in lines))
    argv = ["import", str(tmp_path / name), "--calls", str(exported["calls"])]
    return batch_main([*argv, *JUDGE, *exported["cache"], *more])


@pytest.mark.parametrize("order", [("r1", "r2"), ("r2", "r1")])
def test_results_that_disagree_with_the_cache_are_refused_whatever_the_order(
    tmp_path, exported, capsys, order
):
    a, b = exported["ids"]["abstain_prob"]
    same = _line(b, _first_token(math.log(0.1)))  # 0.1 after a float round trip
    files = {"r1": [_line(a, _first_token(-0.5)), same], "r2": [same, _line(a, _first_token(-2.0))]}
    first, second = order
    assert _import(tmp_path, exported, f"{first}.jsonl", files[first]) == 0
    assert _import(tmp_path, exported, f"{first}.jsonl", files[first]) == 0  # the same again
    assert "(0 new, 2 already there)" in capsys.readouterr().out
    stored = _values(tmp_path / "c.sqlite", [a, b])
    assert _import(tmp_path, exported, f"{second}.jsonl", files[second]) == 2
    err = capsys.readouterr().err.splitlines()
    line = 2 if second == "r2" else 1
    assert len(err) == 1 and f"{second}.jsonl:{line}: custom_id {a}: another result" in err[0]
    assert f"the cache {tmp_path / 'c.sqlite'} holds" in err[0] and "udcg cache drop" in err[0]
    assert _values(tmp_path / "c.sqlite", [a, b]) == stored  # nothing stored, nothing replaced


def test_a_conflict_written_after_the_first_read_still_stores_nothing(
    tmp_path, exported, capsys, monkeypatch
):
    """Another writer commits a different value for a key between the import's first read of
    the cache and its write: the check inside the write transaction refuses it (exit 2),
    nothing stored, rather than a summary that counts it and exit 0."""
    from udcg.judge.cache import JudgeCache

    a, b = exported["ids"]["abstain_prob"]
    with JudgeCache(tmp_path / "c.sqlite") as other:
        other.put_many({a: 0.25})
    monkeypatch.setattr(JudgeCache, "get_many", lambda self, keys, count=True: {})  # stale
    lines = [_line(a, _first_token(-0.5)), _line(b, _first_token(-1.0))]
    assert _import(tmp_path, exported, "r.jsonl", lines) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"custom_id {a}: another result" in err[0], err
    assert _values(tmp_path / "c.sqlite", [a, b]) == {a: 0.25}


def test_sequence_mode_calls_are_refused(tmp_path, exported, capsys):
    """A chat reply holds the first token's log-probs: it cannot answer a call of mode
    sequence, whose value would be stored under the sequence key."""
    calls = _lines(exported["calls"])
    changed = []
    for call in calls:
        if call["operation"] == "abstain_prob":
            call["args"]["mode"] = "sequence"
        changed.append(json.dumps(call))
    exported["calls"].write_text("".join(line + "\n" for line in changed))
    a, _ = exported["ids"]["abstain_prob"]
    assert _import(tmp_path, exported, "r.jsonl", [_line(a, _first_token(-0.5))]) == 2
    err = capsys.readouterr().err
    assert "mode must be first_token, not 'sequence'" in err, err
    assert _values(tmp_path / "c.sqlite", [a]) == {}


def test_a_reply_of_another_model_or_longer_than_allowed_is_a_line_error(
    tmp_path, exported, capsys
):
    a, b = exported["ids"]["abstain_prob"]
    (g,) = exported["ids"]["generate"]
    lines = [
        _line(a, _first_token(-0.5, model="gpt-4o-totally-other")),
        _line(b, _first_token(-1.0, model="m-2024-07-18")),  # a dated name of m
        _line(g, _generation("Paris " * 9, tokens=9)),  # max_tokens 8
    ]
    assert _import(tmp_path, exported, "r.jsonl", lines) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2
    assert "r.jsonl:1:" in err[0] and 'of model "gpt-4o-totally-other"' in err[0]
    assert "r.jsonl:3:" in err[1] and "generated 9 tokens" in err[1] and "8" in err[1]
    assert _values(tmp_path / "c.sqlite", [a, b, g]) == {b: math.exp(-1.0)}
    lines = [_line(g, _generation(" Paris.", tokens=8, model="m"))]
    assert _import(tmp_path, exported, "r2.jsonl", lines) == 0
    assert _values(tmp_path / "c.sqlite", [g]) == {g: " Paris."}


def test_a_string_status_is_named_and_missing_results_count_the_cache(tmp_path, exported, capsys):
    a, b = exported["ids"]["abstain_prob"]
    (g,) = exported["ids"]["generate"]
    assert _import(tmp_path, exported, "s.jsonl", [_line(a, _first_token(-0.5), "200")]) == 1
    err = capsys.readouterr().err
    assert "'status_code' \"200\" is not an integer" in err and "HTTP status" not in err
    assert _import(tmp_path, exported, "r1.jsonl", [_line(a, _first_token(-0.5))]) == 0
    assert "2 exported calls without a result" in capsys.readouterr().out
    lines = [_line(b, _first_token(-1.0)), _line(g, _generation(" Paris.", 2))]
    assert _import(tmp_path, exported, "r2.jsonl", lines) == 0
    assert "0 exported calls without a result" in capsys.readouterr().out


def test_a_busy_or_unwritable_output_is_refused_before_anything_is_stored(
    tmp_path, exported, capsys
):
    a, b = exported["ids"]["abstain_prob"]
    lines = [_line(a, _first_token(-0.5)), _line(b, _first_token(-1.0))]
    label = ["--contexts", str(tmp_path / "in.jsonl"), "--steps", "abstain"]
    out = tmp_path / "out.jsonl"
    with open(f"{out}.lock", "a") as held:  # another process's lock
        fcntl.flock(held, fcntl.LOCK_EX)
        assert _import(tmp_path, exported, "r.jsonl", lines, *label, "-o", str(out)) == 2
        assert "another process is writing" in capsys.readouterr().err
        assert _values(tmp_path / "c.sqlite", [a, b]) == {}
        export = ["export", str(tmp_path / "missing.jsonl"), "-o", str(out), *JUDGE]
        assert batch_main(export) == 2  # the lock is asked for before the input is read
        assert "another process is writing" in capsys.readouterr().err
    unwritable = tmp_path / "r.jsonl" / "out.jsonl"  # beside a file, not in a folder
    assert _import(tmp_path, exported, "r.jsonl", lines, *label, "-o", str(unwritable)) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
    assert _values(tmp_path / "c.sqlite", [a, b]) == {}


@pytest.mark.parametrize("name", ["req.jsonl.gz", "req", "old.calls.jsonl"])
def test_export_refuses_a_requests_name_whose_calls_file_another_export_writes(
    tmp_path, capsys, name
):
    """``-o req``, ``-o req.jsonl`` and ``-o req.jsonl.gz`` would share ``req.calls.jsonl``, and
    batch runners read no gzip: only ``NAME.jsonl`` is taken."""
    write_contexts(tmp_path / "in.jsonl", [Context("q1", [Passage(text="A.")], question="Q?")])
    (tmp_path / "req.calls.jsonl").write_text("another export's calls\n")
    argv = ["export", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / name), *JUDGE]
    assert batch_main([*argv, "--steps", "abstain", "--cache", str(tmp_path / "c.sqlite")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "a requests file is plain JSONL named NAME.jsonl" in err[0]
    assert (tmp_path / "req.calls.jsonl").read_text() == "another export's calls\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "req.calls.jsonl"]


def _tokenizer_server(path: str, body: Any, headers: dict[str, str]) -> tuple[int, dict, Any]:
    """A server whose tokenizer says the first token of NO-RESPONSE is "NO"."""
    if body is None:
        return 200, {}, {"object": "list", "data": [{"id": "m"}]}
    if path == "/tokenize":
        return 200, {}, {"tokens": [5, 6] if body["prompt"] else []}
    if path == "/detokenize":
        return 200, {}, {"prompt": "NO"}
    return 404, {}, {"detail": "Not Found"}


def test_import_records_the_servers_abstention_token_so_annotate_needs_no_server(tmp_path):
    write_contexts(tmp_path / "in.jsonl", [Context("q1", [Passage(text="A.")], question="Q?")])
    cache = ["--cache", str(tmp_path / "c.sqlite"), "--steps", "abstain"]
    server = ScriptedServer(_tokenizer_server).start()
    judge = ["--judge", f"openai:m@{server.url}"]
    try:
        export = ["export", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "req.jsonl")]
        assert batch_main([*export, *judge, *cache]) == 0
        (a,) = [c["custom_id"] for c in _lines(tmp_path / "req.calls.jsonl")]
        (tmp_path / "r.jsonl").write_text(_line(a, _first_token(-0.5)) + "\n")
        argv = ["import", str(tmp_path / "r.jsonl"), "--calls", str(tmp_path / "req.calls.jsonl")]
        assert batch_main([*argv, *judge, *cache]) == 0
    finally:
        server.close()
    out = tmp_path / "out.jsonl"
    assert annotate_main([str(tmp_path / "in.jsonl"), "-o", str(out), *judge, *cache]) == 0
    (context,) = read_contexts(out)
    assert context.passages[0].abstain_prob == {"m": math.exp(-0.5)}


def test_a_result_holding_a_lone_surrogate_is_a_line_error(tmp_path, exported, capsys):
    """JSON can escape a lone surrogate, UTF-8 cannot store it: the line is reported at its
    field, the other lines are stored."""
    gen, other = exported["ids"]["generate"][0], exported["ids"]["abstain_prob"][0]
    bad = _line(gen, _generation("Paris", 2)).replace("Paris", "Paris \\ud800")
    assert _import(tmp_path, exported, "r.jsonl", [bad, _line(other, _first_token(-0.5))]) == 1
    err = capsys.readouterr().err
    assert "r.jsonl:1: field 'response.body.choices[0].message.content' holds a lone" in err
    assert _values(tmp_path / "c.sqlite", [gen, other]) == {other: math.exp(-0.5)}
