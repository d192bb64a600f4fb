"""Calibration of predicted probabilities against 0/1 outcomes, and recalibration of a score.

Measures (``prob`` in [0, 1], ``correct`` 0/1, one value per context):

* :func:`brier_score`: ``mean (prob - correct)^2``.
* :func:`expected_calibration_error`: ``ECE = sum_b (n_b / N) |mean correct_b - mean prob_b|``
  over the non-empty bins of :func:`bin_edges` (``"uniform"``: ``n_bins`` equal widths on
  [0, 1]; ``"quantile"``: edges at the quantiles of ``prob``, so bins hold about as many
  contexts each). Bins are closed on the right: bin b holds ``edges[b] < prob <= edges[b+1]``,
  and the first bin also ``prob == edges[0]`` (scikit-learn's ``calibration_curve`` bins).
* :func:`reliability_table`: per non-empty bin its edges, count, mean prediction and observed
  accuracy with a Wilson 95% interval; :func:`plot_reliability` draws tables.
* :func:`bootstrap_ci` and :func:`forecast_accuracy`: percentile bootstrap intervals that
  resample queries (every context of a drawn query comes along, :mod:`udcg.stats`).

Recalibration (:class:`Calibration`, maximum likelihood, unpenalised): :func:`fit_platt`
``p = sigmoid(a * x + b)``, :func:`fit_temperature` ``p = sigmoid(logit / T)``, and
:func:`fit_shift` ``p = sigmoid(logit(score) + b)``, the one-parameter calibration
:func:`fit_score_calibration` gives a score in [0, 1] such as plain UDCG.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import expit, log_expit, logit
from scipy.stats import norm

from udcg.errors import UDCGInputError
from udcg.io.weights.files import CALIBRATION_METHODS as METHODS
from udcg.io.weights.files import calibration_entry
from udcg.stats import percentile_interval, query_groups, resample_counts
from udcg.validation import binary_vector, float_vector, one_of, open_fraction, positive_int, show

__all__ = [
    "METHODS",
    "STRATEGIES",
    "Calibration",
    "bin_edges",
    "bootstrap_ci",
    "brier_score",
    "expected_calibration_error",
    "fit_platt",
    "fit_score_calibration",
    "fit_temperature",
    "forecast_accuracy",
    "plot_reliability",
    "reliability_table",
    "wilson_interval",
]

STRATEGIES = ("uniform", "quantile")


def _pair(prob: Any, correct: Any, name: str = "prob") -> tuple[np.ndarray, np.ndarray]:
    p = float_vector(prob, name)
    if p.shape[0] == 0:
        raise UDCGInputError("no predictions", field=name)
    y = binary_vector(correct, "correct", p.shape[0], name)
    return p, y


def _probabilities(prob: Any, correct: Any) -> tuple[np.ndarray, np.ndarray]:
    p, y = _pair(prob, correct)
    bad = (p < 0) | (p > 1)
    if bad.any():
        pos = int(np.argmax(bad))
        raise UDCGInputError(f"position {pos}: {show(p[pos])} is outside [0, 1]", field="prob")
    return p, y


def brier_score(prob: Any, correct: Any) -> float:
    """``mean (prob - correct)^2``.

    Examples:
        ``(0.2^2 + 0.3^2) / 2``:

        >>> round(brier_score([0.8, 0.3], [1, 0]), 4)
        0.065
    """
    p, y = _probabilities(prob, correct)
    return float(np.mean((p - y) ** 2))


def bin_edges(prob: Any, n_bins: int = 10, strategy: str = "uniform") -> np.ndarray:
    """``n_bins + 1`` edges: equal widths on [0, 1] (``"uniform"``) or the ``0, 1/n_bins, ...,
    1`` quantiles of ``prob`` (``"quantile"``; equal quantiles leave empty bins).

    Examples:
        >>> bin_edges(None, n_bins=4).tolist()
        [0.0, 0.25, 0.5, 0.75, 1.0]
        >>> bin_edges([0.1, 0.2, 0.3, 0.9], n_bins=2, strategy="quantile").round(4).tolist()
        [0.1, 0.25, 0.9]
    """
    n_bins = positive_int(n_bins, "n_bins")
    one_of(strategy, "strategy", STRATEGIES)
    if strategy == "uniform":
        return np.linspace(0.0, 1.0, n_bins + 1)
    return np.percentile(float_vector(prob, "prob"), np.linspace(0.0, 100.0, n_bins + 1))


def _bins(p: np.ndarray, n_bins: int, strategy: str) -> tuple[np.ndarray, np.ndarray]:
    """``(edges, bin index per prediction)`` (right-closed bins, module docstring)."""
    edges = bin_edges(p, n_bins, strategy)
    return edges, np.searchsorted(edges[1:-1], p, side="left")


def wilson_interval(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``successes / n``:
    ``(p + z^2/2n +- z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)``, ``z`` the normal quantile
    of ``(1 + level) / 2``.

    Examples:
        5 of 10, z = 1.96: ``0.5 +- 1.96 sqrt(0.025 + 0.0096) / 1.3841``:

        >>> tuple(round(x, 4) for x in wilson_interval(5, 10))
        (0.2366, 0.7634)
    """
    if n <= 0:
        return math.nan, math.nan
    z = float(norm.ppf(0.5 + level / 2.0))
    p = successes / n
    denom = 1.0 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, min(p, center - half)), min(1.0, max(p, center + half))  # p inside


def reliability_table(
    prob: Any, correct: Any, n_bins: int = 10, strategy: str = "uniform"
) -> list[dict[str, float]]:
    """One row per non-empty bin: ``low``, ``high`` (edges), ``count``, ``mean_predicted``,
    ``accuracy`` (mean correct) and ``ci_low``, ``ci_high`` (its Wilson 95% interval).

    Examples:
        >>> prob, correct = [0.2, 0.3, 0.8, 0.9], [0, 1, 1, 1]
        >>> rows = reliability_table(prob, correct, n_bins=2)
        >>> [(r["high"], r["count"], round(r["mean_predicted"], 4), r["accuracy"]) for r in rows]
        [(0.5, 2, 0.25, 0.5), (1.0, 2, 0.85, 1.0)]
    """
    p, y = _probabilities(prob, correct)
    edges, which = _bins(p, n_bins, strategy)
    rows = []
    for b in range(len(edges) - 1):
        inside = which == b
        count = int(inside.sum())
        if count == 0:
            continue
        hits = int(y[inside].sum())
        low, high = wilson_interval(hits, count)
        rows.append(
            {
                "low": float(edges[b]),
                "high": float(edges[b + 1]),
                "count": count,
                "mean_predicted": float(p[inside].mean()),
                "accuracy": hits / count,
                "ci_low": low,
                "ci_high": high,
            }
        )
    return rows


def expected_calibration_error(
    prob: Any, correct: Any, n_bins: int = 10, strategy: str = "uniform"
) -> float:
    """``sum_b (n_b / N) |accuracy_b - mean_predicted_b|`` over :func:`reliability_table`.

    Examples:
        The two bins of :func:`reliability_table`'s example: ``2/4 * 0.25 + 2/4 * 0.15``:

        >>> prob, correct = [0.2, 0.3, 0.8, 0.9], [0, 1, 1, 1]
        >>> round(expected_calibration_error(prob, correct, n_bins=2), 4)
        0.2
    """
    rows = reliability_table(prob, correct, n_bins, strategy)
    total = sum(row["count"] for row in rows)
    return float(
        sum(row["count"] * abs(row["accuracy"] - row["mean_predicted"]) for row in rows) / total
    )


# --------------------------------------------------------------------------------------------
# bootstrap


def _resamples(
    n: int, groups: Any, n_resamples: int, seed: int | None, level: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(counts, codes)``: ``counts[r, g]`` how often query g is drawn in resample r (as many
    draws as queries), ``codes[i]`` the query of context i (``groups=None``: its own)."""
    n_resamples = positive_int(n_resamples, "n_resamples")
    open_fraction(level, "level")
    codes, n_groups = query_groups(np.arange(n) if groups is None else groups, n, "prob")
    return resample_counts(n_groups, n_resamples, np.random.default_rng(seed)), codes


def bootstrap_ci(
    statistic: Callable[[np.ndarray, np.ndarray], float],
    prob: Any,
    correct: Any,
    groups: Any = None,
    n_resamples: int = 1000,
    seed: int | None = 0,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """``(point, low, high)``: ``statistic(prob, correct)`` and its percentile bootstrap
    interval over resamples of the queries (``groups[i]``: the query of context i; ``None``:
    each context its own query). Resamples where the statistic is NaN are skipped.

    Examples:
        >>> prob, correct = [0.2, 0.3, 0.8, 0.9], [0, 1, 1, 1]
        >>> point, low, high = bootstrap_ci(brier_score, prob, correct, n_resamples=200)
        >>> round(point, 4), low <= point <= high
        (0.145, True)
    """
    p, y = _pair(prob, correct)
    counts, codes = _resamples(p.shape[0], groups, n_resamples, seed, level)
    index = np.arange(p.shape[0])
    values = np.array(
        [statistic(p[take], y[take]) for take in (index.repeat(row[codes]) for row in counts)]
    )
    return (float(statistic(p, y)), *percentile_interval(values, level))


def forecast_accuracy(
    prob: Any,
    correct: Any,
    n_resamples: int = 1000,
    seed: int | None = 0,
    groups: Any = None,
    level: float = 0.95,
) -> dict[str, Any]:
    """The forecast accuracy (mean ``prob``) next to the measured one (mean ``correct``):
    ``{"n", "forecast", "forecast_ci", "measured", "measured_ci", "difference",
    "difference_ci"}`` with ``difference = forecast - measured`` and every interval from the
    same resamples of the queries (the difference's interval is paired).

    Examples:
        >>> prob, correct = [0.2, 0.3, 0.8, 0.9], [0, 1, 1, 1]
        >>> out = forecast_accuracy(prob, correct, n_resamples=200)
        >>> out["n"], round(out["forecast"], 4), out["measured"], round(out["difference"], 4)
        (4, 0.55, 0.75, -0.2)
    """
    p, y = _probabilities(prob, correct)
    counts, codes = _resamples(p.shape[0], groups, n_resamples, seed, level)
    size = np.bincount(codes).astype(np.float64)
    total = counts @ size
    forecast = counts @ np.bincount(codes, weights=p) / total
    measured = counts @ np.bincount(codes, weights=y) / total
    out: dict[str, Any] = {"n": int(p.shape[0])}
    for name, point, values in (
        ("forecast", p.mean(), forecast),
        ("measured", y.mean(), measured),
        ("difference", p.mean() - y.mean(), forecast - measured),
    ):
        out[name] = float(point)
        out[f"{name}_ci"] = list(percentile_interval(values, level))
    return out


# --------------------------------------------------------------------------------------------
# recalibration


@dataclass(frozen=True)
class Calibration:
    """A fitted recalibration: ``"platt"`` ``p = sigmoid(a * x + b)``, ``"temperature"``
    ``p = sigmoid(x / temperature)`` or ``"shift"`` ``p = sigmoid(logit(x) + b)`` (``x`` a score
    in [0, 1]); ``n`` contexts it was fitted on.

    Examples:
        >>> calibration = Calibration("temperature", {"temperature": 2.0}, n=10)
        >>> calibration.apply([0.0, 2.0]).round(4).tolist(), calibration.describe()
        ([0.5, 0.7311], 'temperature temperature=2 (fitted on 10 contexts)')
        >>> Calibration.from_dict(calibration.to_dict()) == calibration
        True
    """

    method: str
    parameters: dict[str, float] = field(default_factory=dict)
    n: int = 0

    def apply(self, x: Any) -> np.ndarray:
        """Calibrated probabilities of scores or logits ``x``."""
        values = np.asarray(x, dtype=np.float64)
        if self.method == "platt":
            return expit(self.parameters["a"] * values + self.parameters["b"])
        if self.method == "shift":
            return expit(_score_logit(values) + self.parameters["b"])
        return expit(values / self.parameters["temperature"])

    def to_dict(self) -> dict[str, Any]:
        """``{"method", "parameters", "n_contexts"}``, JSON-serialisable."""
        return {"method": self.method, "parameters": dict(self.parameters), "n_contexts": self.n}

    @classmethod
    def from_dict(cls, data: Any) -> Calibration:
        """The inverse of :meth:`to_dict`, every entry checked
        (:func:`udcg.io.weights.files.calibration_entry`)."""
        return cls(*calibration_entry(data))

    def describe(self) -> str:
        """One line: ``platt a=..., b=... (fitted on N contexts)``."""
        params = ", ".join(f"{k}={v:.6g}" for k, v in self.parameters.items())
        return f"{self.method} {params} (fitted on {self.n} contexts)"


def _separated(x: np.ndarray, y: np.ndarray, intercept: bool) -> bool:
    """Whether a threshold on ``x`` (at 0 without intercept) splits the outcomes, ties
    allowed (quasi-complete separation): the likelihood then has no finite maximum."""
    hit, miss = x[y == 1], x[y == 0]
    if intercept:
        return bool(hit.min() >= miss.max() or hit.max() <= miss.min())
    return bool((hit.min() >= 0 and miss.max() <= 0) or (hit.max() <= 0 and miss.min() >= 0))


def _logistic_mle(x: np.ndarray, y: np.ndarray, intercept: bool) -> np.ndarray:
    """Unpenalised maximum-likelihood ``w`` of ``P(y=1) = sigmoid(w[0] x (+ w[1]))`` by
    Newton's method with step halving, until the gradient vanishes or the gain a Newton step
    promises (``grad . step``, the squared Newton decrement) is below the loss's rounding; a
    one-line error when no finite optimum exists."""
    if y.min() == y.max():
        raise UDCGInputError(
            f"the contexts are all {'correct' if y[0] else 'incorrect'}; both outcomes are "
            "needed to fit a calibration",
            field="correct",
        )
    if _separated(x, y, intercept):
        raise UDCGInputError(
            "no finite maximum-likelihood fit: a threshold on the score separates the correct "
            "from the incorrect contexts",
            field="correct",
        )
    design = np.column_stack([x, np.ones_like(x)]) if intercept else x[:, None]
    w = np.zeros(design.shape[1])

    def loss(w: np.ndarray) -> float:
        z = design @ w
        return float(-(y * log_expit(z) + (1 - y) * log_expit(-z)).sum())

    current = loss(w)
    for _ in range(200):
        prob = expit(design @ w)
        grad = design.T @ (prob - y)
        if np.abs(grad).max() <= 1e-10 * max(1.0, len(y)):
            return w
        hessian = design.T @ (design * (prob * (1 - prob))[:, None])
        try:
            step = np.linalg.solve(hessian, grad)
        except np.linalg.LinAlgError:
            break
        if grad @ step <= 1e-12 * max(1.0, current):  # the gain left is below the loss's rounding
            return w - step
        scale = 1.0
        while scale > 1e-10 and loss(w - scale * step) > current:
            scale /= 2
        w, current = w - scale * step, loss(w - scale * step)
        if np.abs(w).max() > 1e6:
            break
    raise UDCGInputError(
        "no finite maximum-likelihood fit (Newton's method did not converge)", field="correct"
    )


def fit_platt(score: Any, correct: Any) -> Calibration:
    """Platt scaling: ``p = sigmoid(a * score + b)``, the unpenalised logistic regression of
    ``correct`` on the score (an error when the best slope ``a`` is not positive: the scores
    then rank the outcomes backwards, and a calibration must keep their order).

    Examples:
        Score 0 is correct 1 time in 4, score 1 3 times in 4: ``b = logit(1/4) = -log 3`` and
        ``a + b = log 3``:

        >>> score, correct = [0, 0, 0, 0, 1, 1, 1, 1], [1, 0, 0, 0, 1, 1, 1, 0]
        >>> {k: round(v, 4) for k, v in fit_platt(score, correct).parameters.items()}
        {'a': 2.1972, 'b': -1.0986}
    """
    x, y = _pair(score, correct, "score")
    a, b = _logistic_mle(x, y, intercept=True)
    if a <= 0:
        raise UDCGInputError(
            f"the best slope a is {a:.4g} <= 0: the scores do not predict correctness",
            field="score",
        )
    return Calibration("platt", {"a": float(a), "b": float(b)}, int(x.shape[0]))


def fit_temperature(logit: Any, correct: Any) -> Calibration:
    """Temperature scaling: ``p = sigmoid(logit / T)``, ``T`` by maximum likelihood (an error
    when the best slope ``1 / T`` is not positive: the logits then rank the outcomes
    backwards).

    Examples:
        Logit -2 is correct 1 time in 4, logit 2 3 times in 4: ``2 / T = log 3``:

        >>> logits, correct = [-2, -2, -2, -2, 2, 2, 2, 2], [1, 0, 0, 0, 1, 1, 1, 0]
        >>> round(fit_temperature(logits, correct).parameters["temperature"], 4)
        1.8205
    """
    x, y = _pair(logit, correct, "logit")
    (slope,) = _logistic_mle(x, y, intercept=False)
    if slope <= 0:
        raise UDCGInputError(
            f"the best slope 1/T is {slope:.4g} <= 0: the logits do not predict correctness",
            field="logit",
        )
    return Calibration("temperature", {"temperature": float(1.0 / slope)}, int(x.shape[0]))


def _score_logit(score: np.ndarray) -> np.ndarray:
    """``logit(score)``, the score clipped to [1e-12, 1 - 1e-12] first."""
    return logit(np.clip(score, 1e-12, 1 - 1e-12))


def fit_shift(score: Any, correct: Any) -> Calibration:
    """One-parameter recalibration of a score in [0, 1]: ``p = sigmoid(logit(score) + b)``.

    ``b`` is the maximum-likelihood shift (Newton's method on the concave log-likelihood): the
    score keeps its ranking and its slope, and the fitted probabilities average to the observed
    accuracy, ``mean(p) = mean(correct)``, on the contexts it was fitted on.

    Examples:
        Scores of 0.5 (logit 0) for contexts correct 3 times in 4: ``b = logit(3/4) = log 3``:

        >>> round(fit_shift([0.5, 0.5, 0.5, 0.5], [1, 1, 1, 0]).parameters["b"], 4)
        1.0986
    """
    x, y = _pair(score, correct, "score")
    bad = (x < 0) | (x > 1)
    if bad.any():
        pos = int(np.argmax(bad))
        raise UDCGInputError(f"position {pos}: {show(x[pos])} is outside [0, 1]", field="score")
    if y.min() == y.max():
        raise UDCGInputError(
            f"the contexts are all {'correct' if y[0] else 'incorrect'}; both outcomes are "
            "needed to fit a calibration",
            field="correct",
        )
    offset, b = _score_logit(x), 0.0
    for _ in range(100):
        prob = expit(offset + b)
        step = (prob - y).sum() / max((prob * (1 - prob)).sum(), 1e-300)
        b -= step
        if abs(step) <= 1e-12 * max(1.0, abs(b)):
            break
    return Calibration("shift", {"b": float(b)}, int(x.shape[0]))


def fit_score_calibration(score: Any, correct: Any) -> Calibration:
    """A probability from a score in [0, 1] that is not one (plain UDCG, itself a sigmoid of
    its mean term): the one-parameter shift of its logit, :func:`fit_shift`.

    Examples:
        >>> calibration = fit_score_calibration([0.2, 0.4, 0.6, 0.8], [0, 1, 0, 1])
        >>> calibration.method, round(float(calibration.apply([0.2, 0.4, 0.6, 0.8]).mean()), 4)
        ('shift', 0.5)
    """
    return fit_shift(score, correct)


# --------------------------------------------------------------------------------------------
# plot


def plot_reliability(
    tables: Mapping[str, list[dict[str, float]]], path: str | PathLike[str]
) -> Path:
    """A PNG reliability diagram: the diagonal, one curve per model (observed accuracy against
    mean prediction per bin, Wilson 95% error bars) and below it each model's histogram of
    predictions (bin counts). Needs matplotlib. Returns ``path``.

    Examples:
        >>> import tempfile
        >>> table = reliability_table([0.2, 0.3, 0.8, 0.9], [0, 1, 1, 1], n_bins=2)
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     png = plot_reliability({"UDCG-theta": table}, Path(folder) / "reliability.png")
        ...     png.name, png.stat().st_size > 0
        ('reliability.png', True)
    """
    from matplotlib.figure import Figure

    # a standalone figure saved by its own canvas: no backend is selected, pyplot is not used
    fig = Figure(figsize=(6, 7))
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    top.plot([0, 1], [0, 1], linestyle="--", color="grey", label="perfectly calibrated")
    for name, rows in tables.items():
        x = np.array([row["mean_predicted"] for row in rows])
        acc = np.array([row["accuracy"] for row in rows])
        err = np.array(
            [[a - row["ci_low"], row["ci_high"] - a] for a, row in zip(acc, rows, strict=True)]
        )
        line = top.errorbar(x, acc, yerr=err.T.reshape(2, -1), marker="o", capsize=3, label=name)
        width = np.array([row["high"] - row["low"] for row in rows])
        lows = np.array([row["low"] for row in rows])
        bottom.bar(
            lows,
            [row["count"] for row in rows],
            width=width,
            align="edge",
            alpha=0.4,
            color=line[0].get_color(),
            label=name,
        )
    top.set_xlim(0, 1)
    top.set_ylim(0, 1)
    top.set_ylabel("observed accuracy")
    top.set_title("Reliability")
    top.legend(loc="upper left")
    bottom.set_xlabel("predicted probability")
    bottom.set_ylabel("contexts")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path
