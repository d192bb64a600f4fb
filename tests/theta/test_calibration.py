"""Calibration measures and recalibration against scikit-learn, hand computation and scipy."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import expit
from sklearn.calibration import calibration_curve
from sklearn.metrics import brier_score_loss

from tests.theta.test_estimator import sklearn_logreg
from udcg.errors import UDCGInputError
from udcg.theta import UDCGTheta
from udcg.theta.calibration import (
    Calibration,
    bootstrap_ci,
    brier_score,
    expected_calibration_error,
    fit_platt,
    fit_score_calibration,
    fit_temperature,
    forecast_accuracy,
    plot_reliability,
    reliability_table,
    wilson_interval,
)


def sample(n=400, seed=0, slope=1.0):
    rng = np.random.default_rng(seed)
    logit = rng.normal(0.0, 2.0, size=n)
    correct = (rng.random(n) < expit(slope * logit)).astype(float)
    return logit, correct


def test_brier_score_equals_sklearn():
    logit, y = sample()
    p = expit(logit)
    assert brier_score(p, y) == pytest.approx(brier_score_loss(y, p), abs=1e-15)
    assert brier_score([1.0, 0.0, 0.5], [1, 1, 0]) == pytest.approx((0 + 1 + 0.25) / 3)


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_reliability_bins_equal_sklearn_calibration_curve(strategy):
    logit, y = sample(seed=3)
    p = expit(logit)
    p[:5] = [0.0, 0.1, 0.2, 0.5, 1.0]  # on bin edges
    rows = reliability_table(p, y, n_bins=10, strategy=strategy)
    prob_true, prob_pred = calibration_curve(y, p, n_bins=10, strategy=strategy)
    np.testing.assert_allclose([r["accuracy"] for r in rows], prob_true, atol=1e-12)
    np.testing.assert_allclose([r["mean_predicted"] for r in rows], prob_pred, atol=1e-12)
    assert sum(r["count"] for r in rows) == len(p)
    ece = expected_calibration_error(p, y, 10, strategy)
    counts = np.array([r["count"] for r in rows])
    assert ece == pytest.approx(np.sum(counts / len(p) * np.abs(prob_true - prob_pred)))


def test_ece_by_hand():
    # bins of width 0.5: (0.2, 0.4 | 0 and 1 correct) and (0.9 | correct)
    prob, correct = [0.2, 0.4, 0.9], [0, 1, 1]
    expected = 2 / 3 * abs(0.5 - 0.3) + 1 / 3 * abs(1 - 0.9)
    assert expected_calibration_error(prob, correct, n_bins=2) == pytest.approx(expected)
    assert expected_calibration_error([1.0, 0.0], [1, 0], n_bins=5) == 0.0


def test_wilson_interval_by_hand():
    # 3 of 10: the textbook Wilson 95% interval (0.1078, 0.6032)
    low, high = wilson_interval(3, 10)
    assert (low, high) == (pytest.approx(0.10779, abs=1e-4), pytest.approx(0.60322, abs=1e-4))
    z = 1.959963984540054
    low, high = wilson_interval(0, 5)
    assert low == 0.0 and high == pytest.approx(z * z / 5 / (1 + z * z / 5))
    rows = reliability_table([0.3] * 10, [1, 1, 1] + [0] * 7, n_bins=2)
    assert rows[0]["ci_low"] == pytest.approx(0.10779, abs=1e-4)


def test_bootstrap_ci_covers_the_point_and_resamples_queries():
    logit, y = sample(n=300, seed=5)
    p = expit(logit)
    groups = np.arange(300) // 3
    point, low, high = bootstrap_ci(brier_score, p, y, groups=groups, n_resamples=300)
    assert point == pytest.approx(brier_score(p, y))
    assert low < point < high
    # queries whose contexts agree: resampling queries widens the interval of the mean
    y_same, p_same = np.repeat(y[:100], 3), np.repeat(p[:100], 3)

    def mean_correct(prob, correct):
        return float(correct.mean())

    _, lo_ctx, hi_ctx = bootstrap_ci(mean_correct, p_same, y_same, n_resamples=500)
    _, lo_q, hi_q = bootstrap_ci(mean_correct, p_same, y_same, groups=groups, n_resamples=500)
    assert hi_q - lo_q > 1.3 * (hi_ctx - lo_ctx)


def test_forecast_accuracy_matches_an_explicit_bootstrap():
    logit, y = sample(n=120, seed=7)
    p = expit(logit + 0.5)
    groups = np.arange(120) // 4
    out = forecast_accuracy(p, y, n_resamples=200, seed=1, groups=groups)
    assert out["n"] == 120
    assert out["forecast"] == pytest.approx(p.mean())
    assert out["measured"] == pytest.approx(y.mean())
    assert out["difference"] == pytest.approx(p.mean() - y.mean())
    for name in ("forecast", "measured", "difference"):
        low, high = out[f"{name}_ci"]
        assert low <= out[name] <= high

    def difference(prob, correct):
        return float(prob.mean() - correct.mean())

    # the same resamples, drawn context by context through bootstrap_ci
    _, low, high = bootstrap_ci(difference, p, y, groups=groups, n_resamples=200, seed=1)
    assert out["difference_ci"] == [pytest.approx(low), pytest.approx(high)]


def test_platt_equals_sklearn_unpenalised_logistic_regression():
    logit, y = sample(n=500, seed=11, slope=0.6)
    score = 0.3 * logit + 1.0
    cal = fit_platt(score, y)
    ref = sklearn_logreg(bias=True).fit(score[:, None], y)
    assert cal.parameters["a"] == pytest.approx(ref.coef_[0, 0], abs=1e-5)
    assert cal.parameters["b"] == pytest.approx(ref.intercept_[0], abs=1e-5)
    np.testing.assert_allclose(cal.apply(score), ref.predict_proba(score[:, None])[:, 1], atol=1e-6)
    assert cal.n == 500


def test_temperature_equals_direct_one_dimensional_optimisation():
    logit, y = sample(n=500, seed=13, slope=0.5)  # overconfident logits: T > 1

    def nll(t):
        p = np.clip(expit(logit / t), 1e-300, 1 - 1e-16)
        return -np.sum(y * np.log(p) + (1 - y) * np.log1p(-p))

    ref = minimize_scalar(nll, bounds=(0.05, 20.0), method="bounded", options={"xatol": 1e-10})
    cal = fit_temperature(logit, y)
    assert cal.parameters["temperature"] == pytest.approx(ref.x, rel=1e-6)
    assert cal.parameters["temperature"] > 1.0
    np.testing.assert_allclose(cal.apply(logit), expit(logit / ref.x), atol=1e-7)


def test_score_calibration_is_the_one_parameter_shift_of_the_logit():
    rng = np.random.default_rng(2)
    score = rng.random(400)
    y = (rng.random(400) < 0.2 + 0.6 * score).astype(float)
    cal = fit_score_calibration(score, y)
    assert cal.method == "shift" and set(cal.parameters) == {"b"}
    # the maximum-likelihood shift makes the fitted probabilities average to the accuracy
    assert cal.apply(score).mean() == pytest.approx(y.mean(), abs=1e-9)
    # and it is the optimum of the log-likelihood over b (a direct 1-D search)
    z = np.log(score) - np.log1p(-score)

    def nll(b: float) -> float:
        p = expit(z + b)
        return float(-(y * np.log(p) + (1 - y) * np.log1p(-p)).sum())

    ref = minimize_scalar(nll, bounds=(-20, 20), method="bounded", options={"xatol": 1e-10})
    assert cal.parameters["b"] == pytest.approx(ref.x, abs=1e-6)
    np.testing.assert_allclose(cal.apply(score), expit(z + ref.x), atol=1e-6)
    assert Calibration.from_dict(cal.to_dict()) == cal
    with pytest.raises(UDCGInputError, match="outside"):
        fit_score_calibration([0.2, 1.5], [0, 1])


def test_fit_errors_are_one_line():
    with pytest.raises(UDCGInputError, match="both outcomes"):
        fit_platt([0.1, 0.2], [1, 1])
    with pytest.raises(UDCGInputError, match="separates"):
        fit_platt([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1])
    with pytest.raises(UDCGInputError, match="separates"):
        fit_platt([0.1, 0.5, 0.5, 0.9], [1, 1, 0, 0])  # quasi-complete: a tie at the threshold
    with pytest.raises(UDCGInputError, match="separates"):
        fit_temperature([-1.0, -0.5, 0.0, 2.0], [0, 0, 1, 1])
    with pytest.raises(UDCGInputError, match="do not predict"):
        fit_temperature([-2.0, -1.0, 1.0, 2.0, 0.5, -0.5, 1.5], [1, 1, 0, 0, 0, 1, 1])
    with pytest.raises(UDCGInputError, match=r"the best slope a is .* <= 0: the scores do not"):
        fit_platt([0.1, 0.2, 0.7, 0.8, 0.6, 0.3, 0.65], [1, 1, 0, 0, 0, 1, 1])  # backwards
    with pytest.raises(UDCGInputError, match="outside"):
        brier_score([1.2], [1])
    with pytest.raises(UDCGInputError, match="'level'"):
        forecast_accuracy([0.5, 0.5], [0, 1], level=1.5)
    with pytest.raises(UDCGInputError, match="'n_resamples'"):
        bootstrap_ci(brier_score, [0.5, 0.5], [0, 1], n_resamples=0)
    with pytest.raises(UDCGInputError, match="strategy"):
        expected_calibration_error([0.5], [1], strategy="width")


def test_calibration_dict_round_trip_and_checks():
    cal = Calibration("platt", {"a": 1.5, "b": -0.25}, 12)
    again = Calibration.from_dict(json.loads(json.dumps(cal.to_dict())))
    assert again == cal
    np.testing.assert_allclose(again.apply([0.0, 1.0]), expit([-0.25, 1.25]))
    with pytest.raises(UDCGInputError, match="temperature"):
        Calibration.from_dict({"method": "temperature", "parameters": {"a": 1.0}})
    with pytest.raises(UDCGInputError, match="positive"):
        Calibration.from_dict({"method": "temperature", "parameters": {"temperature": -1.0}})
    with pytest.raises(UDCGInputError, match="unknown method"):
        Calibration.from_dict({"method": "isotonic", "parameters": {}})


def fitted_model(k=3, seed=0):
    rng = np.random.default_rng(seed)
    model = UDCGTheta(k=k)
    model.alpha_, model.beta_, model.intercept_ = rng.normal(2, 1, k), rng.normal(-1, 1, k), 0.0
    rel = (rng.random((300, k)) < 0.5).astype(float)
    u = rng.random((300, k))
    true_logit = 0.4 * model.decision_function(rel, u) + 0.3
    correct = (rng.random(300) < expit(true_logit)).astype(float)
    return model, rel, u, correct


@pytest.mark.parametrize("method", ["temperature", "platt"])
def test_udcg_theta_calibrate_and_card_round_trip(tmp_path, method):
    model, rel, u, correct = fitted_model()
    model.calibrate(rel, u, correct, method=method)
    logits = model.decision_function(rel, u)
    ref = (
        fit_temperature(logits, correct) if method == "temperature" else fit_platt(logits, correct)
    )
    np.testing.assert_allclose(model.predict_proba(rel, u, calibrated=True), ref.apply(logits))
    np.testing.assert_allclose(model.predict_proba(rel, u), expit(logits))

    folder = model.save_pretrained(tmp_path / "w", card={"judge_model": "j"})
    config = json.loads((folder / "config.json").read_text())
    assert config["calibration"]["method"] == method
    assert config["calibration"]["n_contexts"] == 300
    assert f"| calibration | {method} " in (folder / "README.md").read_text()
    loaded = UDCGTheta.from_pretrained(folder)
    assert loaded.calibration_ == model.calibration_
    np.testing.assert_allclose(
        loaded.predict_proba(rel, u, calibrated=True), ref.apply(logits), atol=1e-12
    )
    model.save(tmp_path / "single.safetensors")
    assert UDCGTheta.load(tmp_path / "single.safetensors").calibration_ == model.calibration_


def test_a_new_calibration_drops_the_records_of_the_one_it_replaces(tmp_path):
    model, rel, u, correct = fitted_model()
    records = {
        "calibration_fitted_on": {"judge_model": "other"},
        "calibration_input_sha256": "ab" * 32,
        "weights_overrides": ["field 'judge': ... (allowed on purpose)"],
    }
    model.calibrate(rel, u, correct)
    folder = model.save_pretrained(tmp_path / "w", card={"judge_model": "j", **records})
    loaded = UDCGTheta.from_pretrained(folder)
    assert loaded.card_["calibration_fitted_on"] == {"judge_model": "other"}
    loaded.calibrate(rel, u, correct, method="platt")
    assert not set(records) & set(loaded.card_)
    again = json.loads((loaded.save_pretrained(tmp_path / "again") / "config.json").read_text())
    assert not set(records) & set(again) and again["calibration"]["method"] == "platt"
    assert again["judge_model"] == "j"
    assert loaded.check_compatible(calibrated=True, judge="j") == []


def test_cards_without_calibration_still_load(tmp_path):
    model, rel, u, _ = fitted_model()
    model.save(tmp_path / "plain.safetensors")
    loaded = UDCGTheta.load(tmp_path / "plain.safetensors")
    assert loaded.calibration_ is None  # set, as after fit
    with pytest.raises(UDCGInputError, match="no calibration"):
        loaded.predict_proba(rel, u, calibrated=True)


def test_bad_calibration_in_card_names_the_file(tmp_path):
    model, *_ = fitted_model()
    path = tmp_path / "w.safetensors"
    model.save(path, card={"calibration": {"method": "platt", "parameters": {"a": 1.0}}})
    with pytest.raises(UDCGInputError, match=r"w\.json: field 'calibration.parameters'"):
        UDCGTheta.load(path)


def test_plot_reliability_writes_a_png(tmp_path):
    logit, y = sample()
    tables = {
        "raw": reliability_table(expit(logit), y),
        "tempered": reliability_table(expit(logit / 2), y, strategy="quantile"),
    }
    path = plot_reliability(tables, tmp_path / "plots" / "reliability.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_weights_calibrate_command_and_show(tmp_path, capsys):
    from udcg.cli.weights import main as weights_main
    from udcg.io.contexts.jsonl import write_contexts
    from udcg.theta.simulate import simulate_contexts

    contexts = simulate_contexts(60, 3, per_query=4, seed=4)
    data = tmp_path / "c.jsonl"
    write_contexts(data, contexts)
    model = UDCGTheta(k=3)
    model.alpha_, model.beta_, model.intercept_ = np.array([6.0, 4.0, 6.0]), -3 * np.ones(3), 0.0
    model.save_pretrained(tmp_path / "w", card={"judge_model": "sim"})
    out = tmp_path / "cal"
    args = ["calibrate", str(tmp_path / "w"), str(data), "-o", str(out), "--method", "platt"]
    assert weights_main(args) == 0
    printed = capsys.readouterr().out
    rel = np.array([[p.relevant for p in c.passages] for c in contexts], dtype=float)
    u = np.array([[1 - p.abstain_prob["sim"] for p in c.passages] for c in contexts])
    correct = np.array([c.outcomes["sim"]["correct"] for c in contexts], dtype=float)
    ref = fit_platt(model.decision_function(rel, u), correct)
    loaded = UDCGTheta.from_pretrained(out)
    assert loaded.card_["judge_model"] == "sim"
    assert loaded.calibration_.parameters == pytest.approx(ref.parameters, abs=1e-9)
    ece_before = expected_calibration_error(model.predict_proba(rel, u), correct)
    ece_after = expected_calibration_error(ref.apply(model.decision_function(rel, u)), correct)
    assert f"ECE:   {ece_before:.4f} -> {ece_after:.4f}" in printed
    assert ece_after < ece_before  # weights scaled up: overconfident before
    assert weights_main(["show", str(out)]) == 0
    assert "calibration:     platt a=" in capsys.readouterr().out
    assert weights_main([*args[:5], "--judge-key", "other"]) == 2
    assert "'other'" in capsys.readouterr().err
    # OUT: not the input, not standard output, not a folder another model's files stay in
    for bad, message in (
        (tmp_path / "w", "the output names the input DIR_OR_FILE"),
        ("-", "standard output (-) cannot hold one"),
    ):
        assert weights_main([*args[:4], str(bad)]) == 2
        assert message in capsys.readouterr().err
    (out / "weights.png").write_bytes(b"k=3 plot of another model")
    assert weights_main(args) == 2
    assert "holds 'weights.png'" in capsys.readouterr().err
    # a mismatch allowed on purpose is recorded in the calibrated card
    other = tmp_path / "other"
    model.save_pretrained(tmp_path / "w2", card={"judge_model": "llama", "utility": "abstention"})
    base = ["calibrate", str(tmp_path / "w2"), str(data), "-o", str(other), "--judge-key", "sim"]
    assert weights_main(base) == 2
    assert "--allow-mismatch judge to use them anyway" in capsys.readouterr().err
    assert weights_main([*base, "--allow-mismatch", "judge"]) == 0
    (note,) = UDCGTheta.from_pretrained(other).card_["weights_overrides"]
    assert "judge 'llama', not 'sim'" in note


def test_a_card_calibration_with_a_slope_at_most_0_is_refused(tmp_path) -> None:
    """A Platt slope <= 0 (a card of an earlier udcg, an edit) would turn the forecasts' order
    over: refused where the card is read, as a temperature <= 0 is."""
    import numpy as np

    from udcg.theta import UDCGTheta
    from udcg.theta.calibration import Calibration

    model = UDCGTheta(2)
    model.alpha_, model.beta_, model.intercept_ = np.ones(2), -np.ones(2), 0.0
    model.calibration_ = Calibration("platt", {"a": -2.0, "b": 0.0}, 10)
    folder = model.save_pretrained(tmp_path / "w")
    with pytest.raises(UDCGInputError, match=r"field 'calibration\.a': expected a finite positive"):
        UDCGTheta.from_pretrained(folder)
