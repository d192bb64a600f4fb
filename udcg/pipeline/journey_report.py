"""The report of :mod:`udcg.pipeline.journey` as Markdown and as one self-contained HTML file.

The HTML holds its plots as inline SVG (no script, no external file, no plotting library): the
mean of every system on every measure with its CI, and the per-query differences to the
baseline (one dot per query, the mean difference with its CI). Systems are labelled on the axes
by :func:`plot_labels` (names too long for a panel are shortened, every label distinct), with
the full name as each label's tooltip and, when a label is shortened, a key of colour, label and
name above the plots.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

#: Colours of the systems, in order (colour-blind safe, Okabe-Ito).
COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442")
_W, _H = 220, 220  # one panel
_LEFT, _RIGHT, _TOP, _BOTTOM = 46, 10, 26, 42


def _num(x: float, sign: str = "") -> str:
    """``x`` to 4 decimals, a value that rounds to zero shown as 0 (not -0)."""
    return f"{round(x, 4) + 0.0:{sign}.4f}"


def _ci(ci: Sequence[float]) -> str:
    return f"[{_num(ci[0])}, {_num(ci[1])}]"


def _p(p: float) -> str:
    return f"{p:.2g}" if p < 0.001 else f"{p:.4f}"


def verdict_rows(report: dict[str, Any]) -> list[list[str]]:
    """One row per (measure, system): mean [CI], difference to the baseline [CI], p, p
    corrected, significant (``*`` when the corrected p is at most alpha)."""
    comparison = report["comparison"]
    base = comparison["baseline"]
    rows = []
    for m in comparison["measures"]:
        for s in comparison["systems"]:
            mean = comparison["means"][s][m]
            row = [m, s, _num(mean["mean"]), _ci(mean["ci"])]
            if s == base:
                row += ["(baseline)", "", "", "", ""]
            else:
                d = comparison["differences"][s][m]
                row += [
                    _num(d["difference"], "+"),
                    _ci(d["ci"]),
                    _p(d["p_value"]),
                    _p(d["p_corrected"]),
                    "*" if d["significant"] else "",
                ]
            rows.append(row)
    return rows


HEADER = ["measure", "system", "mean", "CI", "Δ baseline", "Δ CI", "p", "p (Holm)", "sig."]


def _forecast_rows(report: dict[str, Any]) -> list[list[str]]:
    rows = []
    for s, variants in report["forecast"]["systems"].items():
        for variant, f in variants.items():
            rows.append([s, variant, _num(f["forecast"]), _ci(f["ci"])])
    return rows


def _summary(report: dict[str, Any]) -> list[str]:
    comparison, judge = report["comparison"], report["judge"]
    confidence = round(100 * comparison["confidence"])
    return [
        f"{len(comparison['systems'])} systems, {len(comparison['qids'])} queries, "
        f"baseline {comparison['baseline']}; relevance from {report['relevance_from']}; "
        f"utilities: {report['utility']} labels of judge {judge['name']}.",
        f"CIs: {confidence}% percentile bootstrap over queries ({comparison['n_resamples']} "
        f"resamples, paired for differences); p: {comparison['test']} test, "
        f"{comparison['correction'] or 'no'} correction, alpha {comparison['alpha']}.",
        f"Judge calls: {judge['calls']} ({judge['cache_hits']} answered by the cache "
        f"{judge['cache']}).",
    ]


def to_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: a summary, the verdict table and the forecasts, if any."""
    lines = ["# Systems compared", "", *_summary(report), ""]
    lines += _md_table(HEADER, verdict_rows(report))
    if report.get("forecast"):
        lines += ["", "## Forecast end-to-end accuracy (UDCG-theta)", ""]
        lines += _md_table(["system", "forecast", "mean", "CI"], _forecast_rows(report))
    for warning in report.get("warnings", []):
        lines += ["", f"> warning: {warning}"]
    return "\n".join(lines) + "\n"


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table; a ``|`` in a cell (a system named ``bm25|v2``) is escaped."""

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", r"\|") for c in cells) + " |"

    return [line(header), "|" + "---|" * len(header)] + [line(row) for row in rows]


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _scale(lo: float, hi: float) -> tuple[float, float, list[float]]:
    """A value range over ``[lo, hi]`` that starts and ends on a tick, and its ticks (a round
    step: 1, 2, 2.5 or 5 times a power of ten; 3 to 6 of them)."""
    if hi - lo < 1e-9:
        lo, hi = lo - 0.05, hi + 0.05
    raw = (hi - lo) / 4
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    ticks = [i * step for i in range(first, last + 1)]
    return ticks[0], ticks[-1], ticks


def plot_labels(names: Sequence[str], width: int = 16) -> list[str]:
    """A label per system name for the plots' axes, at most ``width`` characters and all
    different: the names themselves when each fits; otherwise a longer name keeps its start and
    end around an ellipsis (``…``), the same split for every long name, the first split (from
    an even one towards longer ends) that leaves no two labels equal; failing that, every label
    starts with the system's number (``1:``) instead.

    Examples:
        >>> plot_labels(["bm25", "dense"])
        ['bm25', 'dense']
        >>> plot_labels(["bm25-tuned-k1-0.9-b0.4", "bm25-tuned-k1-0.9-b0.7"])
        ['bm25-tun….9-b0.4', 'bm25-tun….9-b0.7']
        >>> plot_labels(["run-aaaaaaaaaaaaaaaaaaaaaaaaaaa-x-bbbbbbbbbbbbbbbbbbbbbbbb",
        ...              "run-aaaaaaaaaaaaaaaaaaaaaaaaaaa-y-bbbbbbbbbbbbbbbbbbbbbbbb"])
        ['1:run-aaa…bbbbbb', '2:run-aaa…bbbbbb']
    """
    names = list(names)

    def cut(name: str, tail: int, room: int) -> str:
        return name if len(name) <= room else name[: room - 1 - tail] + "…" + name[-tail:]

    if all(len(n) <= width for n in names):
        return names
    even = (width - 1) // 2
    for tail in [*range(even, width - 1), *range(even - 1, 0, -1)]:
        labels = [cut(n, tail, width) for n in names]
        if len(set(labels)) == len(labels):
            return labels
    numbered = []
    for i, name in enumerate(names, 1):
        room = width - len(f"{i}:")
        numbered.append(f"{i}:{cut(name, (room - 1) // 2, room)}")
    return numbered


def _panel(
    title: str,
    labels: list[str],
    names: list[str],
    colours: list[str],
    points: list[tuple[float, float, float]],
    dots: list[list[float]] | None,
    zero: bool,
) -> str:
    """One SVG panel: per label a point with an interval bar (``(mean, low, high)``), and, with
    ``dots``, a dot per value beside it; a dashed line at 0 with ``zero``. Each axis label
    carries its system's full name (``names``) as a tooltip."""
    values = [v for p in points for v in p] + [v for d in dots or [] for v in d]
    if zero:
        values.append(0.0)
    lo, hi, ticks = _scale(min(values), max(values))
    lo, hi = lo - (hi - lo) * 0.04, hi + (hi - lo) * 0.04  # marks on the ends stay inside
    width, height = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def y(v: float) -> float:
        return _TOP + height * (hi - v) / (hi - lo)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" role="img" aria-label="{html.escape(title)}">',
        f'<rect x="0" y="0" width="{_W}" height="{_H}" fill="#ffffff"/>',
        f'<text x="{_W / 2}" y="16" text-anchor="middle" font-size="13" '
        f'font-weight="bold">{html.escape(title)}</text>',
        f'<rect x="{_LEFT}" y="{_TOP}" width="{width}" height="{height}" fill="#f7f7f7" '
        'stroke="#999999"/>',
    ]
    for t in ticks:
        parts.append(
            f'<line x1="{_LEFT}" x2="{_LEFT + width}" y1="{y(t):.1f}" y2="{y(t):.1f}" '
            'stroke="#dddddd"/>'
            f'<text x="{_LEFT - 4}" y="{y(t) + 4:.1f}" text-anchor="end" '
            f'font-size="10">{t:.3g}</text>'
        )
    if zero:
        parts.append(
            f'<line x1="{_LEFT}" x2="{_LEFT + width}" y1="{y(0):.1f}" y2="{y(0):.1f}" '
            'stroke="#333333" stroke-dasharray="4 3"/>'
        )
    step = width / max(len(labels), 1)
    for i, (label, name, colour, (mean, low, high)) in enumerate(
        zip(labels, names, colours, points, strict=True)
    ):
        x = _LEFT + step * (i + 0.5)
        for n, v in enumerate(dots[i] if dots else []):
            dx = x - step * 0.3 + step * 0.2 * ((n * 0.618) % 1.0)
            parts.append(
                f'<circle cx="{dx:.1f}" cy="{y(v):.1f}" r="3.5" fill="{colour}" '
                'fill-opacity="0.5"/>'
            )
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y(low):.1f}" y2="{y(high):.1f}" '
            f'stroke="{colour}" stroke-width="3"/>'
            f'<line x1="{x - 7:.1f}" x2="{x + 7:.1f}" y1="{y(low):.1f}" y2="{y(low):.1f}" '
            f'stroke="{colour}" stroke-width="2"/>'
            f'<line x1="{x - 7:.1f}" x2="{x + 7:.1f}" y1="{y(high):.1f}" y2="{y(high):.1f}" '
            f'stroke="{colour}" stroke-width="2"/>'
            f'<circle cx="{x:.1f}" cy="{y(mean):.1f}" r="5" fill="{colour}" stroke="#000000"/>'
            f"<g><title>{html.escape(name)}</title>"
            f'<text x="{x:.1f}" y="{_H - _BOTTOM + 16}" text-anchor="middle" '
            f'font-size="11">{html.escape(label)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def plots(report: dict[str, Any]) -> tuple[list[str], list[str]]:
    """``(mean panels, difference panels)``: one SVG per measure each."""
    comparison = report["comparison"]
    systems, base = comparison["systems"], comparison["baseline"]
    colours = [COLOURS[i % len(COLOURS)] for i in range(len(systems))]
    label_of = dict(zip(systems, plot_labels(systems), strict=True))
    labels = [label_of[s] for s in systems]
    others = [s for s in systems if s != base]
    other_labels = [label_of[s] for s in others]
    other_colours = [colours[systems.index(s)] for s in others]
    means, differences = [], []
    for m in comparison["measures"]:
        points = [
            (comparison["means"][s][m]["mean"], *comparison["means"][s][m]["ci"]) for s in systems
        ]
        means.append(_panel(m, labels, systems, colours, points, None, zero=False))
        diffs = [comparison["differences"][s][m] for s in others]
        base_values = comparison["per_query"][base][m]
        dots = [
            [a - b for a, b in zip(comparison["per_query"][s][m], base_values, strict=True)]
            for s in others
        ]
        points = [(d["difference"], *d["ci"]) for d in diffs]
        differences.append(
            _panel(
                f"{m}: system − {base}",
                other_labels,
                others,
                other_colours,
                points,
                dots,
                zero=True,
            )
        )
    return means, differences


_STYLE = (
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:1200px}"
    "table{border-collapse:collapse;margin:12px 0}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right;font-size:13px}"
    "th{background:#eee}td:nth-child(-n+2){text-align:left}"
    ".plots{display:flex;flex-wrap:wrap;gap:8px}"
    ".key{list-style:none;padding:0;font-size:13px}"
    ".swatch{display:inline-block;width:10px;height:10px;margin-right:6px}"
)


def _key(report: dict[str, Any]) -> list[str]:
    """The plots' key when a label is not its system's full name: per system its colour, its
    label and its name; nothing when every label is the name."""
    systems = report["comparison"]["systems"]
    labels = plot_labels(systems)
    if labels == systems:
        return []
    items = "".join(
        f'<li><span class="swatch" style="background:{COLOURS[i % len(COLOURS)]}"></span>'
        f"{html.escape(label)}: {html.escape(name)}</li>"
        for i, (label, name) in enumerate(zip(labels, systems, strict=True))
    )
    return [f'<ul class="key" id="key">{items}</ul>']


def to_html(report: dict[str, Any]) -> str:
    """The report as one self-contained HTML page (inline style and SVG plots)."""
    means, differences = plots(report)
    confidence = round(100 * report["comparison"]["confidence"])
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>udcg report: systems compared'
        f"</title><style>{_STYLE}</style></head><body>",
        "<h1>Systems compared</h1>",
        *(f"<p>{html.escape(line)}</p>" for line in _summary(report)),
        *(
            f'<p class="warning"><strong>warning:</strong> {html.escape(w)}</p>'
            for w in report.get("warnings", [])
        ),
        _html_table(HEADER, verdict_rows(report)),
        f"<h2>Means with {confidence}% CIs</h2>",
        *_key(report),
        f'<div class="plots" id="means">{"".join(means)}</div>',
        "<h2>Per-query differences to the baseline (dots: queries; bar: mean difference with "
        f"its {confidence}% paired CI)</h2>",
        f'<div class="plots" id="differences">{"".join(differences)}</div>',
    ]
    if report.get("forecast"):
        parts += [
            "<h2>Forecast end-to-end accuracy (UDCG-theta)</h2>",
            _html_table(["system", "forecast", "mean", "CI"], _forecast_rows(report)),
        ]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
