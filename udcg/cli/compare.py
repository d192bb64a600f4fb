"""``udcg compare [-m MEASURE]... QRELS RUN1 RUN2 [RUN ...] [--utilities U]... [--utility SOURCE]
[--judge-key KEY] [--weights W]... [--test t|randomization|bootstrap] [--alpha 0.05]
[--baseline NAME] [--names A,B,...] [--n-resamples 10000] [--seed 0] [--confidence 0.95]
[--format markdown|json|latex]``.

Evaluates every run against the qrels (trec_eval semantics, a judged query a run misses scores
0) and prints the means with paired significance tests between the systems, and each system's
difference to the baseline (or the first system) with its paired bootstrap confidence interval
and p-value. Systems are named after their files (``runs/bm25.trec.gz`` -> ``bm25``) unless
``--names`` is given. The UDCG measures read passage utilities as ``udcg trec`` does: one
``--utilities`` file for every run, or one per run in the order of the runs (each run's
annotated contexts from ``udcg annotate``, say).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from udcg.cli.common import (
    CommandParser,
    add_judge_key,
    add_list_option,
    add_theta_weights,
    parse,
    refuse_stdin_twice,
    run_cli,
    utility_field,
)
from udcg.cli.trec import (
    _weights,
    add_coverage,
    add_measures_argument,
    add_utility_source,
    add_weights_mismatch,
    coverage_file,
)
from udcg.cli.weights import add_allow_unverified
from udcg.errors import UDCGInputError
from udcg.io.files import standard_output
from udcg.io.joins.utilities import read_utility_file
from udcg.trec.comparison import ComparisonReport, compare
from udcg.trec.significance import TESTS


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``udcg compare``."""
    parser = CommandParser(
        prog="udcg compare",
        description="Compare TREC runs on the same qrels with paired significance tests.",
    )
    parser.add_argument("qrels", help="qrels file: qid iteration doc_id relevance (gzip ok)")
    parser.add_argument("runs", nargs="+", metavar="run", help="two or more TREC run files")
    add_measures_argument(parser)
    _add_utility_arguments(parser)
    parser.add_argument("--test", choices=TESTS, default="t", help="paired test (default: t)")
    parser.add_argument(
        "--alpha", type=float, default=0.05, help="significance level (default: %(default)s)"
    )
    parser.add_argument(
        "--correction",
        choices=["holm", "none"],
        default="holm",
        help="multiple-comparison correction over the tests of each measure (default: holm)",
    )
    parser.add_argument(
        "--n-resamples",
        type=int,
        default=10000,
        help="resamples of the confidence intervals and the randomization/bootstrap tests "
        "(default: 10000)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the resamples (default: 0)")
    parser.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="level of the paired bootstrap confidence intervals (default: 0.95)",
    )
    parser.add_argument("--baseline", metavar="NAME", help="test each system against this one only")
    add_list_option(
        parser, "--names", metavar="NAME", help="system names, one per run (repeatable)"
    )
    parser.add_argument(
        "--format",
        choices=["markdown", "json", "latex"],
        default="markdown",
        help="output format (default: %(default)s)",
    )
    parser.add_argument("--digits", type=int, default=4, help="decimals of the means in tables")
    return parser


def _add_utility_arguments(parser: argparse.ArgumentParser) -> None:
    """The inputs of the UDCG measures, spelt as ``udcg trec`` spells them."""
    add_list_option(
        parser,
        "--utilities",
        metavar="FILE",
        whole=True,
        help="for UDCG measures (repeatable): one file for every run, or one per run in the "
        "order of the runs; each TSV lines 'qid doc_id value', JSONL lines {\"qid\", "
        '"doc_id", FIELD: value} or an annotated contexts JSONL (udcg annotate; gzip ok; - '
        "reads stdin)",
    )
    add_judge_key(
        parser,
        "with annotated contexts files as --utilities: the judge whose "
        "passages[].abstain_prob[KEY] (or answer_prob[KEY]) to read (needed when they hold "
        "several judges)",
    )
    add_utility_source(parser)
    add_theta_weights(parser)
    add_weights_mismatch(parser)
    add_allow_unverified(parser)
    add_coverage(parser)


def _utilities(args: argparse.Namespace) -> tuple[str | list | None, str | None]:
    """``(utilities, utility field)`` as :func:`udcg.trec.compare` takes them: one source or
    one per run; with ``--judge-key`` each file is read here with that key."""
    field = utility_field(args.utility)
    files = args.utilities
    if files is None:
        if args.judge_key is not None:
            raise UDCGInputError("--judge-key reads the --utilities files; none given")
        return None, field
    if len(files) not in (1, len(args.runs)):
        raise UDCGInputError(
            f"{len(files)} utilities files for {len(args.runs)} runs: give one for every run "
            "or one per run, in the order of the runs",
            field="utilities",
        )
    if args.judge_key is not None:
        read = [read_utility_file(path, field, args.judge_key) for path in files]
        return (read[0] if len(read) == 1 else read), field
    return (files[0] if len(files) == 1 else list(files)), field


def system_name(path: str) -> str:
    """A run file's system name: its file name without ``.gz`` and without its last suffix."""
    return Path(Path(path).name.removesuffix(".gz")).stem


def _named_runs(runs: list[str], names: list[str] | None) -> dict[str, str]:
    """``{system name: run path}``; a repeated name is an error."""
    if len(runs) < 2:
        raise UDCGInputError(f"need at least 2 runs to compare, got {len(runs)}", field="runs")
    if names is not None and len(names) != len(runs):
        raise UDCGInputError(f"{len(names)} names for {len(runs)} runs", field="names")
    named: dict[str, str] = {}
    for name, run in zip(names or map(system_name, runs), runs, strict=True):
        if name in named:
            raise UDCGInputError(
                f"duplicate system name {name!r} ({named[name]} and {run}); give --names",
                field="names",
            )
        named[name] = run
    return named


def render(report: ComparisonReport, fmt: str, digits: int) -> str:
    """The report as Markdown, LaTeX or JSON text."""
    if fmt == "json":
        return report.to_json() + "\n"
    return report.to_latex(digits) if fmt == "latex" else report.to_markdown(digits)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a user mistake)."""
    args = parse(build_parser(), argv)

    def work() -> None:
        standard_output()  # where the report goes: closed, refused before the work
        refuse_stdin_twice({"QRELS": args.qrels, "RUN": args.runs, "--utilities": args.utilities})
        named = _named_runs(args.runs, args.names)
        utilities, field = _utilities(args)
        report = compare(
            args.qrels,
            named,
            args.measures,
            test=args.test,
            alpha=args.alpha,
            correction=None if args.correction == "none" else args.correction,
            n_resamples=args.n_resamples,
            seed=args.seed,
            baseline=args.baseline,
            utilities=utilities,
            utility_field=field,
            weights=_weights(args.weights, args.allow_unverified),
            allow_mismatch=args.allow_mismatch,
            mismatch_option="--allow-mismatch {field}",
            confidence=args.confidence,
            coverage=coverage_file(args.coverage),
        )
        standard_output().write(render(report, args.format, args.digits))

    return run_cli("udcg compare", work)


if __name__ == "__main__":
    sys.exit(main())
