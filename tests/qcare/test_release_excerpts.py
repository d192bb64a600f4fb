"""The Q-CARE release's annotation rows against its published per-query scores.

``tests/qcare/data/release/`` holds hand-made excerpts of GPT-5's close-ended ``[Chunk]`` file
(5 rows) and ``[Query]`` file (its first row: ten queries) with every label cell verbatim, and
GPT-5's published per-query scores (see its README). What follows from the released labels
is reproduced; where the published numbers do not follow from them (the release computed its
human scores from intermediate files it does not publish), the test pins that, and shows
that the published C-nDCG values are exponential-gain values by finding, for each published
record, the coverage labels that give its C-Prec and C-nDCG."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from udcg.cli.qcare import main
from udcg.errors import UDCGInputError
from udcg.metrics.coverage import c_ndcg, c_precision
from udcg.qcare.human import read_human_labels
from udcg.qcare.published import compare_published, read_query_level_results
from udcg.qcare.scores import qcare_scores

RELEASE = Path(__file__).parent / "data" / "release"
SCORES = RELEASE / "[close_ended][GPT-5]query_level_results.json"
CSVS = sorted(RELEASE.glob("*annotation*.csv"))
QUERY_ROW = ["nq_test_812", "nq_test_544", "nq_test_78", "nq_test_975", "nq_test_1270",
             "nq_test_1311", "nq_test_332", "nq_test_66", "nq_test_375", "nq_test_453"]  # fmt: skip
CHUNK_ROWS = ["nq_test_812", "nq_test_544", "hotpotqa_test_1197", "hotpotqa_test_2059",
              "newsqa_test_420"]  # fmt: skip


def _published() -> dict[str, dict[str, float]]:
    return {q.qid: q.values for q in read_query_level_results(SCORES)}


def test_the_excerpts_load_one_context_per_query() -> None:
    contexts, report = read_human_labels(CSVS)
    assert [p.name for p in CSVS] == [
        "[Chunk]test-close_ended_annotation_Qwen3-80B_GPT-5_reasoning.csv",
        "[Query]test-close_ended_annotation_Qwen3-80B_GPT-5_reasoning.csv",
    ]
    assert sorted(c.qid for c in contexts) == sorted(set(QUERY_ROW + CHUNK_ROWS))
    assert (report.rows, report.attention_items, report.attention_labels) == (6, 6, 0)
    by_qid = {c.qid: c for c in contexts}
    # nq_test_544: chunks 1-4 cover its one sub-query (labels read by hand from the row)
    assert [p.covers for p in by_qid["nq_test_544"].passages] == [[True]] * 4 + [[False]] * 6
    # hotpotqa_test_2059: chunks 1, 4, 7, 9 cover both sub-queries, 3 and 6 the first
    assert [sum(p.covers) for p in by_qid["hotpotqa_test_2059"].passages] == [
        2, 0, 1, 2, 0, 1, 2, 0, 2, 0
    ]  # fmt: skip


@pytest.mark.parametrize("gain", ["linear", "exponential"])
def test_what_follows_from_the_released_labels_is_reproduced(gain: str) -> None:
    published = _published()
    contexts, _ = read_human_labels(CSVS)
    scores = qcare_scores(contexts, "GPT-5", 10, gain=gain)
    value = {
        (c.qid, m): float(scores.values[m][i])
        for i, c in enumerate(contexts)
        for m in scores.values
        if not np.ma.getmaskarray(scores.values[m])[i]
    }
    for qid in QUERY_ROW:  # the [Query] row: the answer's coverage and claim relevance
        for metric in ("Completeness", "Conciseness"):
            assert value[qid, metric] == published[qid][metric], (qid, metric)
    for qid in ("nq_test_812", "nq_test_544"):  # one sub-query: both gains agree
        assert value[qid, "C-Prec"] == published[qid]["C-Prec"]
        assert value[qid, "C-nDCG"] == pytest.approx(published[qid]["C-nDCG"], rel=1e-15)
    for qid in ("nq_test_544", "hotpotqa_test_2059", "newsqa_test_420"):
        assert value[qid, "Verifiableness"] == published[qid]["Verifiableness"] == 1.0


def test_the_check_command_counts_where_the_labels_and_the_published_scores_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    human = tmp_path / "human.jsonl"
    assert main(["import", *map(str, CSVS), "-o", str(human)]) == 0
    capsys.readouterr()
    assert main(["published", str(SCORES), "--check", str(human), "--gain", "exponential"]) == 0
    lines = {line.split()[2]: line for line in capsys.readouterr().out.splitlines()[2:]}
    assert " 10/10 " in lines["Completeness"] and " 10/10 " in lines["Conciseness"]
    # multi-sub-query rows: the released coverage labels do not give the published numbers
    assert " 3/5 " in lines["C-Prec"] and "hotpotqa_test_1197, newsqa_test_420" in lines["C-Prec"]
    assert " 2/5 " in lines["C-nDCG"]
    assert "hotpotqa_test_1197, hotpotqa_test_2059, newsqa_test_420" in lines["C-nDCG"]
    # nq_test_812 and hotpotqa_test_1197: no claim is supported in the [Chunk] rows
    # (chunk_fact_relevance_check is {}), yet the published Verifiableness is 1
    assert " 3/5 " in lines["Verifiableness"]
    assert "nq_test_812, hotpotqa_test_1197" in lines["Verifiableness"]
    assert all("(no labelled context: 147)" in line for line in lines.values())


def _patterns(n: int) -> np.ndarray:
    """Every list of 10 per-chunk coverages ``r_j`` in {0, 1/n, ..., 1}."""
    levels = np.arange(n + 1) / n
    return levels[np.array(list(itertools.product(range(n + 1), repeat=10)))]


def test_the_published_c_ndcg_values_are_exponential_gain_values() -> None:
    """For each published record with 2 or 3 sub-queries and 0 < C-nDCG < 1 (both GPT-5
    files), search the coverage lists with the published C-Prec for one whose C-nDCG equals
    the published value (1e-12): exponential gain explains 57 of the 63, linear gain 39, and
    every record that linear explains exponential explains too; the other 6 need coverages
    that are not multiples of 1/n (the release drops unlabelled sub-queries from n)."""
    explained: dict[str, list[str]] = {"linear": [], "exponential": []}
    records = [
        r
        for split in ("close_ended", "open_ended")
        for r in json.loads((RELEASE / f"[{split}][GPT-5]query_level_results.json").read_text())
        if r["num_subqueries"] in (2, 3) and 0 < r["ndcg_at_10"] < 1
    ]
    patterns = {n: _patterns(n) for n in (2, 3)}
    for r in records:
        found = patterns[r["num_subqueries"]]
        found = found[np.abs(c_precision(found, k=10) - r["precision_at_10"]) < 1e-9]
        for gain, qids in explained.items():
            if (np.abs(c_ndcg(found, k=10, gain=gain) - r["ndcg_at_10"]) < 1e-12).any():
                qids.append(r["qid"])
    assert len(records) == 63
    assert (len(explained["exponential"]), len(explained["linear"])) == (57, 39)
    assert set(explained["linear"]) < set(explained["exponential"])


@pytest.mark.parametrize(
    ("qid", "coverage"),
    [  # the coverage lists the search finds; the released [Chunk] rows hold other labels
        ("hotpotqa_test_2059", [0.5, 0, 1, 0.5, 0, 1, 1, 0, 1, 0]),
        ("newsqa_test_420", [0.5, 1, 1, 1, 0.5, 0, 0, 0.5, 0.5, 0]),
    ],
)
def test_exponential_gain_gives_the_published_value_and_linear_does_not(
    qid: str, coverage: list[float]
) -> None:
    published = _published()[qid]
    assert c_precision([coverage], k=10)[0] == pytest.approx(published["C-Prec"], abs=1e-15)
    exponential = c_ndcg([coverage], k=10, gain="exponential")[0]
    assert exponential == pytest.approx(published["C-nDCG"], abs=1e-12)
    assert abs(c_ndcg([coverage], k=10)[0] - published["C-nDCG"]) > 0.05


def test_compare_published_counts_queries_without_context() -> None:
    contexts, _ = read_human_labels(CSVS)
    matches = compare_published(contexts, read_query_level_results(SCORES), gain="exponential")
    assert {m.absent for m in matches} == {160 - len(set(QUERY_ROW + CHUNK_ROWS))}


def test_compare_published_refuses_two_contexts_of_one_query() -> None:
    contexts, _ = read_human_labels(CSVS)
    with pytest.raises(UDCGInputError, match="two labelled contexts for query 'nq_test_812'"):
        compare_published([*contexts, contexts[0]], read_query_level_results(SCORES))
