"""``bench/forecast_transfer.py``: a target retriever's accuracy is forecast from predictors
fitted on another retriever's other half of the questions, never from the target's answers."""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import LogisticRegression

from tests.bench_scripts import load
from udcg import metrics
from udcg.theta import split_by_query
from udcg.theta.calibration import fit_score_calibration

transfer = load("forecast_transfer")


def _run(seed: int, n: int = 160, k: int = 3, shift: float = 0.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    rel = (rng.random((n, k)) < 0.4 + shift).astype(float)
    util = rng.random((n, k))
    logit = 2.0 * (rel * util).sum(1) - 1.5 * ((1 - rel) * util).sum(1) - 0.5
    correct = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(float)
    qids = np.array([f"q{i}" for i in range(n)], dtype=object)
    return {"qids": qids, "relevant": rel, "utility": util, "correct": correct}


def test_forecasts_use_only_the_sources_other_half() -> None:
    source, target = _run(1), _run(2, shift=0.2)
    out = transfer.forecast(source, target, l2=0.05, seed=4)
    flipped = {**target, "correct": 1 - target["correct"]}
    again = transfer.forecast(source, flipped, l2=0.05, seed=4)
    for name in transfer.PREDICTORS:  # the target's answers are never read
        np.testing.assert_array_equal(out[name], again[name])
    questions = np.array(sorted(set(source["qids"])), dtype=object)
    first, second = split_by_query(questions, 0.5, 4)
    for fit_half, apply_half in ((first, second), (second, first)):
        fit = np.isin(source["qids"], questions[fit_half])
        apply = np.isin(target["qids"], questions[apply_half])
        rel, util, correct = source["relevant"][fit], source["utility"][fit], source["correct"][fit]
        reference = LogisticRegression(
            C=1 / (0.05 * fit.sum()), fit_intercept=False, tol=1e-10, max_iter=10_000
        ).fit(np.hstack([rel * util, (1 - rel) * util]), correct)
        t_rel, t_util = target["relevant"][apply], target["utility"][apply]
        expected = reference.predict_proba(np.hstack([t_rel * t_util, (1 - t_rel) * t_util]))
        np.testing.assert_allclose(out["UDCG-theta"][apply], expected[:, 1], atol=1e-4)
        calibration = fit_score_calibration(metrics.udcg(rel, util), correct)
        np.testing.assert_allclose(
            out["UDCG (calibrated)"][apply], calibration.apply(metrics.udcg(t_rel, t_util))
        )
        np.testing.assert_allclose(out["no change"][apply], correct.mean())


def test_markdown_rows_and_mean_error() -> None:
    runs = {"a": _run(1), "b": _run(2, shift=0.2), "c": _run(3, shift=-0.1)}
    table = []
    for target in runs:
        for name, prob in transfer.forecast(
            runs["a" if target != "a" else "b"], runs[target], 0.05, 0
        ).items():
            mean = float(np.mean(prob))
            measured = float(runs[target]["correct"].mean())
            table.append(
                {
                    "target": target,
                    "source": "x",
                    "pooled": False,
                    "predictor": name,
                    "forecast": mean,
                    "forecast_ci": [mean, mean],
                    "measured": measured,
                    "measured_ci": [measured, measured],
                    "difference": mean - measured,
                    "difference_ci": [0.0, 0.0],
                }
            )
    table[-3:] = [{**r, "pooled": True} for r in table[-3:]]  # one forecast from the others
    lines = transfer.markdown(table).splitlines()
    assert len(lines) == 2 + len(table) + 3
    single = [r for r in table if not r["pooled"] and r["predictor"] == "UDCG-theta"]
    theta_error = np.mean([abs(r["difference"]) for r in single])
    assert lines[-2].startswith("Mean absolute forecast error, fitted on one other retriever (2")
    assert f"UDCG-theta {theta_error:.3f}" in lines[-2]
    assert lines[-1].startswith("Mean absolute forecast error, fitted on the others pooled (1")
