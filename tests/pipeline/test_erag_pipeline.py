"""udcg benchmark erag=true: eRAG's labels from the judge, its metrics beside the others in the
report, correlated with correctness, and a rerun answered by the judge cache."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from udcg.cli.benchmark import run_evaluate
from udcg.io.contexts.jsonl import Context, Passage, read_contexts, write_contexts
from udcg.judge.base import Judge
from udcg.pipeline.metric_table import ERAG_METRICS
from udcg.pipeline.scoring import score_table
from udcg.pipeline.stages import missing_steps

TEXTS = {
    "paris": "Paris is the capital of France.",
    "paris2": "Paris hosts the Louvre.",
    "lyon": "Lyon is a large French city.",
    "nice": "Nice lies on the Riviera.",
}


class FirstWordJudge(Judge):
    """Answers with the first word of its first document (never abstains in utilities)."""

    name = fingerprint = "first-word"

    def __init__(self) -> None:
        self.generations = 0
        self.abstentions = 0

    def abstain_prob(self, questions, passages, mode="first_token") -> np.ndarray:
        self.abstentions += len(passages)
        return np.array([0.2 if "Paris" in p else 0.7 for p in passages])

    def generate(self, prompts: Sequence, max_new_tokens: int = 64) -> list[str]:
        self.generations += len(prompts)
        return [m[-1]["content"].split("]: ")[1].split()[0] for m in prompts]


def _contexts() -> list[Context]:
    rng = np.random.default_rng(3)
    names = list(TEXTS)
    out = []
    for i in range(12):
        picked = [names[j] for j in rng.choice(len(names), 3, replace=False)]
        passages = [
            Passage(doc_id=n, text=TEXTS[n], relevant=n.startswith("paris")) for n in picked
        ]
        out.append(Context(f"q{i}", passages, question="Capital of France?", answers=["Paris"]))
    return out


def _by_hand(labels: list[int]) -> dict[str, float]:
    """eRAG's metrics of one list, written out."""
    ranks = [i + 1 for i, g in enumerate(labels) if g]
    dcg = sum(1 / math.log2(r + 1) for r in ranks)
    ideal = sum(1 / math.log2(r + 1) for r in range(1, len(ranks) + 1))
    return {
        "eRAG-nDCG": dcg / ideal if ranks else 0.0,
        "eRAG-MAP": sum((n + 1) / r for n, r in enumerate(ranks)) / len(ranks) if ranks else 0.0,
        "eRAG-MRR": 1 / ranks[0] if ranks else 0.0,
        "eRAG-Precision": len(ranks) / len(labels),
        "eRAG-Hits": float(bool(ranks)),
    }


@pytest.fixture
def first_word(monkeypatch) -> FirstWordJudge:
    judge = FirstWordJudge()
    monkeypatch.setattr("udcg.judge.load_judge", lambda spec, **options: judge)
    monkeypatch.setattr("udcg.pipeline.benchmark.check_hub_judge", lambda spec: None)
    return judge


def test_benchmark_reports_erag_beside_the_other_metrics(
    tmp_path: Path, first_word: FirstWordJudge, evaluate_config
) -> None:
    contexts = _contexts()
    write_contexts(tmp_path / "in.jsonl", contexts)
    options = (
        "dataset=jsonl",
        f"dataset.path={tmp_path / 'in.jsonl'}",
        "retriever=given",
        "judge=first-word",
        "erag=true",
    )
    report, files = run_evaluate(evaluate_config(*options), tmp_path / "out")
    # one answer per distinct prompt (the judge cache): one per distinct passage order for
    # the outcomes, one per distinct passage for eRAG (all contexts share one question)
    orders = {tuple(p.text for p in c.passages) for c in contexts}
    assert first_word.generations == len(orders) + len(TEXTS)

    labels = [[int(p.text.startswith("Paris")) for p in c.passages] for c in contexts]
    hand = [_by_hand(row) for row in labels]
    correct = np.array([c.passages[0].text.startswith("Paris") for c in contexts], dtype=float)
    for name in ERAG_METRICS:
        values = np.array([h[name] for h in hand])
        assert report["means"][name] == pytest.approx(values.mean(), abs=1e-12)
        (row,) = [r for r in report["correlations"] if r["metric"] == name]
        if np.ptp(values) == 0:
            assert row["undefined"] == "metric is constant"
        else:
            assert row["spearman"] == pytest.approx(sps.spearmanr(values, correct).statistic)
    assert {"UDCG", "nDCG", "MAP", "MRR"} <= set(report["means"])
    markdown = next(f for f in files if f.name == "report.md").read_text()
    assert "eRAG-nDCG" in markdown and "eRAG-MAP" in markdown
    saved = json.loads(next(f for f in files if f.name == "report.json").read_text())
    assert saved["config"]["erag"] is True
    (labelled,) = (tmp_path / "cache").glob("annotate-*.jsonl.gz")
    stored = list(read_contexts(labelled))
    assert [[p.extra["erag"]["first-word"] for p in c.passages] for c in stored] == labels

    # a rerun with a fresh stage cache: every judge call comes from the judge cache
    before = (first_word.generations, first_word.abstentions)
    rerun = evaluate_config(*options, f"cache_dir={tmp_path / 'fresh'}")
    again, _ = run_evaluate(rerun, tmp_path / "out2")
    assert (first_word.generations, first_word.abstentions) == before
    assert again["means"] == report["means"]


def test_without_erag_no_generation_per_passage(
    tmp_path: Path, first_word: FirstWordJudge, evaluate_config
) -> None:
    write_contexts(tmp_path / "in.jsonl", _contexts())
    cfg = evaluate_config(
        "dataset=jsonl",
        f"dataset.path={tmp_path / 'in.jsonl'}",
        "retriever=given",
        "judge=first-word",
    )
    report, _ = run_evaluate(cfg, tmp_path / "out")
    orders = {tuple(p.text for p in c.passages) for c in _contexts()}
    assert first_word.generations == len(orders)  # the outcomes only
    assert not set(ERAG_METRICS) & set(report["means"])
    assert "eRAG skipped: no eRAG labels (set erag=true)" in report["notes"]


def test_missing_steps_and_partial_labels() -> None:
    labelled = Passage(text="t", relevant=True, abstain_prob={"j": 0.2}, extra={"erag": {"j": 1}})
    ctx = Context("q", [labelled], question="?", answers=["a"], outcomes={"j": {"correct": True}})
    assert missing_steps([ctx], "j", "abstention", "string", erag=True) == []
    assert missing_steps([ctx], "other-judge", "abstention", "string", erag=True)[-1] == "erag"
    bare = Passage(text="u", relevant=False, abstain_prob={"j": 0.5})
    partial = [ctx, Context("q2", [bare], outcomes={"j": {"correct": False}})]
    assert missing_steps(partial, "j", "abstention", "string") == []  # erag not asked
    assert missing_steps(partial, "j", "abstention", "string", erag=True) == ["erag"]
    table = score_table(partial, 1, "j")
    assert not set(ERAG_METRICS) & set(table.scores)
    assert "eRAG skipped: 1 of 2 passages have no eRAG label" in " ".join(table.notes)
