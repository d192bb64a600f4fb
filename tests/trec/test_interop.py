"""Runs, qrels and measures from ranx, ir_measures and pandas: the same data in every form gives
exactly the same values; results as a DataFrame; compare with utilities; the input errors."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from udcg import compare, evaluate, evaluate_table
from udcg.errors import UDCGInputError
from udcg.trec.engine import as_qrels, as_run

ir_measures = pytest.importorskip("ir_measures")

MEASURES = ["nDCG@10", "AP", "RR", "P@5"]


def _case(seed: int = 0, n_queries: int = 40) -> tuple[dict, dict]:
    """Random graded qrels (some grades negative) and a run with many tied scores; some run
    queries are unjudged and some judged queries are not retrieved for."""
    rng = np.random.default_rng(seed)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(n_queries):
        docs = [f"d{i}" for i in rng.choice(100, size=int(rng.integers(1, 25)), replace=False)]
        if q % 10 != 9:
            run[f"q{q}"] = {d: float(rng.integers(0, 4)) / 4 for d in docs}
        if q % 10 != 8:
            judged = rng.choice([*docs, "x1", "x2"], size=int(rng.integers(1, 15)))
            qrels[f"q{q}"] = {str(d): int(rng.choice([-1, 0, 0, 1, 2, 3])) for d in judged}
    return qrels, run


def _rows(data: dict) -> list[tuple[str, str, float]]:
    return [(q, d, v) for q, docs in data.items() for d, v in docs.items()]


@pytest.fixture(scope="module")
def case() -> tuple[dict, dict]:
    return _case()


@pytest.fixture(scope="module")
def ranx_objects(case):
    """ranx's Qrels and Run, built once (importing ranx is slow)."""
    ranx = pytest.importorskip("ranx")
    qrels, run = case
    return ranx.Qrels(qrels), ranx.Run(run, name="run")


def _files(tmp_path: Path, qrels: dict, run: dict) -> tuple[Path, Path]:
    qrels_path, run_path = tmp_path / "qrels.txt", tmp_path / "run.txt"
    qrels_path.write_text("".join(f"{q} 0 {d} {g}\n" for q, d, g in _rows(qrels)))
    run_path.write_text("".join(f"{q} Q0 {d} 0 {s!r} t\n" for q, d, s in _rows(run)))
    return qrels_path, run_path


def _frames(qrels: dict, run: dict, names: tuple[str, str, str, str]):
    q, d, rel, score = names
    return (
        pd.DataFrame(_rows(qrels), columns=[q, d, rel]),
        pd.DataFrame(_rows(run), columns=[q, d, score]),
    )


def test_every_input_form_gives_identical_values(tmp_path: Path, case, ranx_objects) -> None:
    qrels, run = case
    expected = evaluate(*_files(tmp_path, qrels, run), MEASURES)
    assert len(expected) > 20
    forms = {
        "dict": (qrels, run),
        "ranx": ranx_objects,
        "ranx frames": (ranx_objects[0].to_dataframe(), ranx_objects[1].to_dataframe()),
        "ir_measures frames": _frames(qrels, run, ("query_id", "doc_id", "relevance", "score")),
        "PyTerrier frames": _frames(qrels, run, ("qid", "docno", "label", "score")),
        "rel column": _frames(qrels, run, ("qid", "doc_id", "rel", "score")),
        "ir_measures": (
            [ir_measures.Qrel(q, d, g) for q, d, g in _rows(qrels)],
            [ir_measures.ScoredDoc(q, d, s) for q, d, s in _rows(run)],
        ),
        "generators": (
            (ir_measures.Qrel(q, d, g) for q, d, g in _rows(qrels)),
            (ir_measures.ScoredDoc(q, d, s) for q, d, s in _rows(run)),
        ),
        "udcg objects": (as_qrels(qrels), as_run(run)),
    }
    for name, (judged, ranked) in forms.items():
        assert evaluate(judged, ranked, MEASURES) == expected, name
    # and ir_measures' own reader's output (a generator of Qrel / ScoredDoc)
    qrels_path, run_path = _files(tmp_path, qrels, run)
    read = ir_measures.read_trec_qrels(str(qrels_path)), ir_measures.read_trec_run(str(run_path))
    assert evaluate(*read, MEASURES) == expected


def test_integer_ids_in_a_dataframe_are_read_as_strings() -> None:
    qrels = pd.DataFrame({"qid": [1, 1, 2], "docno": [10, 11, 20], "label": [1, 0, 2]})
    run = pd.DataFrame({"qid": [1, 1, 2], "docno": [11, 10, 20], "score": [2.0, 1.0, 1.0]})
    assert evaluate(qrels, run, "RR") == evaluate(
        {"1": {"10": 1, "11": 0}, "2": {"20": 2}},
        {"1": {"11": 2.0, "10": 1.0}, "2": {"20": 1.0}},
        "RR",
    )
    assert evaluate(qrels, run, "RR") == {"1": {"RR": 0.5}, "2": {"RR": 1.0}}


def test_two_query_id_columns_must_agree() -> None:
    """A frame with ``qid`` and ``query_id`` (a PyTerrier frame merged with an ir_measures one)
    used ``qid`` silently; two that differ are refused, two equal ones are fine."""
    run = pd.DataFrame({"qid": ["1", "2"], "docno": ["10", "20"], "score": [1.0, 1.0]})
    agree = pd.DataFrame({"qid": [1, 2], "query_id": ["1", "2"], "docno": ["10", "20"]})
    assert evaluate(agree.assign(label=[1, 0]), run, "RR") == {"1": {"RR": 1.0}, "2": {"RR": 0.0}}
    differ = agree.assign(query_id=["2", "1"], label=[1, 0])
    with pytest.raises(UDCGInputError, match="both 'qid' and 'query_id' columns, and they differ"):
        evaluate(differ, run, "RR")
    # one name twice (pd.concat(axis=1)): a column of two, refused in one line
    twice = pd.concat([run, run[["qid"]]], axis=1)
    with pytest.raises(UDCGInputError, match=r"^field 'run': the DataFrame has two columns named"):
        evaluate(agree.assign(label=[1, 0]), twice, "RR")
    # a column udcg does not read may be there twice (PyTerrier's query, merged twice)
    extra = pd.concat([run.assign(query=["a", "b"]), pd.DataFrame({"query": ["a", "b"]})], axis=1)
    assert evaluate(agree.assign(label=[1, 0]), extra, "RR") == {"1": {"RR": 1.0}, "2": {"RR": 0.0}}


def test_ir_measures_measures_equal_their_names(case) -> None:
    qrels, run = case
    objects = [
        ir_measures.nDCG @ 10,
        ir_measures.AP,
        ir_measures.RR,
        ir_measures.P @ 5,
        ir_measures.P(rel=2) @ 5,
        ir_measures.R @ 20,
        ir_measures.Success @ 10,
        ir_measures.AP(rel=2),
    ]
    names = ["nDCG@10", "AP", "RR", "P@5", "P(rel=2)@5", "R@20", "Hits@10", "AP(rel=2)"]
    assert evaluate(qrels, run, objects) == evaluate(qrels, run, names)
    assert evaluate(qrels, run, ir_measures.nDCG @ 10) == evaluate(qrels, run, "nDCG@10")
    mixed = [ir_measures.nDCG @ 10, "map", "recip_rank", "P_5"]  # and pytrec_eval's names
    table = evaluate_table(qrels, run, mixed)
    assert [str(m) for m in table.measures] == MEASURES
    assert table.to_dict() == evaluate(qrels, run, MEASURES)


def test_unsupported_ir_measures_measure_is_refused() -> None:
    with pytest.raises(UDCGInputError, match=r"field 'measures'.*Judged@10"):
        evaluate({"q": {"a": 1}}, {"q": {"a": 1.0}}, ir_measures.Judged @ 10)
    with pytest.raises(UDCGInputError, match=r"field 'measures'.*dcg"):
        evaluate({"q": {"a": 1}}, {"q": {"a": 1.0}}, ir_measures.nDCG(dcg="exp-log2") @ 10)
    with pytest.raises(UDCGInputError, match=r"field 'measures'.*got int"):
        evaluate({"q": {"a": 1}}, {"q": {"a": 1.0}}, ["AP", 3])


def test_evaluation_to_dataframe(case) -> None:
    qrels, run = case
    table = evaluate_table(qrels, run, MEASURES)
    frame = table.to_dataframe()
    assert list(frame.columns) == ["qid", *MEASURES]
    assert frame["qid"].tolist() == table.qids
    assert frame[MEASURES].to_numpy().tolist() == table.values.tolist()
    assert frame.set_index("qid").to_dict("index") == table.to_dict()


def test_to_dataframe_without_pandas_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    table = evaluate_table({"q": {"a": 1}}, {"q": {"a": 1.0}}, "AP")
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"pip install 'udcg\[pandas\]'"):
        table.to_dataframe()


def test_compare_accepts_foreign_runs_and_utility_measures(case, ranx_objects) -> None:
    qrels, run = case
    other = {q: {d: s + 0.1 * (int(d[1:]) % 3) for d, s in docs.items()} for q, docs in run.items()}
    runs = {
        "ranx": ranx_objects[1],
        "frame": _frames(qrels, other, ("qid", "docno", "label", "score"))[1],
    }
    report = compare(ranx_objects[0], runs, [ir_measures.nDCG @ 10, "AP"])
    expected = compare(qrels, {"ranx": run, "frame": other}, ["nDCG@10", "AP"])
    assert report.to_dict() == expected.to_dict()

    rng = np.random.default_rng(1)
    utilities = {q: {d: float(rng.random()) for d in docs} for q, docs in run.items()}
    field = "abstain_prob"
    with_u = compare(
        qrels, {"a": run, "b": other}, ["UDCG@5", "AP"], utilities=utilities, utility_field=field
    )
    assert with_u.measures == ["UDCG@5", "AP"]
    for name, system in (("a", run), ("b", other)):
        per_query = evaluate(qrels, system, "UDCG@5", utilities=utilities, utility_field=field)
        values = [per_query.get(q, {"UDCG@5": 0.0})["UDCG@5"] for q in qrels]
        assert with_u.means[name]["UDCG@5"] == pytest.approx(np.mean(values), abs=1e-12)
    as_answer = compare(
        qrels, {"a": run, "b": other}, "UDCG@5", utilities=utilities, utility_field="answer_prob"
    )
    assert as_answer.means["a"]["UDCG@5"] != with_u.means["a"]["UDCG@5"]
    with pytest.raises(UDCGInputError, match="utilities"):
        compare(qrels, {"a": run, "b": other}, "UDCG@5")


def test_errors_name_the_argument_and_what_is_missing(ranx_objects) -> None:
    qrels = {"q": {"a": 1}}
    run = pd.DataFrame({"qid": ["q"], "docno": ["a"], "rank": [1]})
    with pytest.raises(UDCGInputError, match=r"field 'run': the DataFrame has no score column"):
        evaluate(qrels, run, "AP")
    frame = pd.DataFrame({"query": ["q"], "doc_id": ["a"], "relevance": [1]})
    with pytest.raises(UDCGInputError, match=r"field 'qrels': .*no query id column \(q_id / qid"):
        evaluate(frame, {"q": {"a": 1.0}}, "AP")
    mixed = [ir_measures.ScoredDoc("q", "a", 1.0), ir_measures.Qrel("q", "b", 1)]
    with pytest.raises(UDCGInputError, match=r"field 'run': item 1 \(Qrel\) has no score"):
        evaluate(qrels, mixed, "AP")
    scored = [ir_measures.ScoredDoc("q", "a", 1.0)]
    with pytest.raises(UDCGInputError, match=r"field 'qrels': item 0 \(ScoredDoc\) has no relev"):
        evaluate(scored, scored, "AP")
    with pytest.raises(
        UDCGInputError, match=r"field 'qrels': expected a ranx Qrels, got a ranx Run"
    ):
        evaluate(ranx_objects[1], ranx_objects[1], "AP")
    half = pd.DataFrame({"qid": ["q", "q"], "docno": ["a", "b"], "label": [1, 0.5]})
    with pytest.raises(UDCGInputError, match=r"field 'qrels': query 'q', document 'b': 0.5 is not"):
        evaluate(half, {"q": {"a": 1.0}}, "AP")
    nan = pd.DataFrame({"qid": ["q"], "docno": ["a"], "score": [float("nan")]})
    with pytest.raises(UDCGInputError, match=r"field 'run': .*nan is not a finite score"):
        evaluate(qrels, nan, "AP")
    missing = pd.DataFrame({"qid": ["q", None], "docno": ["a", "b"], "score": [1.0, 2.0]})
    with pytest.raises(UDCGInputError, match=r"field 'run': 1 missing query id"):
        evaluate(qrels, missing, "AP")
    twice = [ir_measures.ScoredDoc("q", "a", 1.0), ir_measures.ScoredDoc("q", "a", 2.0)]
    with pytest.raises(UDCGInputError, match=r"field 'run': duplicate document 'a'"):
        evaluate(qrels, twice, "AP")
    with pytest.raises(UDCGInputError, match=r"field 'run': expected a TREC run file.*got int"):
        evaluate(qrels, 3, "AP")


def test_a_run_and_qrels_without_a_shared_query_warn_naming_ids_of_both() -> None:
    """pandas makes an id column with a missing value float: 1.0 is not the run's 1. The
    result is empty, as in trec_eval and pytrec_eval, and a warning says why."""
    import warnings

    from udcg.errors import UDCGWarning

    qrels = pd.DataFrame({"query_id": [1.0, 2.0], "doc_id": ["a", "c"], "relevance": [1, 1]})
    run = pd.DataFrame({"query_id": [1, 2], "doc_id": ["a", "c"], "score": [2.0, 1.0]})
    with pytest.warns(UDCGWarning, match=r"share no query id.*run: '1', '2'; qrels: '1.0', '2.0'"):
        assert evaluate(qrels, run, ["nDCG@10"]) == {}
    with pytest.warns(UDCGWarning, match=r"\(run: none; qrels: 'q1'\)"):
        assert evaluate({"q1": {"a": 1}}, iter([]), ["nDCG@10"]) == {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", UDCGWarning)
        assert evaluate({"1": {"a": 1}}, run, ["nDCG@10"]) == {"1": {"nDCG@10": 1.0}}


def test_a_query_a_run_dict_ranks_nothing_for_is_left_out_with_a_warning() -> None:
    """pytrec_eval scores ``{"q2": {}}`` 0 for every measure; trec_eval cannot read such a
    query from a file, and we leave it out as trec_eval does: a warning says so, naming it."""
    import pytrec_eval

    from udcg.errors import UDCGWarning

    qrels, run = {"q1": {"a": 1}, "q2": {"x": 1}}, {"q1": {"a": 1.0}, "q2": {}}
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run)
    assert theirs["q2"] == {"recip_rank": 0.0}
    with pytest.warns(UDCGWarning, match=r"run: query 'q2' ranks no document: left out of"):
        assert evaluate(qrels, run, ["RR"]) == {"q1": {"RR": 1.0}}


def test_dict_keys_that_are_one_id_as_text_are_refused() -> None:
    """``{1: ..., "1": ...}`` would merge two queries (or documents) into one."""
    with pytest.raises(UDCGInputError, match=r"query ids 1 and '1' are one id as text"):
        evaluate({"1": {"a": 1}}, {1: {"a": 1.0}, "1": {"b": 2.0}}, ["RR"])
    with pytest.raises(UDCGInputError, match=r"query 'q': document ids 7 and '7' are one id"):
        evaluate({"q": {7: 1, "7": 0}}, {"q": {"7": 1.0}}, ["RR"])


def test_frame_and_item_query_ids_that_are_one_id_as_text_are_refused() -> None:
    """A frame's or ir_measures items' query ids 1 and "1" would merge two queries."""
    run = pd.DataFrame({"qid": [1, "1"], "docno": ["a", "b"], "score": [2.0, 1.0]})
    with pytest.raises(UDCGInputError, match=r"query ids 1 and '1' are one id as text"):
        evaluate({"1": {"a": 1}}, run, ["P@1"])
    items = [ir_measures.ScoredDoc(1, "a", 2.0), ir_measures.ScoredDoc("1", "b", 1.0)]
    with pytest.raises(UDCGInputError, match=r"query ids 1 and '1' are one id as text"):
        evaluate({"1": {"a": 1}}, items, ["P@1"])
    same = pd.DataFrame({"qid": [1, np.int64(1)], "docno": ["a", "b"], "score": [2.0, 1.0]})
    assert evaluate({"1": {"a": 1}}, same, ["P@1"]) == {"1": {"P@1": 1.0}}
