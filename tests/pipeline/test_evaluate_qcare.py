"""evaluate.py with qcare=true: coverage labels from the judge feed C-Prec and C-nDCG."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from udcg import stats
from udcg.cli.benchmark import run_evaluate
from udcg.io.contexts.jsonl import Context, Passage, read_contexts, write_contexts
from udcg.qcare import qcare_scores

DOCS = ["capital #a", "river #b", "capital #a river #b", "nothing", "river #b again", "none"]


def _contexts() -> list[Context]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(8):
        texts = [DOCS[j] for j in rng.choice(len(DOCS), 3, replace=False)]
        passages = [
            Passage(doc_id=f"d{j}", text=t, relevant="#" in t, abstain_prob={"tag": 0.3})
            for j, t in enumerate(texts)
        ]
        correct = bool(rng.random() < 0.5)
        out.append(
            Context(
                f"q{i}",
                passages,
                question="capital #a and river #b",
                outcomes={"tag": {"answer": "x", "correct": correct}},
            )
        )
    return out


@pytest.mark.parametrize("gain", ["linear", "exponential"])
def test_evaluate_with_qcare_labels_coverage_through_the_judge(
    tmp_path: Path, tag_judge, monkeypatch, evaluate_config, gain: str
) -> None:
    judge = tag_judge()
    monkeypatch.setattr("udcg.judge.load_judge", lambda spec, **options: judge)
    monkeypatch.setattr("udcg.pipeline.benchmark.check_hub_judge", lambda spec: None)
    write_contexts(tmp_path / "in.jsonl", _contexts())
    cfg = evaluate_config(
        "dataset=jsonl",
        f"dataset.path={tmp_path / 'in.jsonl'}",
        "retriever=given",
        "judge=tag",
        "qcare=true",
        f"qcare_gain={gain}",
    )
    report, _ = run_evaluate(cfg, tmp_path / "out")
    (labelled,) = (tmp_path / "cache").glob("annotate-*.jsonl.gz")
    contexts = list(read_contexts(labelled))
    # the tag judge splits the question on ' and ' and says a chunk covers a sub-query when it
    # holds the sub-query's tag: r_j = (#a in chunk + #b in chunk) / 2
    assert all(c.subqueries == ["capital #a", "river #b"] for c in contexts)
    r = np.array(
        [[(("#a" in p.text) + ("#b" in p.text)) / 2 for p in c.passages] for c in contexts]
    )
    assert report["means"]["C-Prec"] == pytest.approx(r.mean())
    g = r if gain == "linear" else 2 ** (10 * r) - 1  # exponential: the published Q-CARE gain
    ideal = -np.sort(-g, axis=1)
    discounts = 1 / np.log2(np.arange(2, 5))
    with np.errstate(invalid="ignore", divide="ignore"):
        c_ndcg = np.where(ideal[:, 0] > 0, (g @ discounts) / (ideal @ discounts), 0.0)
    assert report["means"]["C-nDCG"] == pytest.approx(c_ndcg.mean())
    assert report["config"]["qcare_gain"] == gain


def test_a_null_coverage_label_is_missing_not_an_error(
    tmp_path: Path, tag_judge, monkeypatch, evaluate_config
) -> None:
    """adv38 4: a check without a usable answer makes that context's C-Prec and C-nDCG
    missing, counted in a note, as `udcg qcare score` does; the other metrics keep it."""
    monkeypatch.setattr("udcg.judge.load_judge", lambda spec, **options: tag_judge())
    monkeypatch.setattr("udcg.pipeline.benchmark.check_hub_judge", lambda spec: None)
    subqueries = ["capital #a", "river #b"]
    contexts = [
        replace(
            c,
            subqueries=subqueries,
            passages=[
                replace(p, covers=[s.split()[1] in p.text for s in subqueries]) for p in c.passages
            ],
        )
        for c in _contexts()
    ]
    first = contexts[0].passages[0]
    contexts[0].passages[0] = replace(first, covers=[None, True])
    write_contexts(tmp_path / "in.jsonl", contexts)
    cfg = evaluate_config(
        "dataset=jsonl", f"dataset.path={tmp_path / 'in.jsonl'}", "retriever=given", "judge=tag",
        "qcare=true",
    )  # fmt: skip
    report, _ = run_evaluate(cfg, tmp_path / "out")
    expected = qcare_scores(contexts[1:]).means()
    assert report["means"]["C-Prec"] == pytest.approx(expected["C-Prec"])
    assert report["means"]["C-nDCG"] == pytest.approx(expected["C-nDCG"])
    assert report["setup"]["n_contexts"] == len(contexts)
    assert report["mean_counts"]["C-Prec"] == report["mean_counts"]["C-nDCG"] == len(contexts) - 1
    assert report["mean_counts"]["UDCG"] == len(contexts)
    assert any(
        "C-Prec and C-nDCG missing for 1 of 8 contexts (a check without a usable answer 1)" in n
        for n in report["notes"]
    )
    rows = {row["metric"]: row for row in report["correlations"]}
    correct = [c.outcomes["tag"]["correct"] for c in contexts[1:]]
    values = qcare_scores(contexts[1:]).values["C-Prec"].data  # the correlation of the others
    assert rows["C-Prec"]["spearman"] == pytest.approx(stats.correlation(values, correct))


def test_labels_of_an_edited_question_are_refused(
    tmp_path: Path, tag_judge, monkeypatch, evaluate_config
) -> None:
    """adv40 4: given contexts whose question changed since `udcg qcare label` labelled them
    are refused, naming the context, rather than scored on the old question's sub-queries."""
    from udcg.errors import UDCGInputError
    from udcg.qcare import label_contexts

    monkeypatch.setattr("udcg.judge.load_judge", lambda spec, **options: tag_judge())
    monkeypatch.setattr("udcg.pipeline.benchmark.check_hub_judge", lambda spec: None)
    labelled, _ = label_contexts(_contexts(), tag_judge())
    labelled[3] = replace(labelled[3], question="mayor #m")
    write_contexts(tmp_path / "in.jsonl", labelled)
    cfg = evaluate_config(
        "dataset=jsonl", f"dataset.path={tmp_path / 'in.jsonl'}", "retriever=given", "judge=tag",
        "qcare=true",
    )  # fmt: skip
    with pytest.raises(
        UDCGInputError, match=r"in\.jsonl:4: field 'qcare_labels\.inputs\.question'"
    ):
        run_evaluate(cfg, tmp_path / "out")
