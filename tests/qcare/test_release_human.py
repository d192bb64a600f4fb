"""Reading the Q-CARE release's human annotation CSVs ([Query] and [Chunk] files), scoring
them, the release's aggregate table, and judge/human and human/human agreement.

The files are hand-made in the release's format: UTF-8 with a byte-order mark, Python-literal
cells, an injected attention item per row, ``general_<item>_<K>`` keys in [Query] files and
0-based ``Chunk N`` positions among the row's items (attention included) in [Chunk] files.
Expected labels are written out by hand in real chunk positions.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from udcg.cli.qcare import main
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import read_contexts, write_contexts
from udcg.qcare import agreement, qcare_scores, read_release_results
from udcg.qcare.agreement import annotator_agreement, krippendorff_alpha
from udcg.qcare.human import read_annotation_csv, read_human_labels
from udcg.qcare.release import TABLE_HEADER, release_table, write_release_table

COLUMNS = [
    "idx",
    "qid",
    "query",
    "decomposed_query",
    "atomic_facts",
    "retrieved_chunk",
    "key_counts",
    "query_fact_relevance_check",
    "chunk_fact_relevance_check",
    "query_fact_coverage_check",
    "query_chunk_coverage_check",
    "query_fact_relevance_check_reasoning",
    "chunk_fact_relevance_check_reasoning",
    "query_fact_coverage_check_reasoning",
    "query_chunk_coverage_check_reasoning",
    "attention_check",
]
SQ = "Core subquery"
AF = "Atomic fact"
QUESTIONS = {
    "nq_test_1": ("who wrote emma?", ["Who wrote Emma?"]),
    "nq_test_2": ("who wrote emma and when?", ["Who wrote Emma?", "When was Emma published?"]),
    "hotpotqa_test_1": ("which river and which city?", ["Which river?", "Which city?"]),
    "science-test_1": ("why is the sky blue?", ["Why is the sky blue?"]),
}
CHUNKS = {qid: [f"{qid} passage {j}, about something." for j in range(10)] for qid in QUESTIONS}
CLAIMS = {
    ("GPT-5", "nq_test_1"): ["Jane Austen wrote Emma."],
    ("GPT-5", "nq_test_2"): ["Jane Austen wrote Emma.", "Emma appeared in 1815."],
    ("GPT-5", "hotpotqa_test_1"): ["The river is the Thames."],
    ("GPT-5", "science-test_1"): ["Rayleigh scattering.", "Blue light scatters more.", "Hi."],
    ("Qwen3_4B", "nq_test_1"): ["Austen."],
    ("Qwen3_4B", "nq_test_2"): ["Austen wrote it.", "It came out in 1816."],
    ("Qwen3_4B", "hotpotqa_test_1"): ["The Thames.", "London."],
}
ATTENTION_QUERY = ("what is the capital of peru?", ["What is the capital of Peru?"], ["Lima."])

# [Chunk] rows: (model, qid, attention item, coverage, support), keys in item positions
CHUNK_ROWS = [
    ("GPT-5", "nq_test_1", 9, {"Chunk 1": [f"{SQ}1"], "Chunk 9": [f"{SQ}1"],
                               "Chunk 10": [f"{SQ}1"]}, {"Chunk 1": [f"{AF}1"]}),
    ("GPT-5", "nq_test_2", 4, {"Chunk 0": [f"{SQ}1", f"{SQ}2"], "Chunk 5": [f"{SQ}2"]},
     {"Chunk 5": [f"{AF}2", "Jane Austen wrote Emma."]}),
    ("GPT-5", "hotpotqa_test_1", 0, {"Chunk 3": [f"{SQ}1"]}, {}),
    ("Qwen3_4B", "nq_test_1", 2, {"Chunk 1": [f"{SQ}1"], "Chunk 3": [f"{SQ}1"]},
     {"Chunk 3": [f"{AF}1"]}),
    ("Qwen3_4B", "nq_test_2", 10, {"Chunk 0": [f"{SQ}1"]}, {"Chunk 0": [f"{AF}1"]}),
    ("Qwen3_4B", "hotpotqa_test_1", 5, {"Chunk 3": [f"{SQ}1"], "Chunk 6": [f"{SQ}2"]},
     {"Chunk 6": [f"{AF}1", "no such claim"]}),
    ("GPT-5", "science-test_1", 3, {"Chunk 0": [f"{SQ}1"], "Chunk 4": [f"{SQ}1"]},
     {"Chunk 0": [f"{AF}1", f"{AF}2"]}),
]  # fmt: skip
# the same labels in real chunk positions (0..9), by hand: {chunk: sub-queries}, {claim: chunks}
COVERS = {
    ("GPT-5", "nq_test_1"): {1: [0], 9: [0]},
    ("GPT-5", "nq_test_2"): {0: [0, 1], 4: [1]},
    ("GPT-5", "hotpotqa_test_1"): {2: [0]},
    ("Qwen3_4B", "nq_test_1"): {1: [0], 2: [0]},
    ("Qwen3_4B", "nq_test_2"): {0: [0]},
    ("Qwen3_4B", "hotpotqa_test_1"): {3: [0], 5: [1]},
    ("GPT-5", "science-test_1"): {0: [0], 3: [0]},
}
SUPPORT = {
    ("GPT-5", "nq_test_1"): {0: [1]},
    ("GPT-5", "nq_test_2"): {0: [4], 1: [4]},
    ("GPT-5", "hotpotqa_test_1"): {},
    ("Qwen3_4B", "nq_test_1"): {0: [2]},
    ("Qwen3_4B", "nq_test_2"): {0: [0]},
    ("Qwen3_4B", "hotpotqa_test_1"): {0: [5]},
    ("GPT-5", "science-test_1"): {0: [0], 1: [0]},
}
# [Query] rows: items in order (None = the attention item), coverage by general_<item>_<K>,
# relevance per item and sub-query (claim texts or keys)
QUERY_ITEMS = ["nq_test_1", None, "nq_test_2", "hotpotqa_test_1"]
QUERY_LABELS = {
    "GPT-5": (
        {"general_0_1": "Covered", "general_1_1": "Covered", "general_2_1": "Covered",
         "general_2_2": "Not covered", "general_3_1": "Covered", "general_3_2": "Not covered"},
        [[["Jane Austen wrote Emma."]], [["Lima."]], [["Jane Austen wrote Emma."], []],
         [[f"{AF}1"], []]],
    ),
    "Qwen3_4B": (
        {"general_0_1": "Covered", "general_2_1": "Covered", "general_2_2": "Covered",
         "general_3_1": "Covered", "general_3_2": "Covered"},
        [[["Austen."]], [["Lima."]], [["Austen wrote it."], ["It came out in 1816."]],
         [["The Thames."], ["London.", " The Thames. "]]],
    ),
}  # fmt: skip
# per (model, qid): sub-queries the answer covers, {claim: relevant sub-queries}
COVERED = {
    ("GPT-5", "nq_test_1"): [True],
    ("GPT-5", "nq_test_2"): [True, False],
    ("GPT-5", "hotpotqa_test_1"): [True, False],
    ("Qwen3_4B", "nq_test_1"): [True],
    ("Qwen3_4B", "nq_test_2"): [True, True],
    ("Qwen3_4B", "hotpotqa_test_1"): [True, True],
    ("GPT-5", "science-test_1"): [True],
}
RELEVANT = {
    ("GPT-5", "nq_test_1"): {0: [0]},
    ("GPT-5", "nq_test_2"): {0: [0]},
    ("GPT-5", "hotpotqa_test_1"): {0: [0]},
    ("Qwen3_4B", "nq_test_1"): {0: [0]},
    ("Qwen3_4B", "nq_test_2"): {0: [0], 1: [1]},
    ("Qwen3_4B", "hotpotqa_test_1"): {0: [0, 1], 1: [1]},
    ("GPT-5", "science-test_1"): {0: [0], 1: [0]},
}


def _write(path: Path, rows: list[dict]) -> Path:
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow([row[c] if isinstance(row[c], str) else repr(row[c]) for c in COLUMNS])
    path.write_text("\ufeff" + text.getvalue(), encoding="utf-8")
    return path


def _chunk_row(model: str, qid: str, attention: int, coverage: dict, support: dict) -> dict:
    question, subqueries = QUESTIONS[qid]
    claims = CLAIMS[(model, qid)]
    n = 11
    chunks = iter(CHUNKS[qid])

    def per_item(value, other):
        return [other if i == attention else value for i in range(n)]

    return {
        "idx": per_item("0", "attention"),
        "qid": per_item(qid, "attention"),
        "query": per_item(question, ATTENTION_QUERY[0]),
        "decomposed_query": per_item(subqueries, ATTENTION_QUERY[1]),
        "atomic_facts": per_item(claims, ATTENTION_QUERY[2]),
        "retrieved_chunk": ["Lima is the capital." if i == attention else next(chunks)
                            for i in range(n)],
        "key_counts": per_item([len(subqueries), len(claims)], [1, 1]),
        "query_fact_relevance_check": per_item({f"{SQ}1": {"selected_facts": [f"{AF}1"]}},
                                               [["Lima."]]),
        "chunk_fact_relevance_check": support,
        "query_fact_coverage_check": per_item({f"{SQ}1": "Covered"}, "attention"),
        "query_chunk_coverage_check": coverage,
        "query_fact_relevance_check_reasoning": [[["Dummy reasoning text for attention check"]]],
        "chunk_fact_relevance_check_reasoning": per_item(["The chunk says so."], ["No."]),
        "query_fact_coverage_check_reasoning": per_item("Covered.", ["No."]),
        "query_chunk_coverage_check_reasoning": per_item(["It answers it."], ["No."]),
        "attention_check": ["1" if i == attention else "0" for i in range(n)],
    }  # fmt: skip


def _query_row(model: str) -> dict:
    coverage, relevance = QUERY_LABELS[model]
    items = QUERY_ITEMS

    def per_item(pick, other):
        return [other if q is None else pick(q) for q in items]

    return {
        "idx": per_item(lambda q: str(items.index(q)), "attention"),
        "qid": per_item(lambda q: q, "attention"),
        "query": per_item(lambda q: QUESTIONS[q][0], ATTENTION_QUERY[0]),
        "decomposed_query": per_item(lambda q: QUESTIONS[q][1], ATTENTION_QUERY[1]),
        "atomic_facts": per_item(lambda q: CLAIMS[(model, q)], ATTENTION_QUERY[2]),
        "retrieved_chunk": per_item(lambda q: CHUNKS[q], ["Lima is the capital."] * 10),
        "key_counts": per_item(lambda q: [len(QUESTIONS[q][1]), len(CLAIMS[(model, q)])],
                               [1, 1]),
        "query_fact_relevance_check": relevance,
        "chunk_fact_relevance_check": per_item(lambda q: {}, "attention"),
        "query_fact_coverage_check": coverage,
        "query_chunk_coverage_check": per_item(lambda q: {"Chunk 1": [f"{SQ}1"]}, "attention"),
        "query_fact_relevance_check_reasoning": [["Dummy reasoning text for attention check"]],
        "chunk_fact_relevance_check_reasoning": per_item(lambda q: [], []),
        "query_fact_coverage_check_reasoning": per_item(lambda q: ["Yes."], ["No."]),
        "query_chunk_coverage_check_reasoning": per_item(lambda q: [], []),
        "attention_check": ["1" if q is None else "0" for q in items],
    }  # fmt: skip


def _name(kind: str, split: str, model: str) -> str:
    return f"[{kind}]test-{split}_annotation_Qwen3-80B_{model}_reasoning.csv"


@pytest.fixture
def release(tmp_path: Path) -> list[Path]:
    """The annotation files of two target models (close-ended) and one (open-ended)."""
    paths = []
    for model in ("GPT-5", "Qwen3_4B"):
        folder = tmp_path / model
        folder.mkdir()
        rows = [_chunk_row(*spec) for spec in CHUNK_ROWS if spec[0] == model]
        close = [r for r in rows if "science-test_1" not in r["qid"]]
        paths.append(_write(folder / _name("Chunk", "close_ended", model), close))
        paths.append(_write(folder / _name("Query", "close_ended", model), [_query_row(model)]))
    science = [r for r in (_chunk_row(*s) for s in CHUNK_ROWS) if "science-test_1" in r["qid"]]
    paths.append(_write(tmp_path / "GPT-5" / _name("Chunk", "open_ended", "GPT-5"), science))
    query = _query_row("GPT-5")
    query.update(
        {
            "idx": ["0", "attention"],
            "qid": ["science-test_1", "attention"],
            "query": [QUESTIONS["science-test_1"][0], "x?"],
            "decomposed_query": [QUESTIONS["science-test_1"][1], ["x?"]],
            "atomic_facts": [CLAIMS[("GPT-5", "science-test_1")], ["y."]],
            "retrieved_chunk": [CHUNKS["science-test_1"], ["z"] * 10],
            "query_fact_relevance_check": [[[f"{AF}1", "Blue light scatters more."]], [[]]],
            "query_fact_coverage_check": {"general_0_1": "Covered"},
            "attention_check": ["0", "1"],
        }
    )
    for column in ("key_counts", "chunk_fact_relevance_check", "query_chunk_coverage_check"):
        query[column] = query[column][:2]
    paths.append(_write(tmp_path / "GPT-5" / _name("Query", "open_ended", "GPT-5"), [query]))
    return paths


def _grid(cells: dict, rows: int, cols: int) -> list[list[bool]]:
    return [[c in cells.get(r, []) for c in range(cols)] for r in range(rows)]


def _reference(model: str, qid: str) -> dict[str, float]:
    """The five metrics of one answer from the labels written out by hand, by the formulas."""
    n_sub, claims = len(QUESTIONS[qid][1]), CLAIMS[(model, qid)]
    covers = _grid(COVERS[(model, qid)], 10, n_sub)
    r = [sum(row) / n_sub for row in covers]
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(r))
    ideal = sum(g / math.log2(i + 2) for i, g in enumerate(sorted(r, reverse=True)))
    covered = COVERED[(model, qid)]
    relevant = _grid(RELEVANT[(model, qid)], len(claims), n_sub)
    support = _grid(SUPPORT[(model, qid)], len(claims), 10)
    return {
        "C-Prec": sum(r) / 10,
        "C-nDCG": dcg / ideal if ideal else 0.0,
        "Completeness": sum(covered) / n_sub,
        "Conciseness": sum(
            any(rel and c for rel, c in zip(row, covered, strict=True)) for row in relevant
        )
        / len(claims),
        "Verifiableness": sum(any(row) for row in support) / len(claims),
    }


def test_chunk_file_positions_attention_and_labels(release: list[Path]) -> None:
    from udcg.qcare.human import AnnotationReport

    report = AnnotationReport()
    annotations = read_annotation_csv(release[0], report=report)
    assert [a.qid for a in annotations] == ["nq_test_1", "nq_test_2", "hotpotqa_test_1"]
    for a in annotations:
        key = ("GPT-5", a.qid)
        assert (a.kind, a.model, a.annotator, a.split) == ("chunk", "GPT-5", "GPT-5", "close_ended")
        assert a.chunks == CHUNKS[a.qid]  # the attention chunk is gone, order kept
        assert a.labels["covers"] == _grid(COVERS[key], 10, len(QUESTIONS[a.qid][1]))
        assert a.labels["claim_support"] == _grid(SUPPORT[key], len(CLAIMS[key]), 10)
        assert a.source[1] >= 2
    # one attention item per row; one label given on it (nq_test_1's "Chunk 9")
    assert (report.rows, report.attention_items, report.attention_labels) == (3, 3, 1)


def test_query_file_general_keys_and_claim_texts(release: list[Path]) -> None:
    from udcg.qcare.human import AnnotationReport

    report = AnnotationReport()
    annotations = read_annotation_csv(release[3], report=report)  # Qwen3_4B [Query]
    assert [a.qid for a in annotations] == ["nq_test_1", "nq_test_2", "hotpotqa_test_1"]
    for a in annotations:
        key = ("Qwen3_4B", a.qid)
        assert a.kind == "query" and a.chunks == CHUNKS[a.qid]
        assert a.labels["subquery_covered"] == COVERED[key]
        n_sub = len(QUESTIONS[a.qid][1])
        assert a.labels["claim_relevance"] == _grid(RELEVANT[key], len(CLAIMS[key]), n_sub)
    assert (report.attention_items, report.attention_labels, report.unresolved_facts) == (1, 0, 0)
    report = AnnotationReport()
    read_annotation_csv(release[1], report=report)  # GPT-5: labels general_1_1 (attention)
    assert report.attention_labels == 1


def test_contexts_scores_equal_the_formulas(release: list[Path]) -> None:
    contexts, report = read_human_labels(release)
    assert report.files == 6 and report.unresolved_facts == 1  # "no such claim"
    by_qid = {c.qid: c for c in contexts}
    assert sorted(by_qid) == sorted(QUESTIONS)
    assert by_qid["nq_test_1"].extra == {"split": "close_ended", "dataset": "nq_"}
    assert by_qid["science-test_1"].extra == {"split": "open_ended", "dataset": "science-"}
    for (model, qid), _ in COVERS.items():
        ctx = by_qid[qid]
        assert ctx.run == "BM25" and ctx.subqueries == QUESTIONS[qid][1]
        assert ctx.question == QUESTIONS[qid][0]
        assert [p.text for p in ctx.passages] == CHUNKS[qid]
        # the model's own annotator's coverage, as the release scores each model
        mine = [p.extra["covers_by_annotator"][model] for p in ctx.passages]
        assert mine == _grid(COVERS[(model, qid)], 10, len(QUESTIONS[qid][1]))
        single = release_table([ctx], [model], metrics=["C-Prec", "C-nDCG"])
        expected = _reference(model, qid)
        column = TABLE_HEADER.index("NQ" if qid.startswith("nq") else "HotpotQA")
        if qid.startswith("science"):
            column = TABLE_HEADER.index("LoTTE-Sci.")
        assert single[0][column] == pytest.approx(expected["C-Prec"], abs=1e-12)
        assert single[1][column] == pytest.approx(expected["C-nDCG"], abs=1e-12)
        scores = qcare_scores([ctx], answers_from=model)
        for metric in ("Completeness", "Conciseness", "Verifiableness"):
            assert scores.values[metric][0] == pytest.approx(expected[metric], abs=1e-12)


def test_annotator_mean_is_fractional_coverage(release: list[Path]) -> None:
    contexts, _ = read_human_labels(release)
    ctx = next(c for c in contexts if c.qid == "nq_test_2")
    gpt, qwen = (_grid(COVERS[(m, "nq_test_2")], 10, 2) for m in ("GPT-5", "Qwen3_4B"))
    for j, p in enumerate(ctx.passages):
        assert p.extra["covers_prob"] == [(a + b) / 2 for a, b in zip(gpt[j], qwen[j], strict=True)]
        # majority of two: agreement gives the label, a split vote gives null
        assert p.covers == [a if a == b else None for a, b in zip(gpt[j], qwen[j], strict=True)]
    # C-Prec is linear in the labels: fractional C-Prec = the annotators' mean C-Prec
    fractional = qcare_scores([ctx], coverage="fractional").values["C-Prec"][0]
    per_annotator = [_reference(m, "nq_test_2")["C-Prec"] for m in ("GPT-5", "Qwen3_4B")]
    assert fractional == pytest.approx(sum(per_annotator) / 2, abs=1e-12)
    # boolean coverage with a tie is missing, and says why
    boolean = qcare_scores([ctx])
    assert np.ma.getmaskarray(boolean.values["C-Prec"])[0]
    assert dict(boolean.missing["C-Prec"]) == {"a check without a usable answer": 1}


def test_jsonl_round_trip(release: list[Path], tmp_path: Path) -> None:
    contexts, _ = read_human_labels(release)
    out = tmp_path / "human.jsonl"
    write_contexts(out, contexts)
    assert list(read_contexts(out)) == contexts


def test_release_table_reproduces_the_formula(release: list[Path], tmp_path: Path) -> None:
    contexts, _ = read_human_labels(release)
    rows = release_table(contexts)
    metrics = ["Completeness", "Conciseness", "Verifiableness"]
    assert [r[:3] for r in rows] == [
        ["Open Source" if m == "Qwen3_4B" else "Proprietary", m, metric]
        for m in ("Qwen3_4B", "GPT-5")
        for metric in metrics
    ] + [["", metric, "Overall"] for metric in metrics]
    datasets = {"NQ": "nq_", "HotpotQA": "hotpotqa_", "LoTTE-Sci.": "science-"}

    def mean(values):
        return sum(values) / len(values) if values else None

    expected = {}
    for model in ("Qwen3_4B", "GPT-5"):
        for metric in metrics:
            cells = {
                label: mean(
                    [_reference(m, q)[metric] for (m, q) in COVERS if m == model
                     and q.startswith(prefix)]
                )
                for label, prefix in datasets.items()
            }  # fmt: skip
            expected[(model, metric)] = cells
    for row in rows[:6]:
        cells = expected[(row[1], row[2])]
        for label, value in cells.items():
            assert row[TABLE_HEADER.index(label)] == pytest.approx(value, abs=1e-12)
        for label in ("NewsQA", "FinQA", "PubMedQA", "LoTTE-Tech.", "ELI5"):
            assert row[TABLE_HEADER.index(label)] is None
        close = [cells["NQ"], cells["HotpotQA"]]
        assert row[TABLE_HEADER.index("Close Avg.")] == pytest.approx(mean(close), abs=1e-12)
        opened = row[TABLE_HEADER.index("Open Avg.")]
        assert opened == (
            None if cells["LoTTE-Sci."] is None else pytest.approx(cells["LoTTE-Sci."])
        )
    for row in rows[6:]:
        metric = row[1]
        for label in ("NQ", "HotpotQA"):
            both = [expected[(m, metric)][label] for m in ("Qwen3_4B", "GPT-5")]
            assert row[TABLE_HEADER.index(label)] == pytest.approx(mean(both), abs=1e-12)
        only = expected[("GPT-5", metric)]["LoTTE-Sci."]
        assert row[TABLE_HEADER.index("LoTTE-Sci.")] == pytest.approx(only, abs=1e-12)
    path = tmp_path / "table.csv"
    write_release_table(path, rows)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == (
        "Group,LLM,Metric,NQ,NewsQA,HotpotQA,FinQA,Close Avg.,PubMedQA,LoTTE-Sci.,"
        "LoTTE-Tech.,ELI5,Open Avg."
    )
    table = list(csv.reader(lines))
    for written, row in zip(table[1:], rows, strict=True):
        for text, value in zip(written[3:], row[3:], strict=True):
            if value is None:
                assert text == ""
            else:
                assert float(text) == round(value, 3) and len(text.split(".")[-1]) <= 3


def test_annotator_agreement_against_references(release: list[Path]) -> None:
    krippendorff = pytest.importorskip("krippendorff")
    contexts, _ = read_human_labels(release)
    result = annotator_agreement(contexts)
    assert result.annotators == ("GPT-5", "Qwen3_4B")
    # units: every (query, chunk, sub-query) both annotators labelled
    shared = [q for q in QUESTIONS if ("Qwen3_4B", q) in COVERS]
    gpt = [v for q in shared for row in _grid(COVERS[("GPT-5", q)], 10, len(QUESTIONS[q][1]))
           for v in row]  # fmt: skip
    qwen = [v for q in shared for row in _grid(COVERS[("Qwen3_4B", q)], 10, len(QUESTIONS[q][1]))
            for v in row]  # fmt: skip
    assert result.units == len(gpt)
    data = np.array([gpt, qwen], dtype=float)
    expected = krippendorff.alpha(reliability_data=data, level_of_measurement="nominal")
    assert result.alpha == pytest.approx(expected, abs=1e-12)
    rows = {row.metric: row for row in result.rows}
    for metric in ("C-Prec", "C-nDCG"):
        a = [_reference("GPT-5", q)[metric] for q in shared]
        b = [_reference("Qwen3_4B", q)[metric] for q in shared]
        assert rows[metric].split == "GPT-5 vs Qwen3_4B" and rows[metric].n == 3
        assert rows[metric].pearson == pytest.approx(pearsonr(a, b)[0], abs=1e-12)
        assert rows[metric].spearman == pytest.approx(spearmanr(a, b)[0], abs=1e-12)


def test_krippendorff_alpha_with_missing_values() -> None:
    krippendorff = pytest.importorskip("krippendorff")
    rng = np.random.default_rng(7)
    data = rng.integers(0, 3, size=(4, 30)).astype(float)
    data[rng.random(data.shape) < 0.3] = np.nan
    expected = krippendorff.alpha(reliability_data=data, level_of_measurement="nominal")
    assert krippendorff_alpha(data) == pytest.approx(expected, abs=1e-12)
    assert math.isnan(krippendorff_alpha([[1.0, 1.0], [1.0, 1.0]]))  # no variation


def test_judge_against_human(release: list[Path], tmp_path: Path) -> None:
    """A judge's results file (the pipeline's layout) against the human labels: per query,
    Pearson and Spearman of each metric, as the release's human_agreement.py reports."""
    judge_cov = {
        "nq_test_1": {"Chunk 2": [f"{SQ}1"]},
        "nq_test_2": {"Chunk 1": [f"{SQ}1"]},
        "hotpotqa_test_1": {"Chunk 3": [f"{SQ}1", f"{SQ}2"], "Chunk 4": [f"{SQ}2"]},
    }
    records = [
        {
            "qid": qid,
            "query": QUESTIONS[qid][0],
            "decomposed_query": {f"{SQ}{i + 1}": s for i, s in enumerate(QUESTIONS[qid][1])},
            "relevance_check": {"query_chunk_coverage": cov},
        }
        for qid, cov in judge_cov.items()
    ]
    results = tmp_path / "results.json"
    results.write_text(json.dumps(records), encoding="utf-8")
    judge = read_release_results(results)
    human, _ = read_human_labels(release)
    human = [c for c in human if c.qid in judge_cov]
    rows, _ = agreement(judge, human, coverage="fractional")
    human_prec = [np.mean([_reference(m, q)["C-Prec"] for m in ("GPT-5", "Qwen3_4B")])
                  for q in judge_cov]  # fmt: skip
    judge_prec = [0.1, 0.05, 0.15]  # r: (1), (1/2), (1, 1/2) over 10 chunks
    row = next(r for r in rows if r.metric == "C-Prec")
    assert row.n == 3
    assert row.pearson == pytest.approx(pearsonr(judge_prec, human_prec)[0], abs=1e-12)


def _bad(tmp_path: Path, row: dict, column: str, text: str) -> Path:
    row = dict(row)
    row[column] = text
    return _write(
        tmp_path / _name("Chunk", "close_ended", "GPT-5"), [_chunk_row(*CHUNK_ROWS[0]), row]
    )


@pytest.mark.parametrize(
    ("column", "text", "field", "message"),
    [
        ("query_chunk_coverage_check", "{'Chunk 1': ['Core subquery1']",
         "query_chunk_coverage_check", "not a Python literal"),
        ("query_chunk_coverage_check", "{'Chunk 11': ['Core subquery1']}",
         "query_chunk_coverage_check['Chunk 11']", "N in 0..10"),
        ("query_chunk_coverage_check", "{'Chunk 1': ['Core subquery3']}",
         "query_chunk_coverage_check['Chunk 1']", "N in 1..2"),
        ("qid", "['nq_test_2']", "attention_check", "list of 1 items"),
        ("decomposed_query", "[1, 2]", "decomposed_query", "list of 11 items"),
    ],
)  # fmt: skip
def test_malformed_cells_are_located(
    tmp_path: Path, column: str, text: str, field: str, message: str
) -> None:
    row = _chunk_row(*CHUNK_ROWS[1])
    # the first row holds a chunk text spread over three lines: the second row starts on 5
    first = _chunk_row(*CHUNK_ROWS[0])
    first["query_chunk_coverage_check_reasoning"] = "['line one\nline two\nline three']"
    row[column] = text
    path = _write(tmp_path / _name("Chunk", "close_ended", "GPT-5"), [first, row])
    with pytest.raises(UDCGInputError) as error:
        read_annotation_csv(path)
    assert (error.value.path, error.value.line, error.value.field) == (str(path), 5, field)
    assert message in error.value.reason
    assert "\n" not in str(error.value)


def test_query_file_errors_and_file_names(tmp_path: Path) -> None:
    row = _query_row("GPT-5")
    row["query_fact_coverage_check"] = {"general_0_2": "Covered"}  # nq_test_1 has 1 sub-query
    path = _write(tmp_path / _name("Query", "close_ended", "GPT-5"), [row])
    with pytest.raises(UDCGInputError, match=r":2: field .*general_0_2.*names no sub-query"):
        read_annotation_csv(path)
    row["query_fact_coverage_check"] = {"general_0_1": "Yes"}
    _write(path, [row])
    with pytest.raises(UDCGInputError, match="'Covered' or 'Not covered'"):
        read_annotation_csv(path)
    other = _write(tmp_path / "labels.csv", [_query_row("GPT-5")])
    with pytest.raises(UDCGInputError, match="target model from the file name"):
        read_annotation_csv(other)
    assert {a.model for a in read_annotation_csv(other, model="Mine")} == {"Mine"}
    short = tmp_path / _name("Query", "close_ended", "M")
    short.write_text("\ufeffidx,qid\n", encoding="utf-8")
    with pytest.raises(UDCGInputError, match="missing column 'decomposed_query'"):
        read_annotation_csv(short)


def test_cli_import_table_and_agreement(
    release: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, table = tmp_path / "human.jsonl", tmp_path / "table.csv"
    args = ["import", *map(str, release), "-o", str(out), "--table", str(table)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert (
        "from 6 annotation files" in printed
        and "attention items dropped: 10 (labels on them: 2)" in printed
    )
    contexts, _ = read_human_labels(release)
    assert list(read_contexts(out)) == contexts
    written = list(csv.reader(table.read_text(encoding="utf-8").splitlines()))
    assert written[0] == list(TABLE_HEADER) and len(written) == 1 + 9
    assert main(["agreement", str(out), str(out), "--annotators", "--coverage", "fractional"]) == 0
    printed = capsys.readouterr().out
    assert "Krippendorff's alpha" in printed and "GPT-5 vs Qwen3_4B" in printed
    assert main(["import", str(release[0]), str(tmp_path / "x.json"), "-o", str(out)]) == 2


def test_cli_malformed_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    row = _chunk_row(*CHUNK_ROWS[0])
    row["chunk_fact_relevance_check"] = "{'Chunk 1': ['Atomic fact1']"
    path = _write(tmp_path / _name("Chunk", "close_ended", "GPT-5"), [row])
    out = tmp_path / "human.jsonl"
    assert main(["import", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert f"{path}:2: field 'chunk_fact_relevance_check': not a Python literal" in err
    assert not out.exists()
    assert main(["import", str(path), "-o", str(out), "--benchmark", str(path)]) == 2
