"""An annotated contexts file as the utilities of ``udcg trec`` / ``udcg.evaluate``: which judge
and which field are read, and the errors when the file does not say it (in process, fast)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import udcg
from udcg.cli.trec import main as trec_main
from udcg.errors import UDCGInputError
from udcg.io.joins.utilities import read_utility_file
from udcg.metrics import udcg as udcg_metric

QRELS = {"q1": {"d1": 1, "d2": 0}, "q2": {"e1": 0, "e2": 1}}
RUN = {"q1": {"d1": 2.0, "d2": 1.0}, "q2": {"e1": 2.0, "e2": 1.0}}


def _write(path: Path, contexts: list[dict]) -> Path:
    path.write_text("".join(json.dumps(c) + "\n" for c in contexts))
    return path


def _context(qid: str, *passages: tuple[str, dict]) -> dict:
    return {
        "qid": qid,
        "question": f"question {qid}?",
        "passages": [{"doc_id": d, "text": d, **labels} for d, labels in passages],
    }


@pytest.fixture
def annotated(tmp_path: Path) -> Path:
    """Two queries, judge ``j`` with both fields, judge ``k`` abstention only."""
    return _write(
        tmp_path / "annotated.jsonl",
        [
            _context(
                "q1",
                ("d1", {"abstain_prob": {"j": 0.2, "k": 0.5}, "answer_prob": {"j": 0.7}}),
                ("d2", {"abstain_prob": {"j": 0.9, "k": 0.4}, "answer_prob": {"j": 0.1}}),
            ),
            _context(
                "q2",
                ("e1", {"abstain_prob": {"j": 0.6, "k": 0.3}, "answer_prob": {"j": 0.3}}),
                ("e2", {"abstain_prob": {"j": 0.1, "k": 0.8}, "answer_prob": {"j": 0.8}}),
            ),
        ],
    )


def test_the_key_and_field_pick_the_values(annotated: Path) -> None:
    read = read_utility_file(annotated, "abstain_prob", judge_key="j")
    assert read.field == "abstain_prob" and read.source == str(annotated)
    keys = zip(read.qids.to_pylist(), read.doc_ids.to_pylist(), strict=True)
    pairs = dict(zip(keys, read.values.tolist(), strict=True))
    want = {("q1", "d1"): 0.8, ("q1", "d2"): 0.1, ("q2", "e1"): 0.4, ("q2", "e2"): 0.9}
    assert pairs == pytest.approx(want)
    answer = read_utility_file(annotated, "answer_prob", judge_key="j")
    assert answer.field == "answer_prob" and sorted(answer.values) == [0.1, 0.3, 0.7, 0.8]
    only = read_utility_file(annotated, judge_key="k")  # k holds abstention only
    assert only.field == "abstain_prob"
    assert sorted(only.values) == pytest.approx([0.2, 0.5, 0.6, 0.7])


def test_udcg_equals_the_metric_on_the_passages(annotated: Path) -> None:
    for field, key in (("abstain_prob", "j"), ("answer_prob", "j"), ("abstain_prob", "k")):
        utilities = read_utility_file(annotated, field, judge_key=key)
        got = udcg.evaluate(QRELS, RUN, ["UDCG@2"], utilities=utilities)
        contexts = [json.loads(line) for line in annotated.read_text().splitlines()]
        probs = [[p[field][key] for p in c["passages"]] for c in contexts]
        u = [[1 - v if field == "abstain_prob" else v for v in row] for row in probs]
        want = udcg_metric([[True, False], [False, True]], u)
        np.testing.assert_allclose([got["q1"]["UDCG@2"], got["q2"]["UDCG@2"]], want, atol=1e-15)


def test_command_line(annotated: Path, tmp_path: Path, capsys) -> None:
    qrels, run = tmp_path / "qrels.trec", tmp_path / "run.trec"
    qrels.write_text(
        "".join(f"{q} 0 {d} {g}\n" for q, docs in QRELS.items() for d, g in docs.items())
    )
    run.write_text(
        "".join(
            f"{q} Q0 {d} {r} {s} x\n"
            for q, docs in RUN.items()
            for r, (d, s) in enumerate(docs.items(), 1)
        )
    )
    common = [str(qrels), str(run), "-m", "UDCG@2", "--format", "json", "--utilities"]
    assert trec_main([*common, str(annotated), "--judge-key", "k"]) == 0
    got = json.loads(capsys.readouterr().out)["mean"]["UDCG@2"]
    want = udcg.evaluate(QRELS, RUN, ["UDCG@2"], utilities=read_utility_file(annotated, None, "k"))
    assert got == pytest.approx(np.mean([v["UDCG@2"] for v in want.values()]), abs=1e-15)
    # Several judges and no key: one line naming them.
    assert trec_main([*common, str(annotated)]) == 2
    err = capsys.readouterr().err
    assert "abstain_prob[j], abstain_prob[k], answer_prob[j]" in err and "--judge-key" in err
    assert trec_main([*common, str(annotated), "--judge-key", "j"]) == 2  # both fields
    assert "(--utility) picks one" in capsys.readouterr().err
    assert trec_main([str(qrels), str(run), "-m", "UDCG@2", "--judge-key", "k"]) == 2
    assert "--judge-key reads the --utilities file" in capsys.readouterr().err


def test_one_judge_needs_no_key_gzip_and_repeated_pairs(tmp_path: Path) -> None:
    lines = [
        _context("q1", ("d1", {"abstain_prob": {"m": 0.25}}), ("d2", {"abstain_prob": {"m": 0.5}})),
        _context("q1", ("d1", {"abstain_prob": {"m": 0.25}})),  # another run's context: same value
        _context("q2", ("e1", {}), ("e2", {"abstain_prob": {"m": 0.75}})),  # e1 not labelled
    ]
    path = tmp_path / "one.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(c) + "\n" for c in lines).encode()))
    read = read_utility_file(path)
    assert read.field == "abstain_prob" and len(read) == 3
    assert sorted(read.values) == [0.25, 0.5, 0.75]
    # A ranked top-k document without the judge's value: the evaluation's located error.
    with pytest.raises(UDCGInputError, match=r"no utility for query 'q2' document 'e1'"):
        udcg.evaluate(QRELS, RUN, ["UDCG@2"], utilities=str(path))
    lines[1]["passages"][0]["abstain_prob"]["m"] = 0.3
    _write(tmp_path / "clash.jsonl", lines)
    with pytest.raises(
        UDCGInputError, match=r"clash.jsonl:2: field 'passages\[0\].abstain_prob.m'"
    ):
        read_utility_file(tmp_path / "clash.jsonl")


@pytest.mark.parametrize(
    ("contexts", "options", "message"),
    [
        ([_context("q1", ("d1", {}))], {}, "holds no judge values; a judge key"),
        ([_context("q1", ("d1", {"abstain_prob": {"m": 0.1}}))], {"judge_key": "x"},
         r"no passage holds abstain_prob\[x\] or answer_prob\[x\] \(it holds abstain_prob\[m\]\)"),
        ([_context("q1", ("d1", {"abstain_prob": {"m": 0.1}}))],
         {"utility_field": "answer_prob", "judge_key": "m"}, r"no passage holds answer_prob\[m\]"),
        ([_context("q1", ("d1", {"abstain_prob": {"m": 0.1}}))], {"utility_field": "utility"},
         "holds judge probabilities"),
        ([_context("q1", ("d1", {"abstain_prob": {"m": 1.5}}))], {},
         r":1: field 'passages\[0\].abstain_prob.m'"),
        ([{"qid": "q1", "passages": {"d1": 1}}], {}, r":1: field 'passages': expected a list"),
        ([{"qid": "q1", "passages": [{"abstain_prob": {"m": 0.1}}]}], {},
         r":1: field 'passages\[0\].doc_id'"),
    ],
)  # fmt: skip
def test_mistakes_are_located(tmp_path: Path, contexts, options, message) -> None:
    path = _write(tmp_path / "bad.jsonl", contexts)
    with pytest.raises(UDCGInputError, match=message):
        read_utility_file(path, **options)


def test_a_key_is_for_contexts_files_only(tmp_path: Path) -> None:
    (tmp_path / "u.tsv").write_text("q1 d1 0.2\n")
    with pytest.raises(UDCGInputError, match="reads an annotated contexts file"):
        read_utility_file(tmp_path / "u.tsv", judge_key="m")
    (tmp_path / "u.jsonl").write_text('{"qid": "q1", "doc_id": "d1", "utility": 0.2}\n')
    assert read_utility_file(tmp_path / "u.jsonl").field == "utility"  # the line form is kept
