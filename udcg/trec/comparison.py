"""Compare systems on the same qrels with paired significance tests (the job of ranx.compare).

Every run is evaluated with trec_eval semantics (:func:`udcg.trec.engine.evaluate_table`) on the
queries the qrels judge; a judged query that a run does not retrieve for scores 0 for that run
(trec_eval ``-c``), so every system is tested on the same queries. Queries of a run that the
qrels do not judge are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow.compute as pc

from udcg.errors import UDCGInputError
from udcg.io.trec_files import Qrels
from udcg.trec.engine import QrelsLike, RunLike, as_qrels, evaluate_table, import_pandas
from udcg.trec.measures import Measure, parse_measures
from udcg.trec.significance import TESTS, holm, paired_test
from udcg.validation import (
    integer,
    nonempty_str,
    nonnegative_int,
    one_of,
    open_fraction,
    positive_int,
)

if TYPE_CHECKING:
    from udcg.io.utilities import Utilities, UtilitiesLike
    from udcg.trec.utility_measures import WeightsLike

Test = Literal["t", "randomization", "bootstrap"]
CORRECTIONS: tuple[str, ...] = ("holm",)

_TEST_NAMES = {
    "t": "paired t-test",
    "randomization": "paired randomization test",
    "bootstrap": "paired bootstrap test",
}
#: Unicode superscript forms of a..z (q has no common one: U+107A5, modifier letter small q)
_SUPERSCRIPTS = dict(zip("abcdefghijklmnopqrstuvwxyz", "ᵃᵇᶜᵈᵉᶠᵍʰⁱʲᵏˡᵐⁿᵒᵖ𐞥ʳˢᵗᵘᵛʷˣʸᶻ", strict=True))
_LATEX_SPECIAL = {c: "\\" + c for c in "&%$#_{}"} | {
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "\\": r"\textbackslash{}",
}


@dataclass(frozen=True)
class Comparison:
    """One paired two-sided test of ``system`` against ``other`` on ``measure``:
    ``difference`` = mean(system) - mean(other); ``significant``: ``p_corrected <= alpha``
    (``p_corrected`` equals ``p_value`` without a correction)."""

    measure: str
    system: str
    other: str
    difference: float
    p_value: float
    p_corrected: float
    significant: bool


@dataclass(frozen=True, eq=False)
class ComparisonReport:
    """Means of every system and measure (over ``n_queries`` judged queries) and the paired
    tests between them: every pair of systems, or each system against ``baseline``."""

    systems: list[str]
    measures: list[str]
    means: dict[str, dict[str, float]]
    comparisons: list[Comparison]
    test: str
    alpha: float
    correction: str | None
    baseline: str | None
    n_queries: int
    n_resamples: int
    seed: int | None

    def comparison(self, system: str, other: str, measure: str) -> Comparison:
        """The test of ``system`` against ``other`` (in either order it was run) on
        ``measure``, oriented so that ``difference`` = mean(system) - mean(other)."""
        for c in self.comparisons:
            if c.measure == measure and (c.system, c.other) == (system, other):
                return c
            if c.measure == measure and (c.system, c.other) == (other, system):
                return Comparison(
                    measure, system, other, -c.difference, c.p_value, c.p_corrected, c.significant
                )
        raise UDCGInputError(
            f"no comparison of {system!r} with {other!r} on {measure!r}", field="system"
        )

    def beats(self, system: str, measure: str) -> list[str]:
        """The systems whose mean ``system`` exceeds significantly on ``measure``, in order."""
        won = set()
        for c in self.comparisons:
            if c.measure == measure and c.significant:
                if c.system == system and c.difference > 0:
                    won.add(c.other)
                elif c.other == system and c.difference < 0:
                    won.add(c.system)
        return [s for s in self.systems if s in won]

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the options, ``means[system][measure]`` and one dict per comparison."""
        return {
            "test": self.test,
            "alpha": self.alpha,
            "correction": self.correction,
            "baseline": self.baseline,
            "n_queries": self.n_queries,
            "n_resamples": self.n_resamples,
            "seed": self.seed,
            "systems": list(self.systems),
            "measures": list(self.measures),
            "means": {s: dict(m) for s, m in self.means.items()},
            "comparisons": [asdict(c) for c in self.comparisons],
        }

    def to_json(self, indent: int | None = 2) -> str:
        """:meth:`to_dict` as JSON."""
        return json.dumps(self.to_dict(), indent=indent)

    def to_dataframe(self) -> Any:
        """One row per comparison (measure, system, other, both means, difference, p-values,
        significant) as a pandas DataFrame; needs pandas."""
        pd = import_pandas("ComparisonReport.to_dataframe()")
        return pd.DataFrame(
            [
                {
                    "measure": c.measure,
                    "system": c.system,
                    "other": c.other,
                    "mean_system": self.means[c.system][c.measure],
                    "mean_other": self.means[c.other][c.measure],
                    "difference": c.difference,
                    "p_value": c.p_value,
                    "p_corrected": c.p_corrected,
                    "significant": c.significant,
                }
                for c in self.comparisons
            ]
        )

    def _letters(self) -> dict[str, str]:
        if len(self.systems) > len(_SUPERSCRIPTS):
            raise UDCGInputError(
                f"a table letters at most {len(_SUPERSCRIPTS)} systems, got "
                f"{len(self.systems)}; use to_dict() or to_json()",
                field="systems",
            )
        return dict(zip(self.systems, _SUPERSCRIPTS, strict=False))

    def _cells(self, digits: int) -> list[tuple[str, str, list[tuple[str, str]]]]:
        """Per system: its letter, name and, per measure, the formatted mean and the letters
        of the systems it beats."""
        if integer(digits, "digits") < 0:
            raise UDCGInputError(f"must be at least 0, got {digits}", field="digits")
        letters = self._letters()
        return [
            (
                letters[s],
                s,
                [
                    (
                        f"{self.means[s][m]:.{digits}f}",
                        "".join(letters[o] for o in self.beats(s, m)),
                    )
                    for m in self.measures
                ],
            )
            for s in self.systems
        ]

    def legend(self) -> str:
        """One sentence saying what a superscript letter means."""
        n = len(self.comparisons) // len(self.measures)
        family = f"the {n} comparison{'s' if n != 1 else ''}" + (
            f" with the baseline {self.baseline!r}" if self.baseline is not None else ""
        )
        level = (
            f"p <= {self.alpha:g} after Holm's correction over {family} of each measure"
            if self.correction == "holm"
            else f"uncorrected p <= {self.alpha:g}, {family} of each measure"
        )
        return (
            "Superscripts: the systems this one is significantly better than "
            f"({_TEST_NAMES[self.test]}, two-sided, {level}; means over {self.n_queries} queries)."
        )

    def to_markdown(self, digits: int = 4) -> str:
        """A Markdown table of means, one row per lettered system, with superscripts, then
        the legend."""
        lines = [
            "| | system | " + " | ".join(self.measures) + " |",
            "| --- | --- | " + " | ".join("---:" for _ in self.measures) + " |",
        ]
        for letter, system, cells in self._cells(digits):
            marks = " | ".join(mean + "".join(_SUPERSCRIPTS[x] for x in won) for mean, won in cells)
            name = system.replace("|", r"\|")  # a bar would end the cell
            lines.append(f"| {letter} | {name} | {marks} |")
        return "\n".join(lines) + "\n\n" + self.legend() + "\n"

    def to_latex(self, digits: int = 4) -> str:
        """A booktabs ``table`` of means with ``$^{ab}$`` superscripts and the legend as its
        caption."""
        header = " & ".join(["", "System", *map(_latex, self.measures)])
        rows = [
            " & ".join(
                [letter, _latex(system)]
                + [mean + (f"$^{{{won}}}$" if won else "") for mean, won in cells]
            )
            + r" \\"
            for letter, system, cells in self._cells(digits)
        ]
        return "\n".join(
            [
                r"\begin{table}[t]",
                r"\centering",
                r"\begin{tabular}{cl" + "r" * len(self.measures) + "}",
                r"\toprule",
                header + r" \\",
                r"\midrule",
                *rows,
                r"\bottomrule",
                r"\end{tabular}",
                r"\caption{" + _latex(self.legend()).replace("<=", r"$\le$") + "}",
                r"\end{table}",
                "",
            ]
        )


def _latex(text: str) -> str:
    """``text`` with LaTeX's special characters escaped."""
    return "".join(_LATEX_SPECIAL.get(c, c) for c in text)


def _judged_qids(qrels: QrelsLike) -> tuple[Qrels, list[str]]:
    """``(the qrels as read, the ids of the queries they judge, sorted)``."""
    judged = as_qrels(qrels)
    return judged, sorted(pc.unique(judged.qids).to_pylist())


def _per_query(
    qrels: Qrels,
    run: RunLike,
    measures: list[Measure],
    row_of: dict[str, int],
    options: dict[str, Any],
) -> np.ndarray:
    """``[n_judged, n_measures]`` values of ``run``; 0 for a judged query it does not rank.
    ``options``: the utility measures' keyword arguments of ``evaluate_table``."""
    result = evaluate_table(qrels, run, measures, **options)
    values = np.zeros((len(row_of), len(measures)))
    values[[row_of[q] for q in result.qids]] = result.values
    return values


def _pairs(systems: list[str], baseline: str | None) -> list[tuple[int, int]]:
    """Index pairs ``(i, j)`` to test: every pair with i < j, or each other system against the
    baseline (j = the baseline's index)."""
    if baseline is None:
        return [(i, j) for i in range(len(systems)) for j in range(i + 1, len(systems))]
    b = systems.index(baseline)
    return [(i, b) for i in range(len(systems)) if i != b]


def _check_options(
    runs: Mapping[str, RunLike],
    test: str,
    alpha: float,
    correction: str | None,
    n_resamples: int,
    seed: int | None,
    baseline: str | None,
) -> list[str]:
    """The system names, after checking every option."""
    if not isinstance(runs, Mapping):
        raise UDCGInputError(
            f"expected a mapping of system name to run, got {type(runs).__name__}", field="runs"
        )
    systems = [nonempty_str(name, "runs") for name in runs]
    if len(systems) < 2:
        raise UDCGInputError(
            f"need at least 2 systems to compare, got {len(systems)}", field="runs"
        )
    one_of(test, "test", TESTS)
    open_fraction(alpha, "alpha")
    if correction is not None:
        one_of(correction, "correction", CORRECTIONS)
    positive_int(n_resamples, "n_resamples")
    if seed is not None:
        nonnegative_int(seed, "seed")
    if baseline is not None and baseline not in runs:
        raise UDCGInputError(
            f"unknown system {baseline!r}; known: {', '.join(systems)}", field="baseline"
        )
    return systems


def compare(
    qrels: QrelsLike,
    runs: Mapping[str, RunLike],
    measures: str | Measure | Iterable[str | Measure],
    *,
    test: Test = "t",
    alpha: float = 0.05,
    correction: str | None = "holm",
    n_resamples: int = 10000,
    seed: int | None = 0,
    baseline: str | None = None,
    utilities: Utilities | UtilitiesLike | None = None,
    utility_field: str | None = None,
    weights: WeightsLike | Iterable[WeightsLike] | None = None,
    allow_mismatch: Sequence[str] = (),
) -> ComparisonReport:
    """Evaluate each run of ``runs`` (name -> run file, dict or Run) against ``qrels`` and
    test every pair of systems (or each against ``baseline``) on every measure.

    ``test``: ``t`` (paired t-test, scipy's ``ttest_rel``), ``randomization`` (sign flips of the
    per-query differences; exact when 2^n_queries <= n_resamples) or ``bootstrap`` (queries
    resampled, differences shifted to mean 0); all two-sided, see :mod:`udcg.trec.significance`.
    ``correction="holm"`` adjusts the p-values of the comparisons of each measure with
    Holm-Bonferroni; a comparison is significant when its (adjusted) p-value is <= ``alpha``.

    ``qrels`` and the runs may be anything :func:`udcg.trec.engine.evaluate_table` accepts
    (files, dicts, udcg or ranx objects, DataFrames, ir_measures Qrel/ScoredDoc lists).
    ``utilities``, ``utility_field``, ``weights`` and ``allow_mismatch`` go to
    ``evaluate_table`` for the utility measures (UDCG@k, UDCGtheta@k), the same for every run.
    """
    systems = _check_options(runs, test, alpha, correction, n_resamples, seed, baseline)
    parsed = parse_measures(measures)
    judged, qids = _judged_qids(qrels)
    if len(qids) < 2:
        raise UDCGInputError(
            f"the qrels judge {len(qids)} quer{'y' if len(qids) == 1 else 'ies'}; "
            "a paired test needs at least 2",
            field="qrels",
        )
    row_of = {q: i for i, q in enumerate(qids)}
    options = {
        "utilities": utilities,
        "utility_field": utility_field,
        "weights": weights,
        "allow_mismatch": allow_mismatch,
    }
    values = np.stack([_per_query(judged, runs[s], parsed, row_of, options) for s in systems])
    pairs = _pairs(systems, baseline)
    # differences[:, pair, measure] -> one column per test
    differences = np.stack([values[i] - values[j] for i, j in pairs], axis=1)
    p = paired_test(differences.reshape(len(qids), -1), test, n_resamples, seed).reshape(
        len(pairs), len(parsed)
    )
    corrected = np.apply_along_axis(holm, 0, p) if correction == "holm" else p
    means = values.mean(axis=1)
    names = [str(m) for m in parsed]
    comparisons = [
        Comparison(
            measure=names[k],
            system=systems[i],
            other=systems[j],
            difference=float(means[i, k] - means[j, k]),
            p_value=float(p[n, k]),
            p_corrected=float(corrected[n, k]),
            significant=bool(corrected[n, k] <= alpha),
        )
        for k in range(len(parsed))
        for n, (i, j) in enumerate(pairs)
    ]
    return ComparisonReport(
        systems=systems,
        measures=names,
        means={s: dict(zip(names, means[i].tolist(), strict=True)) for i, s in enumerate(systems)},
        comparisons=comparisons,
        test=test,
        alpha=float(alpha),
        correction=correction,
        baseline=baseline,
        n_queries=len(qids),
        n_resamples=int(n_resamples),
        seed=seed,
    )
