"""The comparison of an ordering with the retriever order (paired bootstrap over questions),
the order and calibration options, and the forecast table of a retriever sweep."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from udcg.cli.benchmark import run_evaluate
from udcg.errors import UDCGInputError, UDCGWarning
from udcg.io.contexts.jsonl import Context, Passage, write_contexts
from udcg.pipeline.order_study import OrderedRun, compare_orders
from udcg.pipeline.settings import EvaluateSettings, TrainSettings
from udcg.pipeline.sweep import write_summary
from udcg.theta.simulate import simulate_contexts


def _answered(qid: str, correct: bool) -> Context:
    return Context(qid, [Passage(doc_id="d")], outcomes={"m": {"correct": correct}})


def test_paired_difference_is_a_bootstrap_over_questions() -> None:
    rng = np.random.default_rng(3)
    n = 200
    baseline = rng.random(n) < 0.5
    chosen = np.where(rng.random(n) < 0.1, ~baseline, baseline)  # mostly the same outcome
    run = OrderedRun(
        chosen=[_answered(f"q{i}", bool(c)) for i, c in enumerate(chosen)],
        baseline=[_answered(f"q{i}", bool(b)) for i, b in enumerate(baseline)],
        indices=[np.arange(1)] * n,
        chosen_prob=None,
        baseline_prob=None,
        notes=[],
    )
    settings = EvaluateSettings(k=1, judge="m", order="reversed", n_bootstrap=4000, seed=1)
    out = compare_orders(run, settings)
    diff = chosen.astype(float) - baseline.astype(float)
    assert out["difference"] == pytest.approx(diff.mean())
    assert out["accuracy"] == pytest.approx(chosen.mean())
    assert out["retriever_accuracy"] == pytest.approx(baseline.mean())
    # the direct paired bootstrap: resample questions, mean of the per-question differences
    draws = np.random.default_rng(7).integers(0, n, size=(4000, n))
    expected = np.percentile(diff[draws].mean(axis=1), [2.5, 97.5])
    assert out["difference_ci95"] == pytest.approx(expected, abs=0.01)
    # unpaired resampling would be about three times wider here
    assert out["difference_ci95"][1] - out["difference_ci95"][0] < 0.1
    assert out["mean_theta"] is None and out["theta"] is None


def test_order_options_are_checked() -> None:
    with pytest.raises(UDCGInputError) as err:
        EvaluateSettings(order="nope")
    assert str(err.value) == (
        "field 'order': must be one of theta, retriever, reversed, ends, gold_first, got 'nope'"
    )
    with pytest.raises(UDCGInputError, match="field 'theta_weights': order=theta needs"):
        EvaluateSettings(order="theta")
    assert EvaluateSettings(order="theta", theta_crossfit=True).candidates == 6  # 2k
    assert EvaluateSettings(order="ends", order_candidates=4).candidates == 4
    assert EvaluateSettings(order_candidates=9).candidates == 3  # the retriever's top-k
    with pytest.raises(UDCGInputError, match="field 'order_candidates': must be at least k=3"):
        EvaluateSettings(order="ends", order_candidates=2)
    with pytest.raises(UDCGInputError, match="field 'calibration': must be one of none"):
        TrainSettings(calibration="isotonic")


def test_forecast_table_of_a_retriever_sweep(tmp_path: Path, evaluate_config) -> None:
    """Three members (simulated contexts standing for three retrievers) cross-fit UDCG-theta;
    the summary's forecast table holds each member's forecasts as its report has them."""
    names = ["bm25", "dense", "hybrid"]
    for seed, name in enumerate(names):
        contexts = [
            Context(c.qid, c.passages, run=name, outcomes=c.outcomes)
            for c in simulate_contexts(60, 3, per_query=1, seed=seed)
        ]
        write_contexts(tmp_path / f"{name}.jsonl", contexts)
        cfg = evaluate_config(
            "dataset=jsonl",
            f"dataset.path={tmp_path / name}.jsonl",
            "retriever=given",
            "judge=sim",
            "theta_crossfit=true",
        )
        with pytest.warns(UDCGWarning):
            run_evaluate(cfg, tmp_path / "sweep" / name)
    text = write_summary(tmp_path / "sweep").read_text()
    summary = json.loads((tmp_path / "sweep" / "sweep_summary.json").read_text())
    rows = summary["forecasts"]
    assert len(rows) == 3 and "orderings" not in summary
    for row, name in zip(rows, names, strict=True):
        report = json.loads((tmp_path / "sweep" / name / "report.json").read_text())
        cal = report["calibration"]
        assert row["theta_forecast"] == cal["UDCG-theta (cross-fitted)"]["forecast"]
        assert row["udcg_forecast"] == cal["UDCG (calibrated, cross-fitted)"]["forecast"]
        forecast = row["theta_forecast"]
        assert forecast["measured"] == pytest.approx(report["setup"]["accuracy"])
        low, high = forecast["measured_ci"]
        assert f"| {row['run']} | {forecast['measured']:.3f} [{low:.3f}, {high:.3f}] |" in text
    assert "## Accuracy forecast from judge labels" in text
