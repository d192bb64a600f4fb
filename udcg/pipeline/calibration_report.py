"""How well UDCG-theta's probabilities are calibrated in an evaluate run, and what they forecast.

Only held-out predictions are judged: UDCG-theta from weights fitted elsewhere
(``theta_weights``) or cross-fitted on the other half of the questions (``theta_crossfit``),
and plain UDCG passed through a one-parameter calibration (:func:`fit_score_calibration`)
fitted on one half of the questions and applied to the other, both ways
(:func:`crossfit_calibration`). For each: Brier score and expected calibration error (ECE) with
bootstrap CIs resampling questions, the reliability table, and the accuracy forecast (mean
predicted probability) next to the measured accuracy (:func:`forecast_accuracy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.pipeline.scoring import ScoreTable, halves
from udcg.theta.calibration import (
    bootstrap_ci,
    brier_score,
    expected_calibration_error,
    fit_score_calibration,
    forecast_accuracy,
    reliability_table,
)

if TYPE_CHECKING:
    from udcg.theta import UDCGTheta

#: The UDCG-theta columns of a score table, weights given first.
THETA_METRICS = ("UDCG-theta", "UDCG-theta (cross-fitted)")
#: Plain UDCG through the cross-fitted one-parameter calibration.
CALIBRATED_UDCG = "UDCG (calibrated, cross-fitted)"
#: UDCG-theta through the recalibration stored with its weights.
CALIBRATED_THETA = "UDCG-theta (recalibrated)"


def crossfit_calibration(
    score: np.ndarray, correct: np.ndarray, qids: np.ndarray, seed: int
) -> np.ndarray:
    """``score`` as a probability: :func:`fit_score_calibration` fitted on each half of the
    questions (:func:`udcg.pipeline.scoring.halves`) and applied to the other."""
    out = np.full(len(score), np.nan)
    for fit, apply in halves(qids, seed):
        out[apply] = fit_score_calibration(score[fit], correct[fit]).apply(score[apply])
    return out


def assess(
    prob: np.ndarray, correct: np.ndarray, qids: np.ndarray, n_bootstrap: int, seed: int
) -> dict[str, Any]:
    """Brier score and ECE, each ``{"value", "ci95"}`` (bootstrap over questions), the
    reliability table and the accuracy forecast of held-out probabilities ``prob``."""
    out: dict[str, Any] = {}
    for name, statistic in (("brier", brier_score), ("ece", expected_calibration_error)):
        value, low, high = bootstrap_ci(
            statistic, prob, correct, groups=qids, n_resamples=n_bootstrap, seed=seed
        )
        out[name] = {"value": float(value), "ci95": [float(low), float(high)]}
    out["reliability"] = reliability_table(prob, correct)
    out["forecast"] = forecast_accuracy(
        prob, correct, n_resamples=n_bootstrap, seed=seed, groups=qids
    )
    return out


def calibration_report(
    table: ScoreTable, n_bootstrap: int, seed: int, weights: UDCGTheta | None = None
) -> tuple[dict[str, Any] | None, list[str]]:
    """``({probability: assess(...)}, notes)`` for the run's UDCG-theta, for UDCG-theta
    recalibrated with the calibration stored with ``weights`` (``train.py calibration=...``)
    when they carry one, and for the cross-fitted calibrated UDCG (left out, with a note, when
    a half has no finite calibration fit); ``(None, [])`` when the run has no UDCG-theta."""
    theta = next((m for m in THETA_METRICS if m in table.scores), None)
    if theta is None:
        return None, []
    notes = []
    predictions = {theta: table.scores[theta]}
    if weights is not None and weights.calibration_ is not None:
        predictions[CALIBRATED_THETA] = weights.predict_proba(
            table.relevant, table.utility, calibrated=True
        )
    try:
        predictions[CALIBRATED_UDCG] = crossfit_calibration(
            table.scores["UDCG"], table.correct, table.qids, seed
        )
    except UDCGInputError as exc:
        notes.append(f"{CALIBRATED_UDCG} skipped: calibrating a half failed ({exc})")
    report = {
        name: assess(prob, table.correct, table.qids, n_bootstrap, seed)
        for name, prob in predictions.items()
    }
    return report, notes
