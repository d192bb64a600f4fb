"""The evaluation report: ``report.json`` (every number), ``report.md`` (tables first), PNGs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from udcg.io.files import atomic_write
from udcg.pipeline.compare import show_correlation, show_interval
from udcg.pipeline.plots import plot_weights, pyplot


def _correlation_row(row: dict[str, Any], method: str, mean: float) -> str:
    """One metric's line of the correlation table; an undefined correlation says why."""
    if row.get("undefined"):
        reason = show_correlation(None, row["undefined"])
        return f"| {row['metric']} | {mean:.3f} | {reason} | | | |"
    return (
        f"| {row['metric']} | {mean:.3f} | {show_correlation(row[method])} | "
        f"{show_interval(*row['ci95'])} | {show_correlation(row['kendall'])} | "
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
    tests = [t for t in report["paired_tests"] if t["p_value"] is not None and t["p_value"] < 0.05]
    lines += ["", "## Paired bootstrap tests (A correlates better than B, p < 0.05)", ""]
    if tests:
        lines += ["| A | B | difference | 95% CI | p |", "| --- | --- | ---: | --- | ---: |"]
        for t in tests:
            low, high = t["ci95"]
            lines.append(
                f"| {t['a']} | {t['b']} | {show_correlation(t['difference'])} | "
                f"{show_interval(low, high)} | {t['p_value']:.3f} |"
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
    """Bars of each metric's correlation with accuracy and its 95% CI; an undefined correlation
    gets no bar but its reason, written at 0."""
    plt = pyplot()
    method = report["config"]["correlation"]
    rows = report["correlations"]
    est, low, high = (np.array(v) for v in zip(*(_bar(r, method) for r in rows), strict=True))
    fig, ax = plt.subplots(figsize=(7, 3.8), dpi=120)
    ax.bar(range(len(rows)), est, yerr=[est - low, high - est], capsize=3, color="tab:blue")
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
    plt.close(fig)


def plot_gold_position(report: dict[str, Any], path: Path) -> None:
    """Accuracy by position of the first relevant passage (and with none)."""
    plt = pyplot()
    rows = report["accuracy_by_gold_position"]
    labels = [str(r["position"]) if r["position"] is not None else "none" for r in rows]
    fig, ax = plt.subplots(figsize=(5, 3.5), dpi=120)
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
    plt.close(fig)


def write_report(report: dict[str, Any], directory: Path, theta: Any = None) -> list[Path]:
    """Write report.json, report.md and the PNGs into ``directory``; return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    plots = {"correlations.png": plot_correlations, "gold_position.png": plot_gold_position}
    report["plots"] = [*plots, *(["theta_weights.png"] if theta is not None else [])]
    for name, plot in plots.items():
        plot(report, directory / name)
    if theta is not None:
        fitted_here = not report.get("config", {}).get("theta_weights")
        title = f"UDCG-theta weights, k={theta.k}" + (
            " (cross-fitted, half 1 of the queries)" if fitted_here else ""
        )
        plot_weights(theta, directory / "theta_weights.png", title)
    with atomic_write(directory / "report.json") as handle:
        json.dump(report, handle, indent=2)
        handle.write("\n")
    with atomic_write(directory / "report.md") as handle:
        handle.write(markdown(report))
    return [directory / n for n in ("report.json", "report.md", *report["plots"])]
