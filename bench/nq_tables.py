"""Markdown tables of the NQ-open benchmark (``bench/nq_benchmark.sh``) from its report.json files.

    python bench/nq_tables.py bench/data/nq/runs/*/report.json

One table of query-level Spearman correlations with end-to-end correctness (95% CI over
questions), one column per report (named by what differs between them, as sweep summaries
name their members), then accuracy by the position of the first relevant passage.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from udcg.pipeline.sweep import member_names

ORDER = (
    "UDCG",
    "UDCG-gamma",
    "UDCG-theta (cross-fitted)",
    "UDCG-theta",
    "UDCG w/o distraction",
    "UDCG w/o utility",
    "C-Prec",
    "C-nDCG",
    "nDCG",
    "MAP",
    "MRR",
    "Precision",
    "Hits",
)


def _cell(row: dict) -> str:
    if row.get("spearman") is None:
        return "n/a"
    low, high = row["ci95"]
    return f"{row['spearman']:+.3f} [{low:+.2f}, {high:+.2f}]"


def table(reports: list[dict]) -> str:
    """Rows = metrics, columns = runs (retriever, utility source)."""
    heads = member_names(reports)
    lines = [
        "| metric | " + " | ".join(heads) + " |",
        "| --- |" + " ---: |" * len(reports),
    ]
    by_run = [{row["metric"]: row for row in r["correlations"]} for r in reports]
    names = [m for m in ORDER if any(m in rows for rows in by_run)]
    for name in names:
        cells = [_cell(rows[name]) if name in rows else "" for rows in by_run]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    setup = [r["setup"] for r in reports]
    lines.append(
        "| contexts (questions) | "
        + " | ".join(f"{s['n_contexts']} ({s['n_queries']})" for s in setup)
        + " |"
    )
    lines.append("| accuracy | " + " | ".join(f"{s['accuracy']:.3f}" for s in setup) + " |")
    return "\n".join(lines)


def gold_positions(reports: list[dict]) -> str:
    """Rows = position of the first relevant passage (none first), columns = runs:
    accuracy (contexts)."""
    heads = member_names(reports)
    cells: dict[object, dict[str, str]] = {}
    for head, r in zip(heads, reports, strict=True):
        for row in r["accuracy_by_gold_position"]:
            text = f"{row['accuracy']:.3f} ({row['n']})"
            cells.setdefault(row["position"], {})[head] = text
    order = sorted(cells, key=lambda p: -1 if p is None else p)
    lines = ["| first relevant at | " + " | ".join(heads) + " |"]
    lines.append("| --- |" + " ---: |" * len(heads))
    for position in order:
        label = "none" if position is None else str(position)
        lines.append(f"| {label} | " + " | ".join(cells[position].get(h, "") for h in heads) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path)
    args = parser.parse_args()
    reports = [json.loads(p.read_text()) for p in args.reports]
    print(table(reports))
    print()
    print(gold_positions(reports))


if __name__ == "__main__":
    main()
