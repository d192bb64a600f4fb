"""Compare systems on the same qrels with paired significance tests (the job of ranx.compare).

Every run is evaluated with trec_eval semantics (:func:`udcg.trec.engine.evaluate_table`) on the
queries the qrels judge; a judged query that a run does not retrieve for scores 0 for that run
(trec_eval ``-c``), so every system is tested on the same queries. Queries of a run that the
qrels do not judge are ignored.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow.compute as pc

from udcg._lazy import import_pandas
from udcg.errors import UDCGInputError, UDCGWarning
from udcg.io.formats.trec import Qrels
from udcg.trec.engine import QrelsLike, RunLike, as_qrels, evaluate_table
from udcg.trec.measures import COVERAGE_MEASURES, UTILITY_MEASURES, Measure, parse_measures
from udcg.trec.significance import TESTS, bootstrap_interval, holm, paired_test
from udcg.validation import (
    integer,
    nonempty_str,
    nonnegative_int,
    one_of,
    open_fraction,
    positive_int,
)

if TYPE_CHECKING:
    from udcg.io.joins.utilities import Utilities, UtilitiesLike
    from udcg.trec.coverage_measures import CoverageLike
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
    ``difference`` = mean(system) - mean(other), ``ci_low``..``ci_high`` its paired bootstrap
    confidence interval; ``significant``: ``p_corrected <= alpha`` (``p_corrected`` equals
    ``p_value`` without a correction).

    Examples:
        y misses the relevant document of q1 and q2 (RR 0), x ranks it first (RR 1):

        >>> qrels = {"q1": {"a": 1}, "q2": {"a": 1}}
        >>> runs = {"x": {"q1": {"a": 1.0}, "q2": {"a": 1.0}}, "y": {"q1": {"b": 1.0}}}
        >>> c = compare(qrels, runs, "RR").comparison("y", "x", "RR")
        >>> c.system, c.other, c.difference, c.significant
        ('y', 'x', -1.0, True)
    """

    measure: str
    system: str
    other: str
    difference: float
    ci_low: float
    ci_high: float
    p_value: float
    p_corrected: float
    significant: bool


@dataclass(frozen=True, eq=False)
class ComparisonReport:
    """Means of every system and measure (over ``n_queries`` judged queries) and the paired
    tests between them: every pair of systems, or each system against ``baseline``; each
    difference with its ``confidence`` paired bootstrap interval (``n_resamples``, ``seed``).

    The tables (:meth:`to_markdown`, :meth:`to_latex`) show, per system and measure, the mean
    with superscript letters (the systems it beats significantly) and, for every system but the
    reference (``baseline``, or the first system without one), the difference to the
    reference, its interval, the test's p-value and a dagger where the difference is
    significant after the correction:
    ``0.5460ᵃ (+0.0340 [+0.0100, +0.0580], p=0.0040)†``.

    Examples:
        >>> qrels = {"q1": {"a": 1}, "q2": {"a": 1}}
        >>> runs = {"x": {"q1": {"a": 1.0}, "q2": {"a": 1.0}}, "y": {"q1": {"b": 1.0}}}
        >>> report = compare(qrels, runs, "RR")
        >>> report.reference, report.means, report.n_queries
        ('x', {'x': {'RR': 1.0}, 'y': {'RR': 0.0}}, 2)
    """

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
    confidence: float
    unranked: dict[str, int] = field(default_factory=dict)  # judged queries a system misses

    @property
    def reference(self) -> str:
        """The system the tables show differences to: ``baseline``, else the first system."""
        return self.baseline if self.baseline is not None else self.systems[0]

    def comparison(self, system: str, other: str, measure: str) -> Comparison:
        """The test of ``system`` against ``other`` (in either order it was run) on
        ``measure``, oriented so that ``difference`` = mean(system) - mean(other)."""
        for c in self.comparisons:
            if c.measure == measure and (c.system, c.other) == (system, other):
                return c
            if c.measure == measure and (c.system, c.other) == (other, system):
                return Comparison(
                    measure,
                    system,
                    other,
                    -c.difference,
                    -c.ci_high,
                    -c.ci_low,
                    c.p_value,
                    c.p_corrected,
                    c.significant,
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
            "confidence": self.confidence,
            "unranked": dict(self.unranked),
            "systems": list(self.systems),
            "measures": list(self.measures),
            "means": {s: dict(m) for s, m in self.means.items()},
            "comparisons": [asdict(c) for c in self.comparisons],
        }

    def to_json(self, indent: int | None = 2) -> str:
        """:meth:`to_dict` as JSON."""
        return json.dumps(self.to_dict(), indent=indent)

    def to_dataframe(self) -> Any:
        """One row per comparison (measure, system, other, both means, difference, its
        confidence interval, p-values, significant) as a pandas DataFrame; needs pandas."""
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
                    "ci_low": c.ci_low,
                    "ci_high": c.ci_high,
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

    def _cells(self, digits: int) -> list[tuple[str, str, list[_Cell]]]:
        """Per system: its letter, name and, per measure, its formatted cell parts."""
        if integer(digits, "digits") < 0:
            raise UDCGInputError(f"must be at least 0, got {digits}", field="digits")
        letters = self._letters()
        return [
            (letters[s], s, [self._cell(s, m, letters, digits) for m in self.measures])
            for s in self.systems
        ]

    def _cell(self, system: str, measure: str, letters: dict[str, str], digits: int) -> _Cell:
        """The mean of ``system`` on ``measure``, the letters of the systems it beats and,
        except for the reference system, its difference to the reference."""
        mean = f"{self.means[system][measure]:.{digits}f}"
        won = "".join(letters[o] for o in self.beats(system, measure))
        if system == self.reference:
            return _Cell(mean, won, None, False)
        c = self.comparison(system, self.reference, measure)
        smallest = 10.0**-digits
        p = f"<{smallest:.{digits}f}" if c.p_value < smallest else f"={c.p_value:.{digits}f}"
        # + 0.0 turns the -0.0 of a flipped zero difference into 0.0
        low, difference, high = (
            f"{x + 0.0:+.{digits}f}" for x in (c.ci_low, c.difference, c.ci_high)
        )
        versus = (difference, low, high, p)
        return _Cell(mean, won, versus, c.significant)

    def legend(self) -> str:
        """What a superscript letter, the parenthesis and the dagger mean."""
        n = len(self.comparisons) // len(self.measures)
        family = f"the {n} comparison{'s' if n != 1 else ''}" + (
            f" with the baseline {self.baseline!r}" if self.baseline is not None else ""
        )
        level = (
            f"p <= {self.alpha:g} after Holm's correction over {family} of each measure"
            if self.correction == "holm"
            else f"uncorrected p <= {self.alpha:g}, {family} of each measure"
        )
        reference = "the baseline" if self.baseline is not None else "the first system"
        seeded = "unseeded" if self.seed is None else f"seed {self.seed}"
        missed = ", ".join(f"{s!r} {n}" for s, n in self.unranked.items() if n)
        return (
            "Superscripts: the systems this one is significantly better than "
            f"({_TEST_NAMES[self.test]}, two-sided, {level}; means over {self.n_queries} "
            f"queries). In parentheses: the difference to {reference} {self.reference!r}, its "
            f"{100 * self.confidence:g}% paired bootstrap confidence interval ({self.n_resamples} "
            f"resamples of the queries, {seeded}) and the test's p-value before correction; "
            "† marks a significant difference (by the criterion of the superscripts)."
            + (
                f" Judged queries a system does not rank score 0 (trec_eval -c): {missed}."
                if missed
                else ""
            )
        )

    def to_markdown(self, digits: int = 4) -> str:
        """A Markdown table, one row per lettered system: each mean with superscripts and, but
        for the reference system, ``(difference [CI], p=...)`` and ``†``; then the legend."""
        lines = [
            "| | system | " + " | ".join(self.measures) + " |",
            "| --- | --- | " + " | ".join("---:" for _ in self.measures) + " |",
        ]
        for letter, system, cells in self._cells(digits):
            marks = " | ".join(cell.markdown() for cell in cells)
            name = system.replace("|", r"\|")  # a bar would end the cell
            lines.append(f"| {letter} | {name} | {marks} |")
        return "\n".join(lines) + "\n\n" + self.legend() + "\n"

    def to_latex(self, digits: int = 4) -> str:
        """A booktabs ``table`` of the cells of :meth:`to_markdown` (superscripts as
        ``$^{ab}$``, the parenthesis in math mode) with the legend as its caption."""
        header = " & ".join(["", "System", *map(_latex, self.measures)])
        rows = [
            " & ".join([letter, _latex(system)] + [cell.latex() for cell in cells]) + r" \\"
            for letter, system, cells in self._cells(digits)
        ]
        caption = _latex(self.legend()).replace("<=", r"$\le$").replace("†", r"$^\dagger$")
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
                r"\caption{" + caption + "}",
                r"\end{table}",
                "",
            ]
        )


@dataclass(frozen=True)
class _Cell:
    """One table cell: the formatted mean, the letters of the systems it beats, and (but for
    the reference system) the formatted difference, interval bounds and ``=p``/``<p``."""

    mean: str
    won: str
    versus: tuple[str, str, str, str] | None
    significant: bool

    def markdown(self) -> str:
        """``0.5460ᵃ (+0.0340 [+0.0100, +0.0580], p=0.0040)†``."""
        text = self.mean + "".join(_SUPERSCRIPTS[x] for x in self.won)
        if self.versus is not None:
            difference, low, high, p = self.versus
            text += f" ({difference} [{low}, {high}], p{p})" + ("†" if self.significant else "")
        return text

    def latex(self) -> str:
        """``0.5460$^{a}$ $(+0.0340\\;[+0.0100, +0.0580],\\;p=0.0040)^{\\dagger}$``."""
        text = self.mean + (f"$^{{{self.won}}}$" if self.won else "")
        if self.versus is not None:
            difference, low, high, p = self.versus
            dagger = r"^{\dagger}" if self.significant else ""
            text += f" $({difference}\\;[{low}, {high}],\\;p{p}){dagger}$"
        return text


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
) -> tuple[np.ndarray, int]:
    """``[n_judged, n_measures]`` values of ``run`` (0 for a judged query it does not rank) and
    the number of judged queries it ranks. ``options``: the utility measures' keyword
    arguments of ``evaluate_table``."""
    result = evaluate_table(qrels, run, measures, **options)
    values = np.zeros((len(row_of), len(measures)))
    values[[row_of[q] for q in result.qids]] = result.values
    return values, len(result.qids)


def _pairs(systems: list[str], baseline: str | None) -> list[tuple[int, int]]:
    """Index pairs ``(i, j)`` to test: every pair with i < j, or each other system against the
    baseline (j = the baseline's index)."""
    if baseline is None:
        return [(i, j) for i in range(len(systems)) for j in range(i + 1, len(systems))]
    b = systems.index(baseline)
    return [(i, b) for i in range(len(systems)) if i != b]


def check_options(
    runs: Mapping[str, RunLike],
    test: str,
    alpha: float,
    correction: str | None,
    n_resamples: int,
    seed: int | None,
    baseline: str | None,
    confidence: float,
) -> list[str]:
    """The system names, after checking every option (``udcg report`` checks them before it
    asks the judge).

    Examples:
        >>> check_options({"a": {}, "b": {}}, "t", 0.05, "holm", 1000, 0, "a", 0.95)
        ['a', 'b']
        >>> check_options({"a": {}, "b": {}}, "t", 2, None, 1000, 0, None, 0.95)
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'alpha': must be a number strictly between 0 and 1, got 2
    """
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
    open_fraction(confidence, "confidence")
    if seed is not None:
        nonnegative_int(seed, "seed")
    if baseline is not None and baseline not in runs:
        raise UDCGInputError(
            f"unknown system {baseline!r}; known: {', '.join(systems)}", field="baseline"
        )
    return systems


def _same_kind(sources: list[Utilities]) -> None:
    """Refuse per-system utilities of different kinds (field: abstention, answer likelihood or
    ready utilities) or of different judges (where the files name one, or their manifests
    record different fingerprints of it): the systems would be scored on different scales."""
    for what, value in (
        ("kind", lambda u: u.field),
        ("judge", lambda u: u.judge),
        ("judge fingerprint (their manifests)", lambda u: u.fingerprint),
    ):
        seen = {value(u): u for u in sources if value(u) is not None}
        if len(seen) > 1:
            shown = " and ".join(f"{v!r} ({u.source or 'given'})" for v, u in seen.items())
            raise UDCGInputError(
                f"the systems' utilities differ in {what}: {shown}; a comparison needs one "
                "judge's values of one kind for every system",
                field="utilities",
            )
    unknown = [u.source or "given" for u in sources if u.fingerprint is None]
    if unknown and len(unknown) < len(sources):
        warnings.warn(
            f"the judge fingerprint of the utilities in {', '.join(unknown)} is unknown (no"
            " manifest records it), so it is not checked against the others': one judge key"
            " may name two models",
            UDCGWarning,
            stacklevel=3,
        )


def _utility_options(
    measures: list[Measure],
    systems: list[str],
    utilities: Utilities | UtilitiesLike | Sequence[Utilities | UtilitiesLike] | None,
    utility_field: str | None,
    weights: WeightsLike | Iterable[WeightsLike] | None,
    allow_mismatch: Sequence[str],
    mismatch_option: str | None,
) -> list[dict[str, Any]]:
    """Per system, the keyword arguments of ``evaluate_table`` for the utility measures, with
    every utilities file and every weights file read once: ``utilities`` is one source for all
    systems or a list (tuple) of one source per system, in order."""
    per_system = isinstance(utilities, list | tuple)
    if per_system and len(utilities) != len(systems):
        raise UDCGInputError(
            f"{len(utilities)} utility sources for {len(systems)} systems: give one for all "
            "systems or one per system, in order",
            field="utilities",
        )
    wanted = [m for m in measures if m.name in UTILITY_MEASURES]
    if not wanted:
        return [{} for _ in systems]
    from udcg.io.joins.utilities import as_utilities
    from udcg.trec.utility_measures import _weights_by_k

    loaded_weights = list(_weights_by_k(wanted, weights).values()) or None
    sources = list(utilities) if per_system else [utilities] * len(systems)
    if None in sources:
        return [{"utilities": None} for _ in systems]  # evaluate_table words the error
    read: dict[int, Utilities] = {}  # one source given for several systems is read once
    for source in sources:
        if id(source) not in read:
            read[id(source)] = as_utilities(source, utility_field)
    _same_kind(list(read.values()))
    return [
        {
            "utilities": read[id(source)],
            "utility_field": utility_field,
            "weights": loaded_weights,
            "allow_mismatch": allow_mismatch,
            "mismatch_option": mismatch_option,
        }
        for source in sources
    ]


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
    utilities: Utilities | UtilitiesLike | Sequence[Utilities | UtilitiesLike] | None = None,
    utility_field: str | None = None,
    weights: WeightsLike | Iterable[WeightsLike] | None = None,
    allow_mismatch: Sequence[str] = (),
    confidence: float = 0.95,
    coverage: CoverageLike | None = None,
    mismatch_option: str | None = None,
) -> ComparisonReport:
    """Evaluate each run of ``runs`` (name -> run file, dict or Run) against ``qrels`` and
    test every pair of systems (or each against ``baseline``) on every measure.

    ``test``: ``t`` (paired t-test, scipy's ``ttest_rel``), ``randomization`` (sign flips of the
    per-query differences; exact when 2^n_queries <= n_resamples) or ``bootstrap`` (queries
    resampled, differences shifted to mean 0); all two-sided, see :mod:`udcg.trec.significance`.
    ``correction="holm"`` adjusts the p-values of the comparisons of each measure with
    Holm-Bonferroni; a comparison is significant when its (adjusted) p-value is <= ``alpha``.
    Each difference gets its ``confidence`` paired percentile bootstrap interval
    (:func:`udcg.trec.significance.bootstrap_interval`: ``n_resamples`` resamples of the
    queries drawn from ``seed``, the same for every comparison).

    ``qrels`` and the runs may be anything :func:`udcg.trec.engine.evaluate_table` accepts
    (files, dicts, udcg or ranx objects, DataFrames, ir_measures Qrel/ScoredDoc lists).
    ``utilities``, ``utility_field``, ``weights``, ``allow_mismatch`` and ``mismatch_option`` go to
    ``evaluate_table`` for the utility measures (UDCG@k, UDCGtheta@k): ``utilities`` is one
    source (a file, a ``{qid: {doc_id: value}}`` dict, :class:`~udcg.io.joins.utilities.Utilities`)
    for every run, or a list of one source per run in the order of ``runs`` (each run's
    annotated contexts, say); each file is read once. ``coverage`` (one source for every run,
    read once) serves the coverage measures (C-Prec@k, C-nDCG@k), as in ``evaluate_table``.

    Examples:
        ``good`` ranks the relevant document first on 6 queries, ``bad`` second: 0.5 better
        on each, which only 2 of the 2^6 sign flips of the randomization test reach:

        >>> qrels = {f"q{i}": {"a": 1} for i in range(6)}
        >>> good = {q: {"a": 2.0, "b": 1.0} for q in qrels}
        >>> bad = {q: {"a": 1.0, "b": 2.0} for q in qrels}
        >>> report = compare(qrels, {"good": good, "bad": bad}, "RR", test="randomization")
        >>> c = report.comparison("good", "bad", "RR")
        >>> c.difference, c.p_value, report.beats("good", "RR")
        (0.5, 0.03125, ['bad'])
    """
    systems = check_options(runs, test, alpha, correction, n_resamples, seed, baseline, confidence)
    parsed = parse_measures(measures)
    options = _utility_options(
        parsed, systems, utilities, utility_field, weights, allow_mismatch, mismatch_option
    )
    if coverage is not None and any(m.name in COVERAGE_MEASURES for m in parsed):
        from udcg.trec.coverage_measures import as_coverage

        loaded = as_coverage(coverage)
        options = [{**o, "coverage": loaded} for o in options]
    judged, qids = _judged_qids(qrels)
    if len(qids) < 2:
        raise UDCGInputError(
            f"the qrels judge {len(qids)} quer{'y' if len(qids) == 1 else 'ies'}; "
            "a paired test needs at least 2",
            field="qrels",
        )
    row_of = {q: i for i, q in enumerate(qids)}
    per_system = [
        _per_query(judged, runs[s], parsed, row_of, o)
        for s, o in zip(systems, options, strict=True)
    ]
    values = np.stack([v for v, _ in per_system])
    unranked = {s: len(qids) - n for s, (_, n) in zip(systems, per_system, strict=True)}
    for s, n in unranked.items():
        if n:
            warnings.warn(
                f"system {s!r} ranks no document for {n} of the {len(qids)} judged queries; "
                "they score 0 (trec_eval -c)",
                UDCGWarning,
                stacklevel=2,
            )
    pairs = _pairs(systems, baseline)
    # differences[:, pair, measure] -> one column per test
    differences = np.stack([values[i] - values[j] for i, j in pairs], axis=1)
    columns = differences.reshape(len(qids), -1)
    p = paired_test(columns, test, n_resamples, seed).reshape(len(pairs), len(parsed))
    low, high = bootstrap_interval(columns, confidence, n_resamples, seed).reshape(
        2, len(pairs), len(parsed)
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
            ci_low=float(low[n, k]),
            ci_high=float(high[n, k]),
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
        confidence=float(confidence),
        unranked=unranked,
    )
