"""Reading the Q-CARE release's pipeline output (hand-made files in its format: evaluate.py and
evaluate_retriever.py records, a benchmark file with the chunk texts), then scoring it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from udcg.cli.qcare import main
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import read_contexts
from udcg.qcare import qcare_scores
from udcg.qcare.release import read_release_results

L = math.log2
SQ = "Core subquery"
AF = "Atomic fact"

# nq_test_1 (evaluate.py, BM25, GPT-5): r = (1/2, 0, 0, 1, 0, 0, 1/2, 0, 0, 0)
A_NDCG = (0.5 + 1 / L(5) + 0.5 / L(8)) / (1 + 0.5 / L(3) + 0.5 / 2)
A_NDCG_EXP = (31 + 1023 / L(5) + 31 / L(8)) / (1023 + 31 / L(3) + 31 / 2)
RECORD_A = {
    "qid": "nq_test_1",
    "query": "who wrote emma and when?",
    "model_answer": "Jane Austen, 1815.",
    "gt_answer": "Jane Austen",
    "decomposed_query": {f"{SQ}1": "Who wrote Emma?", f"{SQ}2": "When was Emma published?"},
    "atomic_facts": {f"{AF}1": "Jane Austen wrote Emma.", f"{AF}2": "Emma appeared in 1815."},
    "relevance_check": {
        "query_fact_relevance": {
            f"{SQ}1": {"selected_facts": [f"{AF}1"]},
            f"{SQ}2": {"selected_facts": ["Emma appeared in 1815."]},  # a fact text
        },
        "chunk_fact_relevance": {
            # fact 1 named by key and by text (the release counts it twice), then an entry
            # that matches no claim
            "Chunk 4": {"selected_facts": [f"{AF}1", " Jane Austen wrote Emma. "]},
            "Chunk 9": {"selected_facts": ["Austen's novels"]},
        },
        "query_chunk_coverage": {
            "Chunk 1": [f"{SQ}1"],
            "Chunk 4": [f"{SQ}1", f"{SQ}2"],
            "Chunk 7": [f"{SQ}2"],
        },
        "query_fact_coverage": {f"{SQ}1": "Covered", f"{SQ}2": "Not covered"},
    },
    # what the release computes: its Verifiableness counts 3 distinct entries for 2 facts,
    # a ratio above 1, reported as 0
    "metrics": {
        "completeness": 0.5,
        "conciseness": 0.5,
        "verifiableness": 0.0,
        "ndcg_at_10": A_NDCG,
        "precision_at_10": 0.2,
    },
    "dataset_name": "nq",
    "target_model": "GPT-5",
}
# nq_test_2 (evaluate.py): one sub-query covered by chunks 1 and 3
RECORD_C = {
    "qid": "nq_test_2",
    "query": "capital of france?",
    "model_answer": "Paris",
    "decomposed_query": {f"{SQ}1": "What is the capital of France?"},
    "atomic_facts": {f"{AF}1": "Paris is the capital of France."},
    "relevance_check": {
        "query_fact_relevance": {f"{SQ}1": {"selected_facts": [f"{AF}1"]}},
        "chunk_fact_relevance": {"Chunk 3": {"selected_facts": [f"{AF}1"]}},
        "query_chunk_coverage": {"Chunk 1": [f"{SQ}1"], "Chunk 3": [f"{SQ}1"]},
        "query_fact_coverage": {f"{SQ}1": "Covered"},
    },
    "metrics": {
        "completeness": 1.0,
        "conciseness": 1.0,
        "verifiableness": 1.0,
        "ndcg_at_10": (1 + 1 / 2) / (1 + 1 / L(3)),
        "precision_at_10": 0.2,
    },
    "target_model": "GPT-5",
}
# evaluate_retriever.py record, ANCE, 6 chunks only: r = (0, 1, 0, 0, 0, 1/3)
B_NDCG = (1 / L(3) + (1 / 3) / L(7)) / (1 + (1 / 3) / L(3))
B_NDCG_EXP = (1023 / L(3) + (2 ** (10 / 3) - 1) / L(7)) / (1023 + (2 ** (10 / 3) - 1) / L(3))
RECORD_B = {
    "qid": "hotpotqa_test_5",
    "query": "a, b and c?",
    "decomposed_query": {f"{SQ}1": "a?", f"{SQ}2": "b?", f"{SQ}3": "c?"},
    "query_chunk_coverage": {"Chunk 2": [f"{SQ}1", f"{SQ}2", f"{SQ}3"], "Chunk 6": [f"{SQ}2"]},
    "metrics": {"num_subqueries": 3, "precision_at_10": (4 / 3) / 10, "ndcg_at_10": B_NDCG},
    "retriever": "ANCE",
}
CHUNKS_A = [f"a-{i}" for i in range(1, 13)]
CHUNKS_A[5] = CHUNKS_A[2]  # the same chunk text twice in one list
BENCHMARK = [
    {"qid": "nq_test_1", "query": "...", "retrieved_chunk": {"BM25": CHUNKS_A, "ANCE": []}},
    {"qid": "nq_test_2", "query": "...", "retrieved_chunk": {"BM25": CHUNKS_A[:10]}},
    {"qid": "hotpotqa_test_5", "retrieved_chunk": {"ANCE": [f"b-{i}" for i in range(1, 7)]}},
]


def _write(path: Path, value) -> Path:
    path.write_text(json.dumps(value, indent=2))
    return path


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    return (
        _write(tmp_path / "results.json", [RECORD_A, RECORD_C]),
        _write(tmp_path / "retrieval.json", [RECORD_B]),
        _write(tmp_path / "testbed.json", BENCHMARK),
    )


def test_records_become_labelled_contexts(files) -> None:
    results, retrieval, testbed = files
    a, c = read_release_results(results, testbed)
    assert [p.covers for p in c.passages][:4] == [[True], [False], [True], [False]]
    assert (a.qid, a.run, a.question) == ("nq_test_1", "BM25", "who wrote emma and when?")
    assert a.subqueries == ["Who wrote Emma?", "When was Emma published?"]
    assert [p.doc_id for p in a.passages] == [str(i) for i in range(1, 11)]  # top 10 of 12
    assert [p.text for p in a.passages] == CHUNKS_A[:10]  # a repeated text stays
    assert [p.covers for p in a.passages][:7] == [
        [True, False],
        [False, False],
        [False, False],
        [True, True],
        [False, False],
        [False, False],
        [False, True],
    ]
    outcome = a.outcomes["GPT-5"]
    assert outcome["answer"] == "Jane Austen, 1815."
    assert outcome["claims"] == ["Jane Austen wrote Emma.", "Emma appeared in 1815."]
    assert outcome["subquery_covered"] == [True, False]
    assert outcome["claim_relevance"] == [[True, False], [False, True]]  # text -> fact 2
    assert outcome["claim_support"][0] == [j == 3 for j in range(10)]  # key and text: chunk 4
    assert outcome["claim_support"][1] == [False] * 10
    assert outcome["unresolved_facts"] == 1
    assert a.extra["release_metrics"] == RECORD_A["metrics"]
    (b,) = read_release_results(retrieval, testbed)
    assert (b.run, len(b.passages), b.outcomes) == ("ANCE", 6, {})
    # without the benchmark: k passages without text
    (b,) = read_release_results(retrieval)
    assert [(p.doc_id, p.text) for p in b.passages] == [(str(i), None) for i in range(1, 11)]


def test_scores_reproduce_the_release_where_it_counts_claims(files) -> None:
    results, retrieval, testbed = files
    contexts = read_release_results(results, testbed) + read_release_results(retrieval, testbed)
    scores = qcare_scores(contexts, "GPT-5", k=10)
    values = {name: v.filled(math.nan).tolist() for name, v in scores.values.items()}
    assert values["C-Prec"] == pytest.approx([0.2, 0.2, 0.4 / 3])
    assert values["C-nDCG"] == pytest.approx([A_NDCG, (1 + 1 / 2) / (1 + 1 / L(3)), B_NDCG])
    for ctx, got in zip(
        contexts, zip(values["C-Prec"], values["C-nDCG"], strict=True), strict=True
    ):
        published = ctx.extra["release_metrics"]
        assert got == pytest.approx((published["precision_at_10"], published["ndcg_at_10"]))
    assert values["Completeness"][:2] == [0.5, 1.0]
    assert values["Conciseness"][:2] == [0.5, 1.0]
    # udcg counts claims: fact 1 is supported (by key and by text), fact 2 is not
    assert values["Verifiableness"][:2] == [0.5, 1.0]
    assert contexts[0].extra["release_metrics"]["verifiableness"] == 0.0
    assert math.isnan(values["Completeness"][2])
    assert scores.missing["Completeness"] == {"no labels": 1}
    exp = qcare_scores(contexts, k=10, gain="exponential").values["C-nDCG"].tolist()
    assert exp == pytest.approx([A_NDCG_EXP, (1 + 1 / 2) / (1 + 1 / L(3)), B_NDCG_EXP])


def test_cli_import_then_score(files, tmp_path: Path, capsys) -> None:
    results, _, testbed = files
    out = tmp_path / "contexts.jsonl"
    assert main(["import", str(results), "--benchmark", str(testbed), "-o", str(out)]) == 0
    assert "imported 2 contexts" in capsys.readouterr().out
    assert [c.qid for c in read_contexts(out)] == ["nq_test_1", "nq_test_2"]
    scores = tmp_path / "scores.jsonl"
    argv = ["score", str(out), "--answers-from", "GPT-5", "-k", "10", "--gain", "exponential"]
    assert main([*argv, "-o", str(scores)]) == 0
    rows = [json.loads(line) for line in scores.read_text().splitlines()]
    assert [r["C-nDCG"] for r in rows] == pytest.approx([A_NDCG_EXP, 1.5 / (1 + 1 / L(3))])
    assert [r["Verifiableness"] for r in rows] == [0.5, 1.0]


def test_a_retriever_the_record_does_not_name_is_refused(files, tmp_path: Path, capsys) -> None:
    """adv38 9: coverage judged on ANCE's chunks is not paired with BM25's texts."""
    _, retrieval, testbed = files
    (ctx,) = read_release_results(retrieval, testbed, retriever="ANCE")  # as recorded: fine
    assert ctx.run == "ANCE" and ctx.passages[0].text == "b-1"
    with pytest.raises(UDCGInputError, match=r"judged on 'ANCE' chunks, not on the 'BM25'") as err:
        read_release_results(retrieval, testbed, retriever="BM25")
    assert (err.value.path, err.value.field) == (str(retrieval), "[0].retriever")
    argv = ["import", str(retrieval), "--benchmark", str(testbed), "--retriever", "BM25"]
    assert main([*argv, "-o", str(tmp_path / "o.jsonl")]) == 2
    assert "field '[0].retriever'" in capsys.readouterr().err
    assert not (tmp_path / "o.jsonl").exists()


def _broken(tmp_path: Path, change) -> Path:
    record = json.loads(json.dumps(RECORD_A))
    change(record)
    return _write(tmp_path / "bad.json", [RECORD_C, record])


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (
            lambda r: r["relevance_check"]["query_chunk_coverage"].update({"Chunk 11": []}),
            "[1].relevance_check.query_chunk_coverage.Chunk 11",
            r"'Chunk N' with N in 1..10",
        ),
        (
            lambda r: r["relevance_check"]["query_chunk_coverage"].update({"Chunk 0": []}),
            "[1].relevance_check.query_chunk_coverage.Chunk 0",
            "1..10",
        ),
        (
            lambda r: r["relevance_check"]["query_chunk_coverage"].update({"Chunk 2": [f"{SQ}3"]}),
            "[1].relevance_check.query_chunk_coverage.Chunk 2",
            "names 'Core subquery3'",
        ),
        (
            lambda r: r.update(decomposed_query="Who wrote Emma?"),
            "[1].decomposed_query",
            "must be an object",
        ),
        (
            lambda r: r["relevance_check"]["query_fact_coverage"].update({f"{SQ}1": "Maybe"}),
            "[1].relevance_check.query_fact_coverage.Core subquery1",
            "'Covered' or 'Not covered'",
        ),
        (
            lambda r: r["relevance_check"]["chunk_fact_relevance"].update(
                {"Chunk 2": {"selected_facts": "Atomic fact1"}}
            ),
            "[1].relevance_check.chunk_fact_relevance.Chunk 2.selected_facts",
            "list of strings",
        ),
        (lambda r: r.pop("decomposed_query"), "[1].decomposed_query", "missing"),
    ],
)
def test_malformed_cells_are_located_errors(tmp_path: Path, change, field, message) -> None:
    path = _broken(tmp_path, change)
    with pytest.raises(UDCGInputError, match=message) as err:
        read_release_results(path)
    assert (err.value.path, err.value.field) == (str(path), field)


def test_malformed_files(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('[\n  {"qid": "q1",\n  "decomposed_query": }\n]')
    with pytest.raises(UDCGInputError, match="malformed JSON") as err:
        read_release_results(bad)
    assert err.value.line == 3
    _write(bad, {"qid": "q1"})
    with pytest.raises(UDCGInputError, match="expected a JSON list"):
        read_release_results(bad)
    results = _write(tmp_path / "r.json", [RECORD_A])
    testbed = _write(tmp_path / "t.json", BENCHMARK[1:])
    with pytest.raises(UDCGInputError, match="'nq_test_1' is not in the benchmark file"):
        read_release_results(results, testbed)
    assert (
        main(["import", str(results), "-o", str(tmp_path / "o.jsonl"), "--benchmark", str(testbed)])
        == 2
    )
    assert "is not in the benchmark file" in capsys.readouterr().err
    # a qid twice: the same chunks are one record; other chunks leave the run's list unknown
    testbed = _write(tmp_path / "t.json", [*BENCHMARK, BENCHMARK[0]])
    assert read_release_results(results, testbed) == read_release_results(
        results, _write(tmp_path / "one.json", BENCHMARK)
    )
    twice = {**BENCHMARK[0], "retrieved_chunk": {"BM25": CHUNKS_A[::-1]}}
    testbed = _write(tmp_path / "t.json", [*BENCHMARK, twice])
    with pytest.raises(UDCGInputError, match="qid 'nq_test_1' is given twice, with other"):
        read_release_results(results, testbed)
