"""``udcg compare QRELS RUN1 RUN2 [RUN ...] -m nDCG@10 AP [--test t|randomization|bootstrap]
[--alpha 0.05] [--baseline NAME] [--names A B ...] [--format markdown|json|latex]``.

Evaluates every run against the qrels (trec_eval semantics, a judged query a run misses scores
0) and prints the means with paired significance tests between the systems. Systems are named
after their files (``runs/bm25.trec.gz`` -> ``bm25``) unless ``--names`` is given.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from udcg.cli.common import run_cli
from udcg.cli.trec import add_measures_argument
from udcg.errors import UDCGInputError
from udcg.io.files import STDIO
from udcg.trec.comparison import ComparisonReport, compare
from udcg.trec.significance import TESTS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="udcg compare",
        description="Compare TREC runs on the same qrels with paired significance tests.",
    )
    parser.add_argument("qrels", help="qrels file: qid iteration doc_id relevance (gzip ok)")
    parser.add_argument("runs", nargs="+", metavar="run", help="two or more TREC run files")
    add_measures_argument(parser)
    parser.add_argument("--test", choices=TESTS, default="t", help="paired test (default: t)")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level")
    parser.add_argument(
        "--correction",
        choices=["holm", "none"],
        default="holm",
        help="multiple-comparison correction over the tests of each measure (default: holm)",
    )
    parser.add_argument(
        "--n-resamples", type=int, default=10000, help="for randomization/bootstrap"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the resamples")
    parser.add_argument("--baseline", metavar="NAME", help="test each system against this one only")
    parser.add_argument("--names", nargs="+", metavar="NAME", help="system names, one per run")
    parser.add_argument("--format", choices=["markdown", "json", "latex"], default="markdown")
    parser.add_argument("--digits", type=int, default=4, help="decimals of the means in tables")
    return parser


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
    args = _parser().parse_args(argv)

    def work() -> None:
        if [args.qrels, *args.runs].count(STDIO) > 1:
            raise UDCGInputError("only one of QRELS and the runs can be - (standard input)")
        report = compare(
            args.qrels,
            _named_runs(args.runs, args.names),
            args.measures,
            test=args.test,
            alpha=args.alpha,
            correction=None if args.correction == "none" else args.correction,
            n_resamples=args.n_resamples,
            seed=args.seed,
            baseline=args.baseline,
        )
        sys.stdout.write(render(report, args.format, args.digits))

    return run_cli("udcg compare", work)


if __name__ == "__main__":
    sys.exit(main())
