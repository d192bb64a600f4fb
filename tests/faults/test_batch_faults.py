"""Edited batch files against ``udcg batch export|import``: every file is checked before the
cache is touched, a custom_id answered twice with different values or a calls line whose id is
not its arguments' key is refused in one line, outputs never replace inputs; and a fixed-seed
sample of ``bench/fuzz_judge_files.py``'s batch target."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.bench_scripts import load
from udcg.cli.batch import main as batch_main
from udcg.io.contexts.jsonl import Context, Passage, write_contexts

JUDGE = ["--judge", "openai:m@http://127.0.0.1:9/v1", "--judge-option", "abstain_token=NO"]


def _rows(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    with sqlite3.connect(path) as conn:
        return {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM judge_cache")}


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _result(custom_id: str, logprob: float) -> str:
    top = [{"token": "NO", "logprob": logprob}, {"token": "Yes", "logprob": -5.0}]
    body = {"model": "m", "choices": [{"message": {"content": "NO"}, "logprobs": {"content": [
        {**top[0], "top_logprobs": top}]}}]}  # fmt: skip
    line = {"id": "b", "custom_id": custom_id, "error": None}
    return json.dumps({**line, "response": {"status_code": 200, "body": body}})


@pytest.fixture
def exported(tmp_path: Path) -> dict[str, Any]:
    """Three abstain_prob calls exported for :data:`JUDGE`: their calls file, ids and args."""
    passages = [Passage(text=t) for t in ("Paris is in France.", "Rome.", "Bread.")]
    write_contexts(tmp_path / "in.jsonl", [Context("q1", passages, question="Capital?")])
    cache = ["--cache", str(tmp_path / "c.sqlite")]
    argv = ["export", str(tmp_path / "in.jsonl"), str(tmp_path / "req.jsonl"), *JUDGE, *cache]
    assert batch_main([*argv, "--steps", "abstain"]) == 0
    calls = tmp_path / "req.calls.jsonl"
    return {"calls": calls, "ids": [c["custom_id"] for c in _lines(calls)], "cache": cache}


def _import(tmp_path: Path, exported: dict[str, Any], lines: list[str]) -> int:
    (tmp_path / "r.jsonl").write_text("\n".join(lines) + "\n")
    argv = ["import", str(tmp_path / "r.jsonl"), "--calls", str(exported["calls"])]
    return batch_main([*argv, *JUDGE, *exported["cache"]])


def test_a_request_answered_twice_with_different_values_is_refused_and_nothing_stored(
    tmp_path, exported, capsys
):
    a, b, _ = exported["ids"]
    lines = [_result(a, -0.5), _result(b, -1.0), _result(a, -2.0)]
    assert _import(tmp_path, exported, lines) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert f"r.jsonl:3: custom_id {a}: another result than at {tmp_path / 'r.jsonl'}:1" in err[0]
    assert _rows(tmp_path / "c.sqlite") == {}  # b, which was fine, is not stored either


def test_a_request_answered_twice_with_the_same_value_is_counted(tmp_path, exported, capsys):
    a, b, _ = exported["ids"]
    lines = [_result(a, -0.5), _result(b, -1.0), _result(a, -0.5)]
    assert _import(tmp_path, exported, lines) == 0
    out = capsys.readouterr().out
    assert "imported 2 results" in out and "1 duplicate lines with the same value" in out
    rows = _rows(tmp_path / "c.sqlite")  # with the judge's settings records
    assert {k: rows[k] for k in (a, b)} == {a: math.exp(-0.5), b: math.exp(-1.0)}


@pytest.mark.parametrize("edit", ["swap", "unknown"])
def test_a_calls_line_whose_id_is_not_its_key_is_refused_with_its_line(
    tmp_path, exported, capsys, edit
):
    a, b, c = exported["ids"]
    edited = _lines(exported["calls"])
    if edit == "swap":  # each of lines 1 and 2 claims the other passage's key
        edited[0]["custom_id"], edited[1]["custom_id"] = b, a
        lines = [_result(a, -0.25), _result(b, -3.0)]
    else:  # line 1 claims a key of no call
        edited[0]["custom_id"] = "f" * 64
        lines = [_result("f" * 64, -0.25), _result(c, -3.0)]
    exported["calls"].write_text("".join(json.dumps(x) + "\n" for x in edited))
    assert _import(tmp_path, exported, lines) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert "req.calls.jsonl:1: field 'custom_id':" in err[0]
    assert f"is not the cache key of this call's judge, operation and args ({a})" in err[0]
    assert _rows(tmp_path / "c.sqlite") == {}  # no value under another passage's key


def test_a_calls_file_of_another_judge_is_refused_in_one_line(tmp_path, exported, capsys):
    other = ["--judge", "openai:m@http://127.0.0.1:9/v1", "--judge-option", "abstain_token=N"]
    (tmp_path / "r.jsonl").write_text(_result(exported["ids"][0], -0.5) + "\n")
    argv = ["import", str(tmp_path / "r.jsonl"), "--calls", str(exported["calls"])]
    assert batch_main([*argv, *other, *exported["cache"]]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "req.calls.jsonl:1: field 'judge': exported for judge" in err[0]
    assert _rows(tmp_path / "c.sqlite") == {}


def test_export_refuses_outputs_that_name_its_input(tmp_path, capsys):
    contexts = tmp_path / "c.jsonl"
    write_contexts(contexts, [Context("q1", [Passage(text="A.")], question="Q?")])
    before = contexts.read_bytes()
    cache = ["--cache", str(tmp_path / "k.sqlite"), "--steps", "abstain"]
    assert batch_main(["export", str(contexts), str(contexts), *JUDGE, *cache]) == 2
    assert "the output names the input input" in capsys.readouterr().err
    # the calls file written beside the requests, and a part of split requests
    calls_named = tmp_path / "x.calls.jsonl"
    calls_named.write_bytes(before)
    assert batch_main(["export", str(calls_named), str(tmp_path / "x.jsonl"), *JUDGE, *cache]) == 2
    part = tmp_path / "y-001.jsonl"
    part.write_bytes(before)
    argv = ["export", str(part), str(tmp_path / "y.jsonl"), "--max-lines", "5", *JUDGE, *cache]
    assert batch_main(argv) == 2
    assert contexts.read_bytes() == calls_named.read_bytes() == part.read_bytes() == before


def test_import_refuses_an_output_that_names_an_input(tmp_path, exported, capsys):
    lines = [_result(key, -0.5) for key in exported["ids"]]
    (tmp_path / "r.jsonl").write_text("\n".join(lines) + "\n")
    before = (tmp_path / "r.jsonl").read_bytes(), exported["calls"].read_bytes()
    results = str(tmp_path / "r.jsonl")
    for output in (results, str(exported["calls"])):
        argv = ["import", results, "--calls", str(exported["calls"]), *JUDGE, *exported["cache"]]
        argv += ["--steps", "abstain", "--contexts", str(tmp_path / "in.jsonl"), "-o", output]
        assert batch_main(argv) == 2
        assert "the output names the input" in capsys.readouterr().err
    assert ((tmp_path / "r.jsonl").read_bytes(), exported["calls"].read_bytes()) == before


def test_fuzzed_batch_files_end_in_a_result_or_one_line():
    fuzz = load("fuzz_judge_files")
    tally = fuzz.fuzz_batch(300, seed=11, limit=30.0, keep=1)
    assert not tally.examples, tally.examples
    assert tally.counts["input_error"] > 50 and tally.counts["ok"] > 20


def test_import_names_the_context_whose_pair_is_missing_not_the_first_with_its_question(
    tmp_path, capsys
):
    """Two contexts ask the same question of different passages; the batch answers the first
    context's pair only: the refusal names the second context (by its pair, not by finding the
    question in the prompt text) with its file and line."""
    contexts = [
        Context("q1", [Passage(text="Paris is in France.")], question="Capital?"),
        Context("q2", [Passage(text="Rome is in Italy.")], question="Capital?"),
    ]
    write_contexts(tmp_path / "in.jsonl", contexts)
    write_contexts(tmp_path / "first.jsonl", contexts[:1])
    cache = ["--cache", str(tmp_path / "c.sqlite")]
    export = ["export", str(tmp_path / "first.jsonl"), "-o", str(tmp_path / "req.jsonl")]
    assert batch_main([*export, *JUDGE, *cache, "--steps", "abstain"]) == 0
    (custom_id,) = [c["custom_id"] for c in _lines(tmp_path / "req.calls.jsonl")]
    (tmp_path / "r.jsonl").write_text(_result(custom_id, -0.5) + "\n")
    argv = ["import", str(tmp_path / "r.jsonl"), "--calls", str(tmp_path / "req.calls.jsonl")]
    argv += ["--contexts", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl")]
    assert batch_main([*argv, *JUDGE, *cache, "--steps", "abstain"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert f"{tmp_path / 'in.jsonl'}:2" in err[0] and "context 'q2'" in err[0], err
    assert "abstain_prob" in err[0] and not (tmp_path / "out.jsonl").exists()
