"""One summary across a sweep: mean metrics and accuracy per member run, and how well each
metric ranks the runs (Kendall tau-b against the ranking by accuracy).

A member is named by the setup fields that differ across the sweep (``bm25``, ``k=3``,
``dense, answer_likelihood``), so sweeping k or the utility source over one retriever gives one
row per member, never one merged row; members those leave alike are told apart by the overrides
that differ between them (``distractors, retriever.kind=weak``).

Each sweep invocation gets its own id when it starts (:func:`start_sweep`, from the Hydra
callback :class:`udcg.cli.hydra_config.SweepSummary`, which first takes the sweep folder's
lock, so no other sweep replaces the record meanwhile: ``sweep.json`` in the sweep directory,
which members run by another launcher's processes read too); its members record it, with their
overrides, in ``report.json`` (``sweep``). ``python evaluate.py -m retriever=bm25,dense,hybrid``
writes ``sweep_summary.json`` and ``sweep_summary.md`` into the sweep directory when the last
job ends; :func:`write_summary` rebuilds them from the ``report.json`` files that record that
id, so a sweep into a folder that holds an earlier sweep, or a member that failed, leaves the
earlier reports out.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from pathlib import Path
from typing import Any

from udcg import stats
from udcg.io.files import atomic_write
from udcg.pipeline.calibration_report import CALIBRATED_UDCG, THETA_METRICS
from udcg.pipeline.metric_table import show_interval
from udcg.pipeline.report import show_forecast, show_optional
from udcg.pipeline.scoring import FITTED_PER_RUN

# setup fields that can tell sweep members apart, in the order they appear in a member's name
_NAMING_FIELDS = ("run", "order", "k", "utility", "judge", "dataset", "relevance", "grader")
#: the record of the sweep invocation running in (or last run in) a sweep directory
SWEEP_RECORD = "sweep.json"


def start_sweep(sweep_dir: Path) -> str:
    """Record a new sweep invocation in ``sweep_dir`` (:data:`SWEEP_RECORD`); its id. The
    caller holds the folder's lock.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     started = start_sweep(Path(folder))
        ...     found = current_sweep(Path(folder))
        >>> found == started
        True
    """
    sweep_id = uuid.uuid4().hex
    Path(sweep_dir).mkdir(parents=True, exist_ok=True)
    with atomic_write(Path(sweep_dir) / SWEEP_RECORD) as handle:
        json.dump({"sweep_id": sweep_id}, handle)
    return sweep_id


def current_sweep(sweep_dir: Path) -> str | None:
    """The id of the sweep invocation :func:`start_sweep` recorded in ``sweep_dir``; None: no
    record."""
    path = Path(sweep_dir) / SWEEP_RECORD
    return json.loads(path.read_text())["sweep_id"] if path.is_file() else None


def overrides(report: dict[str, Any]) -> list[str]:
    """The overrides a sweep member ran with (``report["sweep"]["overrides"]``; none known:
    ``[]``)."""
    return list(report.get("sweep", {}).get("overrides", []))


def _varying_overrides(reports: list[dict[str, Any]]) -> list[str]:
    """Per report, its overrides whose value differs across ``reports``, joined by ``, ``."""
    given = [dict(o.partition("=")[::2] for o in overrides(r)) for r in reports]
    keys = dict.fromkeys(key for g in given for key in g)
    varying = [key for key in keys if len({g.get(key) for g in given}) > 1]
    return [", ".join(f"{key}={g[key]}" for key in varying if key in g) for g in given]


def member_names(reports: list[dict[str, Any]]) -> list[str]:
    """A name per report from the setup fields whose values differ across ``reports`` (the
    retriever alone when none do); names still shared get the overrides that differ between
    the members, and then, if still shared, their member number."""
    setups = [r["setup"] for r in reports]
    varying = [f for f in _NAMING_FIELDS if len({str(s.get(f)) for s in setups}) > 1]
    names = [
        ", ".join(str(s[f]) if f == "run" else f"{f}={s.get(f)}" for f in varying) or str(s["run"])
        for s in setups
    ]
    if len(set(names)) < len(names):
        extra = _varying_overrides(reports)
        names = [f"{n}, {e}" if e else n for n, e in zip(names, extra, strict=True)]
    if len(set(names)) < len(names):
        names = [f"{name} #{i}" for i, name in enumerate(names, start=1)]
    return names


def qids_sha256(qids: list[str]) -> str:
    """The SHA-256 of a report's distinct query ids, sorted, one per line: equal for two runs
    scored over the same queries.

    Examples:
        >>> qids_sha256(["q2", "q1", "q2"]) == qids_sha256(["q1", "q2"])
        True
    """
    return hashlib.sha256("\n".join(sorted(set(qids))).encode()).hexdigest()


def _query_notes(runs: dict[str, dict[str, Any]]) -> list[str]:
    """A note when the members were scored over different queries (a report without
    ``qids_sha256`` by its number of queries)."""
    sets = {r["setup"].get("qids_sha256", r["setup"].get("n_queries")) for r in runs.values()}
    if len(sets) < 2:
        return []
    counts = ", ".join(f"{name} {r['setup'].get('n_queries', '?')}" for name, r in runs.items())
    return [
        f"the runs are scored over different queries (queries: {counts}): their accuracy "
        "and means do not compare; score every run on the same queries"
    ]


def _count_notes(runs: dict[str, dict[str, Any]]) -> list[str]:
    """A note per group of metrics whose means are over different contexts between the
    members: other numbers of them (``mean_counts``: a context a metric is missing for is left
    out of its mean) or as many of other queries (``mean_qids_sha256``); nothing when a
    report does not record them (an earlier udcg's)."""
    counts = {name: r.get("mean_counts") for name, r in runs.items()}
    if len(runs) < 2 or not all(isinstance(c, dict) for c in counts.values()):
        return []
    queries = [r.get("mean_qids_sha256") or {} for r in runs.values()]
    groups: dict[str, list[str]] = {}
    for metric in next(iter(counts.values())):
        per_run = [c.get(metric) for c in counts.values()]
        digests = [q.get(metric) for q in queries]  # compared where every member has one
        over = set(per_run) if None in digests else set(zip(per_run, digests, strict=True))
        if None not in per_run and len(over) > 1:
            listed = "; ".join(f"{name}: {n}" for name, n in zip(counts, per_run, strict=True))
            groups.setdefault(listed, []).append(metric)
    return [
        f"{', '.join(metrics)}: the means are over different contexts ({listed}): a context a "
        "metric is missing for is left out of its mean, so they do not compare"
        for listed, metrics in groups.items()
    ]


def summarize(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-run accuracy and metric means; per metric, Kendall tau-b between ranking the runs
    by mean metric and by accuracy (metrics missing from a run are left out)."""
    runs = dict(zip(member_names(reports), reports, strict=True))
    accuracy = {name: r["setup"]["accuracy"] for name, r in runs.items()}
    metrics = [m for m in reports[0]["means"] if all(m in r["means"] for r in reports)]
    agreement = []
    for metric in metrics:
        by_run = {name: r["means"][metric] for name, r in runs.items()}
        if len(runs) >= 2:
            result = stats.system_kendall(by_run, accuracy)
            tau = result.tau if math.isfinite(result.tau) else None
        else:
            tau = None
        agreement.append(
            {"metric": metric, "kendall_tau": tau, "fitted_per_run": metric in FITTED_PER_RUN}
        )
    # metrics fixed across the runs first, each group by decreasing tau
    agreement.sort(
        key=lambda a: (
            a["fitted_per_run"],
            -a["kendall_tau"] if a["kendall_tau"] is not None else math.inf,
        )
    )
    return {
        **_orderings(runs),
        **_forecasts(runs),
        "runs": [
            {
                "run": name,
                "accuracy": accuracy[name],
                "n_contexts": r["setup"]["n_contexts"],
                "overrides": overrides(r),
                "means": r["means"],
            }
            for name, r in sorted(runs.items(), key=lambda kv: -kv[1]["setup"]["accuracy"])
        ],
        "ranking_agreement": agreement,
        "notes": [*_query_notes(runs), *_count_notes(runs)],
    }


def _theta_mean(report: dict[str, Any]) -> float | None:
    return next((report["means"][m] for m in THETA_METRICS if m in report["means"]), None)


def _orderings(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{"orderings": rows}`` when a member ran ``order=...``: per member, its accuracy, the
    retriever order's on the same questions, the paired difference and both mean UDCG-theta
    (a retriever-order member is its own baseline); nothing otherwise."""
    if not any("ordering" in r for r in runs.values()):
        return {}
    rows = []
    for name, r in runs.items():
        ordering = r.get("ordering")
        if ordering is None:
            accuracy, theta = r["setup"]["accuracy"], _theta_mean(r)
            ordering = {
                "order": r["setup"].get("order", "retriever"),
                "accuracy": accuracy,
                "retriever_accuracy": accuracy,
                "difference": 0.0,
                "difference_ci95": [0.0, 0.0],
                "mean_theta": theta,
                "retriever_mean_theta": theta,
            }
        rows.append({"run": name, **{k: ordering[k] for k in _ORDERING_FIELDS}})
    return {"orderings": sorted(rows, key=lambda row: -row["difference"])}


_ORDERING_FIELDS = (
    "order",
    "accuracy",
    "retriever_accuracy",
    "difference",
    "difference_ci95",
    "mean_theta",
    "retriever_mean_theta",
)


def _forecasts(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{"forecasts": rows}`` when members carry a calibration report: per member, the
    accuracy forecasts of UDCG-theta and of calibrated UDCG with the measured accuracy
    (:func:`udcg.theta.calibration.forecast_accuracy`, held-out probabilities only)."""
    rows = []
    for name, r in runs.items():
        calibration = r.get("calibration")
        if calibration is None:
            continue
        theta = next(m for m in THETA_METRICS if m in calibration)
        rows.append(
            {
                "run": name,
                "theta": theta,
                "theta_forecast": calibration[theta]["forecast"],
                "udcg_forecast": calibration.get(CALIBRATED_UDCG, {}).get("forecast"),
            }
        )
    return {"forecasts": rows} if rows else {}


def ordering_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The table of orderings, best paired difference first."""
    lines = [
        "",
        "## Context orderings vs. the retriever order of the same questions",
        "",
        "| run | order | accuracy | retriever order | difference [95% CI] "
        "| UDCG-theta (ordering) | UDCG-theta (retriever order) |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row['run']} | {row['order']} | {row['accuracy']:.3f} | "
            f"{row['retriever_accuracy']:.3f} | {row['difference']:+.3f} "
            f"{show_interval(*row['difference_ci95'])} | {show_optional(row['mean_theta'])} | "
            f"{show_optional(row['retriever_mean_theta'])} |"
        )
    return lines


def forecast_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The table of accuracy forecasts per member."""
    lines = [
        "",
        "## Accuracy forecast from judge labels (held-out probabilities, 95% CIs)",
        "",
        "| run | measured accuracy | UDCG-theta forecast | difference | calibrated UDCG "
        "forecast | difference |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        theta = show_forecast(row["theta_forecast"])
        udcg = show_forecast(row["udcg_forecast"]) if row["udcg_forecast"] else ["n/a"] * 3
        lines.append(
            f"| {row['run']} | {theta[1]} | {theta[0]} | {theta[2]} | {udcg[0]} | {udcg[2]} |"
        )
    return lines


def markdown(summary: dict[str, Any]) -> str:
    """Tables: runs by accuracy with metric means; metrics by Kendall tau."""
    metrics = [a["metric"] for a in summary["ranking_agreement"]]
    lines = ["# Sweep summary", ""]
    lines += [f"**Note:** {note}" for note in summary.get("notes", [])]
    lines += [""] if summary.get("notes") else []
    lines += ["| run | accuracy | " + " | ".join(metrics) + " |"]
    lines.append("| --- | ---: |" + " ---: |" * len(metrics))
    for run in summary["runs"]:
        means = " | ".join(f"{run['means'][m]:.3f}" for m in metrics)
        lines.append(f"| {run['run']} | {run['accuracy']:.3f} | {means} |")
    lines += ["", "## Which metric ranks the runs like accuracy does (Kendall tau-b)", ""]
    lines += ["| metric | tau |", "| --- | ---: |"]
    for a in summary["ranking_agreement"]:
        tau = "n/a" if a["kendall_tau"] is None else f"{a['kendall_tau']:+.3f}"
        mark = " *" if a["fitted_per_run"] else ""
        lines.append(f"| {a['metric']}{mark} | {tau} |")
    if any(a["fitted_per_run"] for a in summary["ranking_agreement"]):
        lines += [
            "",
            "\\* fitted on each run's own outcomes (cross-fitted halves): every run gets its own "
            "gamma or weights, so these means do not compare across runs; rank runs with the "
            "fixed metrics, or with UDCG-theta weights trained elsewhere (`theta_weights=`).",
        ]
    if "orderings" in summary:
        lines += ordering_markdown(summary["orderings"])
    if "forecasts" in summary:
        lines += forecast_markdown(summary["forecasts"])
    return "\n".join(lines) + "\n"


def member_reports(sweep_dir: Path, sweep_id: str | None = None) -> list[dict[str, Any]]:
    """The ``*/report.json`` under ``sweep_dir`` whose ``sweep.id`` is ``sweep_id``; None:
    every one."""
    reports = [json.loads(p.read_text()) for p in sorted(Path(sweep_dir).glob("*/report.json"))]
    if sweep_id is None:
        return reports
    return [r for r in reports if r.get("sweep", {}).get("id") == sweep_id]


def write_summary(sweep_dir: Path, sweep_id: str | None = None) -> Path | None:
    """Summarise the reports of sweep ``sweep_id``'s members (:func:`member_reports`; None:
    every report) with the sweep id; None when there is none (and an earlier summary in
    ``sweep_dir`` is removed)."""
    reports = member_reports(sweep_dir, sweep_id)
    if not reports:
        for name in ("sweep_summary.json", "sweep_summary.md"):
            (Path(sweep_dir) / name).unlink(missing_ok=True)
        return None
    summary = {"sweep_id": sweep_id, **summarize(reports)}
    with atomic_write(Path(sweep_dir) / "sweep_summary.json") as handle:
        json.dump(summary, handle, indent=2)
    path = Path(sweep_dir) / "sweep_summary.md"
    with atomic_write(path) as handle:
        handle.write(markdown(summary))
    return path
