"""The Q-CARE release's own numbers: GPT-5's published per-query scores (both splits, copied
into tests/qcare/data/release/, see its README) load through
:func:`udcg.qcare.published.read_query_level_results`, and every aggregate the release
publishes of them is reproduced: the GPT-5 entries of ``[<split>]model_comparison_results.json``
(written here by hand from the release) and GPT-5's rows of ``metric_table_all.csv``; and the
whole ``metric_table_all.csv`` from the per-dataset means of the model comparison files
(copied verbatim)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from udcg.cli.qcare import main
from udcg.errors import UDCGInputError
from udcg.qcare.generator import completeness
from udcg.qcare.published import (
    model_comparison,
    published_table,
    read_query_level_results,
)
from udcg.qcare.release import release_order, table_rows, write_release_table
from udcg.qcare.scores import GENERATOR_METRICS

RELEASE = Path(__file__).parent / "data" / "release"
FILES = [
    RELEASE / f"[{split}][GPT-5]query_level_results.json" for split in ("close_ended", "open_ended")
]

#: The GPT-5 entries of data/human_labels/scores/[<split>]model_comparison_results.json:
#: (num_queries, total_subquery, total_atomic, completeness, conciseness, verifiableness,
#: ndcg_at_10) per dataset group, "overall" last.
PUBLISHED_COMPARISON = {
    "close_ended": {
        "finqa_": (40, 87, 54, 0.4125, 0.5833333333333333, 0.7666666666666666, 0.43817134131437463),
        "hotpotqa_": (40, 63, 45, 0.6875, 0.8208333333333334, 0.625, 0.44165052346422184),
        "newsqa_": (40, 47, 51, 0.8333333333333333, 0.8525, 0.8441666666666666, 0.6916852660604488),
        "nq_": (40, 44, 42, 0.9333333333333333, 0.9375, 0.6625, 0.5015715582124368),
        "overall": (160, 241, 192, 0.7166666666666665, 0.7985416666666667, 0.7245833333333334,
                    0.5182696722628706),
    },
    "open_ended": {
        "PubMedQA_": (40, 74, 210, 0.7441666666666666, 0.44241251803751797, 0.7742938311688313,
                      0.42163766984048373),
        "eli5_": (40, 108, 273, 0.6063690476190475, 0.3301064213564214, 0.6322280844155844,
                  0.14684344153994003),
        "science-": (40, 79, 368, 0.9620833333333334, 0.4865845845760707, 0.8482406159157321,
                     0.6816253084329799),
        "technology-": (40, 65, 297, 0.805, 0.4061142411510059, 0.8380179379444085,
                        0.4798146052021572),
        "overall": (160, 326, 1148, 0.779404761904762, 0.4163044412802538, 0.7731951173611389,
                    0.4324802562538902),
    },
}  # fmt: skip

#: GPT-5's rows of data/human_labels/scores/metric_table_all.csv, verbatim.
PUBLISHED_TABLE_ROWS = """\
Proprietary,GPT-5,Completeness,0.933,0.833,0.688,0.412,0.717,0.744,0.962,0.805,0.606,0.779
Proprietary,GPT-5,Conciseness,0.938,0.852,0.821,0.583,0.799,0.442,0.487,0.406,0.33,0.416
Proprietary,GPT-5,Verifiableness,0.662,0.844,0.625,0.767,0.725,0.774,0.848,0.838,0.632,0.773
"""


def _records():
    return [r for path in FILES for r in read_query_level_results(path)]


def test_the_published_files_load_with_model_split_and_groups_from_the_names() -> None:
    records = _records()
    assert len(records) == 320
    assert {(r.model, r.split) for r in records} == {
        ("GPT-5", "close_ended"),
        ("GPT-5", "open_ended"),
    }
    first = records[0]
    assert (first.qid, first.dataset, first.values["C-nDCG"], first.values["C-Prec"]) == (
        "nq_test_812",
        "nq_",
        0.6309297535714574,
        0.1,
    )
    assert first.counts == {
        "num_subqueries": 1, "covered_subqueries": 1, "total_atomic_facts": 1,
        "relevant_atomic_facts": 1, "verified_atomic_facts": 1,
    }  # fmt: skip


def test_each_published_generator_value_is_the_ratio_of_its_counts() -> None:
    """Completeness = covered / sub-queries (udcg's function on the counts as labels),
    Conciseness = relevant / claims, Verifiableness = verified / claims."""
    for r in _records():
        c = r.counts
        covered = [
            [True] * c["covered_subqueries"]
            + [False] * (c["num_subqueries"] - c["covered_subqueries"])
        ]
        assert float(completeness(covered)[0]) == r.values["Completeness"], r.qid
        assert c["relevant_atomic_facts"] / c["total_atomic_facts"] == r.values["Conciseness"], (
            r.qid
        )
        assert c["verified_atomic_facts"] / c["total_atomic_facts"] == r.values["Verifiableness"], (
            r.qid
        )


@pytest.mark.parametrize("split", ["close_ended", "open_ended"])
def test_the_model_comparison_entries_are_reproduced(split: str) -> None:
    entry = model_comparison(_records())[split]["GPT-5"]
    keys = ("num_queries", "total_subquery", "total_atomic", "completeness", "conciseness",
            "verifiableness", "ndcg_at_10")  # fmt: skip
    for group, expected in PUBLISHED_COMPARISON[split].items():
        got = entry["overall"] if group == "overall" else entry["by_dataset"][group]
        got = {**got, "num_queries": got.get("num_queries", got.get("total_queries"))}
        assert tuple(got[k] for k in keys[:3]) == expected[:3], (split, group)
        # left-to-right sums, as the release: bit for bit but for the last bit of a few C-nDCG
        # means, whose per-query values the file prints from another computation
        assert tuple(got[k] for k in keys[3:]) == pytest.approx(expected[3:], rel=1e-15, abs=0)
    assert list(entry["overall"]) == [
        "completeness", "conciseness", "verifiableness", "ndcg_at_10", "total_queries",
        "total_subquery", "total_atomic",
    ]  # fmt: skip


def test_the_metric_table_rows_are_reproduced_to_the_published_rounding(tmp_path: Path) -> None:
    out = tmp_path / "table.csv"
    write_release_table(out, published_table(_records()))
    rows = out.read_text().splitlines()
    assert rows[0].startswith("Group,LLM,Metric,NQ,NewsQA,HotpotQA,FinQA,Close Avg.,PubMedQA")
    assert "\n".join(rows[1:4]) + "\n" == PUBLISHED_TABLE_ROWS
    # with one model, the Overall rows are that model's rows
    assert [r.split(",", 3)[3] for r in rows[4:]] == [
        r.split(",", 3)[3] for r in PUBLISHED_TABLE_ROWS.splitlines()
    ]


def test_the_command_writes_both_aggregates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table, folder = tmp_path / "metric_table_all.csv", tmp_path / "scores"
    argv = ["published", *map(str, FILES), "--table", str(table), "--comparison", str(folder)]
    assert main(argv) == 0
    assert (
        capsys.readouterr().out
        == "read 320 published queries of 2 model-split pairs from 2 files\n"
    )
    assert table.read_text().splitlines()[1:4] == PUBLISHED_TABLE_ROWS.splitlines()
    close = json.loads((folder / "[close_ended]model_comparison_results.json").read_text())
    assert close["GPT-5"]["overall"]["ndcg_at_10"] == pytest.approx(0.5182696722628706, rel=1e-15)
    assert close["GPT-5"]["by_dataset"]["nq_"]["completeness"] == 0.9333333333333333


@pytest.mark.parametrize(
    ("name", "body", "message"),
    [
        ("[close_ended][GPT-5]query_level_results.json", '{"qid": 1}', "expected a JSON list"),
        ("[close_ended][GPT-5]query_level_results.json", '[{"qid": "q", "dataset_group": "nq_"}]',
         "field '[0].completeness': missing"),
        ("[close_ended][GPT-5]query_level_results.json",
         json.dumps([{"qid": "q", "dataset_group": "nq_", "completeness": "1", "conciseness": 1,
                      "verifiableness": 1, "ndcg_at_10": 1, "precision_at_10": 1}]),
         "field '[0].completeness': must be a number, got the string '1'"),
        ("scores.json", "[]", "cannot tell the split and model from the file name"),
    ],
)  # fmt: skip
def test_malformed_files_are_located_errors(
    tmp_path: Path, name: str, body: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(body)
    with pytest.raises(
        UDCGInputError, match=message.replace("[", r"\[").replace("]", r"\]")
    ) as err:
        read_query_level_results(path)
    assert str(path) in str(err.value)


def test_the_whole_metric_table_from_the_published_model_comparisons(tmp_path: Path) -> None:
    """Every row of the release's metric_table_all.csv (8 models, both splits, the Overall
    rows) from the per-dataset means of its two model comparison files (copied verbatim):
    the model order, split averages, means over models and the rounding."""
    values: dict[str, dict[str, list[tuple[str, float | None]]]] = {}
    for split in ("close_ended", "open_ended"):
        path = RELEASE / f"[{split}]model_comparison_results.json"
        for model, entry in json.loads(path.read_text()).items():
            by_metric = values.setdefault(model, {m: [] for m in GENERATOR_METRICS})
            for dataset, means in entry["by_dataset"].items():
                for metric in GENERATOR_METRICS:
                    by_metric[metric].append((dataset, means[metric.lower()]))
    ordered = {m: values[m] for m in release_order(values)}
    out = tmp_path / "metric_table_all.csv"
    write_release_table(out, table_rows(ordered, GENERATOR_METRICS))
    ours = out.read_text().splitlines()
    published = (RELEASE / "metric_table_all.csv").read_text().splitlines()
    differing = []
    for mine, theirs in zip(ours, published, strict=True):
        row, other = mine.split(","), theirs.split(",")
        differing += [
            (row[:3], c, a, b) for c, (a, b) in enumerate(zip(row, other, strict=True)) if a != b
        ]
    # one cell of 240 sits on a rounding tie: the comparison file's mean is
    # 0.3125000000000001 (rounds up), the table's was 0.3125 (numpy rounds half to even)
    assert differing == [(["Open Source", "Qwen3_30B", "Completeness"], 6, "0.313", "0.312")]
