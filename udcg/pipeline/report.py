"""The evaluation report: ``report.json`` (every number), ``report.md`` (tables first), PNGs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from udcg.io.files import atomic_write
from udcg.pipeline.metric_table import show_correlation, show_interval
from udcg.pipeline.plots import figure, plot_weights


def _interval(row: dict[str, Any]) -> str:
    """A row's 95% CI, with the resamples left out of it as undefined when there are any."""
    left = row.get("undefined_resamples") or 0
    out = f" ({left} of {row['resamples']} resamples undefined)" if left else ""
    return show_interval(*row["ci95"]) + out


def _correlation_row(row: dict[str, Any], method: str, mean: float) -> str:
    """One metric's line of the correlation table; an undefined correlation says why."""
    if row.get("undefined"):
        reason = show_correlation(None, row["undefined"])
        return f"| {row['metric']} | {mean:.3f} | {reason} | | | |"
    return (
        f"| {row['metric']} | {mean:.3f} | {show_correlation(row[method])} | "
        f"{_interval(row)} | {show_correlation(row['kendall'])} | "
        f"{show_correlation(row['pearson'])} |"
    )


def markdown(report: dict[str, Any]) -> str:
    """The human-readable report: setup, correlation table, accuracy by gold position, tests."""
    method = report["config"]["correlation"]
    setup = report["setup"]
    lines = [
        f"# Retrieval metrics vs. end-to-end accuracy — {setup['run']}",
        "",
        f"Dataset **{setup['dataset']}**, retriever **{setup['run']}**, k = {setup['k']}, "
        f"judge **{setup['judge']}** (utility: {setup['utility']}); {setup['n_contexts']} "
        f"contexts over {setup['n_queries']} queries; accuracy = **{setup['accuracy']:.3f}**.",
        "",
        f"## Which metric predicts accuracy ({method}, 95% CI over queries)",
        "",
        f"| metric | mean | {method} | 95% CI | kendall | pearson |",
        "| --- | ---: | ---: | --- | ---: | ---: |",
    ]
    for row in report["correlations"]:
        lines.append(_correlation_row(row, method, report["means"][row["metric"]]))
    lines += ["", "## Accuracy by position of the first relevant passage", ""]
    lines += ["| position | contexts | accuracy |", "| --- | ---: | ---: |"]
    for row in report["accuracy_by_gold_position"]:
        pos = row["position"] if row["position"] is not None else "none"
        lines.append(f"| {pos} | {row['n']} | {row['accuracy']:.3f} |")
    lines += ordering_markdown(report.get("ordering"))
    lines += calibration_markdown(report.get("calibration"))
    tests = [t for t in report["paired_tests"] if t["p_value"] is not None and t["p_value"] < 0.05]
    lines += ["", "## Paired bootstrap tests (A correlates better than B, p < 0.05)", ""]
    if tests:
        lines += ["| A | B | difference | 95% CI | p |", "| --- | --- | ---: | --- | ---: |"]
        for t in tests:
            lines.append(
                f"| {t['a']} | {t['b']} | {show_correlation(t['difference'])} | "
                f"{_interval(t)} | {t['p_value']:.3f} |"
            )
    else:
        lines.append("No pair of metrics differs significantly (see report.json for all pairs).")
    if report["notes"]:
        lines += ["", "## Notes", ""] + [f"* {n}" for n in report["notes"]]
    lines += ["", "Plots: " + ", ".join(f"`{p}`" for p in report["plots"]), ""]
    return "\n".join(lines)


def _bar(row: dict[str, Any], method: str) -> tuple[float, float, float]:
    """``(estimate, low, high)`` of one bar: 0 for an undefined correlation, a missing bound
    at the estimate."""
    est = row[method] if row[method] is not None else 0.0
    low, high = (est if bound is None else bound for bound in row["ci95"])
    return est, low, high


def plot_correlations(report: dict[str, Any], path: Path) -> None:
    """Bars of each metric's correlation with accuracy and its 95% CI (drawn from its bounds,
    which need not hold the estimate); an undefined correlation gets no bar but its reason,
    written at 0."""
    method = report["config"]["correlation"]
    rows = report["correlations"]
    est, low, high = (np.array(v) for v in zip(*(_bar(r, method) for r in rows), strict=True))
    fig, ax = figure(figsize=(7, 3.8))
    ax.bar(range(len(rows)), est, color="tab:blue")
    ax.errorbar(
        range(len(rows)), (low + high) / 2, yerr=(high - low) / 2, fmt="none", capsize=3, ecolor="k"
    )
    for i, row in enumerate(rows):
        if row[method] is None:
            label = show_correlation(None, row.get("undefined"))
            ax.text(i, 0, label, rotation=90, ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(rows)), [r["metric"] for r in rows], rotation=30, ha="right")
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_ylabel(f"{method} with correctness")
    ax.set_title(f"Metric vs. accuracy, {report['setup']['run']} (95% CI over queries)")
    fig.tight_layout()
    fig.savefig(path)


def plot_gold_position(report: dict[str, Any], path: Path) -> None:
    """Accuracy by position of the first relevant passage (and with none)."""
    rows = report["accuracy_by_gold_position"]
    labels = [str(r["position"]) if r["position"] is not None else "none" for r in rows]
    fig, ax = figure(figsize=(5, 3.5))
    ax.bar(range(len(rows)), [r["accuracy"] for r in rows], color="tab:green")
    ax.set_xticks(range(len(rows)), labels)
    for i, r in enumerate(rows):
        ax.annotate(f"n={r['n']}", (i, r["accuracy"]), ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("position of the first relevant passage")
    ax.set_ylabel("accuracy")
    ax.set_title(f"Accuracy by gold position, {report['setup']['run']}")
    fig.tight_layout()
    fig.savefig(path)


def show_optional(x: float | None) -> str:
    """``0.412``, or ``n/a`` for a value the run does not have."""
    return "n/a" if x is None else f"{x:.3f}"


def ordering_markdown(ordering: dict[str, Any] | None) -> list[str]:
    """The report's lines on an ``order=...`` run: the ordering against the retriever order of
    the same questions (nothing for ``order=retriever``)."""
    if ordering is None:
        return []
    low, high = ordering["difference_ci95"]
    theta, description = ordering["theta"], ordering["description"]
    return [
        "",
        f"## Context order: {ordering['order']} vs. retriever order",
        "",
        f"{description[:1].upper()}{description[1:]}; {ordering['candidates']} candidates "
        f"per question, {ordering['changed']} of {ordering['n_queries']} contexts differ from the "
        "retriever's top-k as ranked.",
        "",
        "| contexts | accuracy | mean UDCG-theta |",
        "| --- | ---: | ---: |",
        f"| {ordering['order']} | {ordering['accuracy']:.3f} | "
        f"{show_optional(ordering['mean_theta'])} |",
        f"| retriever order | {ordering['retriever_accuracy']:.3f} | "
        f"{show_optional(ordering['retriever_mean_theta'])} |",
        "",
        f"Paired difference (ordering - retriever order): {ordering['difference']:+.3f} "
        f"{show_interval(low, high)} (95% bootstrap CI over questions)"
        + ("" if theta is None else f"; UDCG-theta {theta}, never fitted on the question")
        + ".",
    ]


def with_interval(value: float, ci95: list[float]) -> str:
    """``0.412 [0.350, 0.470]``."""
    return f"{value:.3f} [{ci95[0]:.3f}, {ci95[1]:.3f}]"


def show_forecast(forecast: dict[str, Any]) -> list[str]:
    """The forecast, the measured accuracy and their difference, each with its 95% CI."""
    return [
        with_interval(forecast["forecast"], forecast["forecast_ci"]),
        with_interval(forecast["measured"], forecast["measured_ci"]),
        f"{forecast['difference']:+.3f} {show_interval(*forecast['difference_ci'])}",
    ]


def plot_reliability_of(report: dict[str, Any], path: Path) -> None:
    """The reliability diagram of the report's held-out probabilities."""
    from udcg.theta.calibration import plot_reliability

    tables = {name: entry["reliability"] for name, entry in report["calibration"].items()}
    plot_reliability(tables, path)


def _ci(entry: dict[str, Any]) -> str:
    return with_interval(entry["value"], entry["ci95"])


def calibration_markdown(calibration: dict[str, Any] | None) -> list[str]:
    """The report's lines on calibration: per held-out probability, Brier score, ECE and the
    accuracy forecast (nothing for a run without UDCG-theta)."""
    if calibration is None:
        return []
    lines = [
        "",
        "## Calibration of held-out probabilities (95% bootstrap CI over questions)",
        "",
        "| probability | Brier | ECE | forecast accuracy | measured accuracy "
        "| forecast - measured |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, entry in calibration.items():
        lines.append(
            f"| {name} | {_ci(entry['brier'])} | {_ci(entry['ece'])} | "
            + " | ".join(show_forecast(entry["forecast"]))
            + " |"
        )
    lines += ["", "Reliability diagram: `reliability.png`."]
    return lines


#: every file a report is made of: a report written into a folder replaces them all
REPORT_FILES = (
    "report.json",
    "report.md",
    "correlations.png",
    "gold_position.png",
    "reliability.png",
    "theta_weights.png",
)


def write_report(report: dict[str, Any], directory: Path, theta: Any = None) -> list[Path]:
    """Write report.json, report.md and the PNGs into ``directory``; return their paths. The
    files of :data:`REPORT_FILES` this report does not write (an earlier run's
    ``theta_weights.png``, ``reliability.png``) are removed, so none describes another run."""
    directory.mkdir(parents=True, exist_ok=True)
    plots = {"correlations.png": plot_correlations, "gold_position.png": plot_gold_position}
    if "calibration" in report:
        plots["reliability.png"] = plot_reliability_of
    report["plots"] = [*plots, *(["theta_weights.png"] if theta is not None else [])]
    for name, plot in plots.items():
        plot(report, directory / name)
    if theta is not None:
        fitted_here = not report.get("config", {}).get("theta_weights")
        title = f"UDCG-theta weights, k={theta.k}" + (
            " (cross-fitted, half 1 of the queries)" if fitted_here else ""
        )
        plot_weights(theta, directory / "theta_weights.png", title)
    for name in set(REPORT_FILES) - {"report.json", "report.md", *report["plots"]}:
        (directory / name).unlink(missing_ok=True)
    with atomic_write(directory / "report.json") as handle:
        json.dump(report, handle, indent=2)
        handle.write("\n")
    with atomic_write(directory / "report.md") as handle:
        handle.write(markdown(report))
    return [directory / n for n in ("report.json", "report.md", *report["plots"])]
