"""dataset=trec: annotated contexts from a TREC run + qrels + utilities + outcomes, checked
against hand-ordered lists and hand-computed UDCG / nDCG, end to end without a judge, and one
test per bad input."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from udcg.cli.benchmark import run_evaluate
from udcg.errors import UDCGInputError
from udcg.pipeline.datasets import trec

# q1: d2 has the top score; d1 and d3 tie at 2.0 -> d3 first (doc id descending); d4 is 4th.
# q2: a three-way tie -> c, b, a. q3 in score order. q4 reversed against the rank column.
# q9 has no qrels: skipped, and it needs neither utilities nor an outcome.
RUN = """\
q1 Q0 d1 1 2.0 r
q1 Q0 d2 2 3.0 r
q1 Q0 d3 3 2.0 r
q1 Q0 d4 4 1.0 r
q2 Q0 a 1 1.5 r
q2\tQ0\tb\t2\t1.5\tr

q2 Q0 c 3 1.5 r
q3 Q0 x 1 5 r
q3 Q0 y 2 4 r
q3 Q0 z 3 3 r
q4 Q0 x 1 1 r
q4 Q0 y 2 2 r
q4 Q0 z 3 3 r
q4 Q0 w 4 0.5 r
q9 Q0 x 1 9 r
"""
QRELS = """\
q1 0 d1 1
q1 0 d2 0
q1 0 d4 2
q2 0 b 2
q2 0 a 0
q3 0 x 1
q3 0 z 1
q4 0 w 3
q4 0 y 0
"""
UTILITIES = """\
q1 d1 0.2
q1 d2 0.5
q1 d3 0.9
q1 d4 0.1
q2 a 0.7
q2\tb\t0.1

q2 c 0.7
q3 x 0
q3 y 0.6
q3 z 0.3
q4 x 0.8
q4 y 0.9
q4 z 1
"""
OUTCOMES = "q1 1\nq2 false\nq3 TRUE\nq4 0\n"

# By hand, in trec_eval order: documents, relevance (grade >= 1; unjudged -> 0), P(abstain).
ORDER = {"q1": ["d2", "d3", "d1"], "q2": ["c", "b", "a"], "q3": ["x", "y", "z"]}
ORDER["q4"] = ["z", "y", "x"]
RELEVANT = {"q1": [0, 0, 1], "q2": [0, 1, 0], "q3": [1, 0, 1], "q4": [0, 0, 0]}
CORRECT = {"q1": True, "q2": False, "q3": True, "q4": False}


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


# UDCG = sigmoid((1/k) sum_i [rel_i u_i - (1 - rel_i) u_i / 3]), u = 1 - P(abstain), k = 3:
#   q1 u = (.5, .1, .8): (-.5/3 - .1/3 + .8) / 3        q2 u = (.3, .9, .3): (-.1 + .9 - .1) / 3
#   q3 u = (1, .4, .7):  (1 - .4/3 + .7) / 3            q4 u = (0, .1, .2):  (-.3/3) / 3
UDCG = {
    "q1": _sigmoid(0.6 / 3),
    "q2": _sigmoid(0.7 / 3),
    "q3": _sigmoid((1.7 - 0.4 / 3) / 3),
    "q4": _sigmoid(-0.1 / 3),
}
# nDCG (ideal = the same list sorted): q1 [0,0,1] -> (1/log2 4) / 1, q2 [0,1,0] -> 1/log2 3,
# q3 [1,0,1] -> (1 + 1/2) / (1 + 1/log2 3), q4 -> 0.
NDCG = {"q1": 0.5, "q2": 1 / math.log2(3), "q3": 1.5 / (1 + 1 / math.log2(3)), "q4": 0.0}


def _files(tmp_path: Path, **changes: str) -> dict[str, Path]:
    texts = {"run": RUN, "qrels": QRELS, "utilities": UTILITIES, "outcomes": OUTCOMES}
    texts.update(changes)
    paths = {}
    for name, text in texts.items():
        paths[name] = tmp_path / f"{name}.txt"
        paths[name].write_text(text)
    return paths


def _load(tmp_path: Path, k: int = 3, utility_field: str = "abstain_prob", **changes: str):
    return trec(**_files(tmp_path, **changes), judge="m", k=k, utility_field=utility_field)


def test_contexts_follow_trec_eval_order_and_qrels(tmp_path: Path) -> None:
    data = _load(tmp_path)
    assert data.name == "trec" and data.queries == [] and data.corpus == []
    assert [c.qid for c in data.contexts] == ["q1", "q2", "q3", "q4"]
    assert data.notes == ["1 of 5 run queries have no qrels and were skipped (as trec_eval)"]
    probs = {}
    for line in UTILITIES.splitlines():
        if line.strip():
            q, d, p = line.split()
            probs[q, d] = float(p)
    for ctx in data.contexts:
        assert [p.doc_id for p in ctx.passages] == ORDER[ctx.qid]
        assert [p.relevant for p in ctx.passages] == [bool(r) for r in RELEVANT[ctx.qid]]
        assert [p.abstain_prob for p in ctx.passages] == [
            {"m": probs[ctx.qid, d]} for d in ORDER[ctx.qid]
        ]
        assert all(p.text is None and not p.answer_prob for p in ctx.passages)
        assert ctx.outcomes == {"m": {"correct": CORRECT[ctx.qid]}}
        assert ctx.run == "run.txt"
    assert [p.score for p in data.contexts[0].passages] == [3.0, 2.0, 2.0]


def test_k_cuts_the_ranking_and_answer_prob_field(tmp_path: Path) -> None:
    data = _load(tmp_path, k=2, utility_field="answer_prob")
    assert [[p.doc_id for p in c.passages] for c in data.contexts] == [
        ORDER[q][:2] for q in ("q1", "q2", "q3", "q4")
    ]
    first = data.contexts[0].passages
    assert [p.answer_prob for p in first] == [{"m": 0.5}, {"m": 0.9}]
    assert all(not p.abstain_prob for p in first)


def _trec(files: dict[str, Path]) -> list[str]:
    """Overrides that read the TREC files ``files`` (run, qrels, utilities, outcomes)."""
    return [
        "dataset=trec",
        "retriever=given",
        "judge=m",
        *(f"dataset.{name}={path}" for name, path in files.items()),
    ]


@pytest.fixture
def no_judge(monkeypatch) -> None:
    def refuse(spec, **options):
        raise AssertionError("no judge should be loaded")

    monkeypatch.setattr("udcg.judge.load_judge", refuse)


def test_evaluate_scores_the_trec_run_without_a_judge(
    tmp_path: Path, no_judge, evaluate_config
) -> None:
    cfg = evaluate_config(*_trec(_files(tmp_path)), "k=3")
    assert cfg.dataset.judge == "m" and cfg.dataset.k == 3  # ${judge} and ${k} interpolate
    report, files = run_evaluate(cfg, tmp_path / "out")
    assert report["setup"]["dataset"] == "trec" and report["setup"]["n_contexts"] == 4
    assert report["setup"]["accuracy"] == pytest.approx(0.5)
    assert report["means"]["UDCG"] == pytest.approx(sum(UDCG.values()) / 4)
    assert report["means"]["nDCG"] == pytest.approx(sum(NDCG.values()) / 4)
    # MRR by hand: q1 1/3, q2 1/2, q3 1, q4 0
    assert report["means"]["MRR"] == pytest.approx((1 / 3 + 1 / 2 + 1) / 4)
    assert (tmp_path / "out" / "report.json") in files
    assert "1 of 5 run queries have no qrels and were skipped (as trec_eval)" in report["notes"]


def test_evaluate_asks_for_a_missing_file(tmp_path: Path, no_judge, evaluate_config) -> None:
    files = _files(tmp_path)
    del files["qrels"]
    with pytest.raises(UDCGInputError, match=r"set dataset\.qrels=\.\.\."):
        run_evaluate(evaluate_config(*_trec(files)), tmp_path / "out")


def test_evaluate_reports_a_bad_file_with_its_line(
    tmp_path: Path, no_judge, evaluate_config
) -> None:
    files = _files(tmp_path, outcomes="q1 1\nq2 yes\n")
    with pytest.raises(UDCGInputError, match=r"outcomes\.txt:2: field 'correct': 'yes'"):
        run_evaluate(evaluate_config(*_trec(files)), tmp_path / "out")


# ------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("q1 d1 abc", r"utilities\.txt:3: field 'p': 'abc' is not a probability in \[0, 1\]"),
        ("q1 d1 1.5", r"utilities\.txt:3: field 'p': '1.5' is not a probability"),
        ("q1 d1 nan", r"utilities\.txt:3: field 'p': 'nan' is not a probability"),
        ("q1 d1", r"utilities\.txt:3: expected 3 columns \(qid doc_id p\), found 2"),
        ("q1 d2 0.5", r"utilities\.txt:3: field 'doc_id': duplicate document 'd2'"),
    ],
)
def test_malformed_utility_line(tmp_path: Path, line: str, message: str) -> None:
    with pytest.raises(UDCGInputError, match=message):
        _load(tmp_path, utilities=f"q1 d2 0.5\n\n{line}\n")


def test_missing_utility_names_the_first_ranked_document(tmp_path: Path) -> None:
    utilities = UTILITIES.replace("q1 d3 0.9\n", "").replace("q2 c 0.7\n", "")
    with pytest.raises(
        UDCGInputError,
        match=r"run\.txt:3: field 'utilities': document 'd3' of query 'q1' has no abstain_prob",
    ):
        _load(tmp_path, utilities=utilities)


def test_missing_outcome_names_the_query(tmp_path: Path) -> None:
    with pytest.raises(
        UDCGInputError, match=r"run\.txt:9: field 'outcomes': query 'q3' has no outcome"
    ):
        _load(tmp_path, outcomes="q1 1\nq2 0\nq4 1\n")


@pytest.mark.parametrize("value", ["yes", "2", "-1"])
def test_bad_correct_value(tmp_path: Path, value: str) -> None:
    with pytest.raises(UDCGInputError, match=rf"outcomes\.txt:3: field 'correct': '{value}'"):
        _load(tmp_path, outcomes=f"q1 1\n\nq2 {value}\n")


def test_duplicate_outcome(tmp_path: Path) -> None:
    with pytest.raises(UDCGInputError, match=r"outcomes\.txt:2: field 'qid': duplicate query"):
        _load(tmp_path, outcomes="q1 1\nq1 0\n")


def test_duplicate_run_document(tmp_path: Path) -> None:
    with pytest.raises(UDCGInputError, match=r"run\.txt:2: field 'doc_id': duplicate document"):
        _load(tmp_path, run="q1 Q0 d1 1 2.0 r\nq1 Q0 d1 2 1.0 r\n")


def test_duplicate_judgement(tmp_path: Path) -> None:
    with pytest.raises(UDCGInputError, match=r"qrels\.txt:3: field 'doc_id': duplicate document"):
        _load(tmp_path, qrels=QRELS.replace("q1 0 d4 2\n", "q1 0 d1 0\n"))


def test_no_judged_query(tmp_path: Path) -> None:
    with pytest.raises(UDCGInputError, match="field 'qrels': no query of the run"):
        _load(tmp_path, qrels="q7 0 d1 1\n")


@pytest.mark.parametrize(
    ("options", "field"), [({"k": 0}, "k"), ({"utility_field": "score"}, "utility_field")]
)
def test_bad_options(tmp_path: Path, options: dict, field: str) -> None:
    with pytest.raises(UDCGInputError, match=f"field '{field}'"):
        _load(tmp_path, **options)


def test_judged_queries_the_run_leaves_out_are_noted(tmp_path: Path) -> None:
    """A run that ranks fewer judged queries than another says so: its means are over fewer."""
    data = _load(tmp_path, qrels=QRELS + "q7 0 y 1\nq8 0 y 1\n")
    assert [c.qid for c in data.contexts] == ["q1", "q2", "q3", "q4"]
    assert data.notes[1] == (
        "2 of 6 judged queries are not in the run and were left out (as trec_eval without -c): "
        "runs scored here compare only on the same queries"
    )
