"""``udcg annotate IN.jsonl OUT.jsonl --judge smollm2-135m --steps abstain relevance outcomes
[--relevance string|llm] [--grader span|llm]``: judge labels for a contexts file (see
:mod:`udcg.labels.annotate` for what each step writes), stored under the judge's key
(``--judge-name``, else the spec without connection details). Judge options and the cache:
:mod:`udcg.cli.judge_args`. Every call goes through the shared on-disk cache, so an
interrupted run resumes where it stopped; the output is written atomically at the end. ``-``
as IN reads standard input, as OUT writes standard output (the counts then go to stderr)."""

from __future__ import annotations

import argparse
import sys

from udcg.cli.common import info_stream, run_cli
from udcg.cli.judge_args import add_judge_arguments, check_judge_arguments, open_cli_judge
from udcg.io.contexts import read_contexts, write_contexts
from udcg.labels.annotate import (
    DEFAULT_STEPS,
    GRADERS,
    RELEVANCE_MODES,
    STEPS,
    annotate,
    check_inputs,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="udcg annotate", description=__doc__.splitlines()[0])
    parser.add_argument("input", help="contexts JSONL (gzip ok; - reads stdin)")
    parser.add_argument("output", help="annotated contexts JSONL (.gz compresses; - is stdout)")
    parser.add_argument(
        "--steps",
        nargs="+",
        default=list(DEFAULT_STEPS),
        choices=STEPS,
        help=f"default: {' '.join(DEFAULT_STEPS)}",
    )
    parser.add_argument("--relevance", choices=RELEVANCE_MODES, default="string")
    parser.add_argument("--grader", choices=GRADERS, default="span")
    parser.add_argument("--mode", choices=["first_token", "sequence"], default="first_token")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    add_judge_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a user mistake)."""
    args = _parser().parse_args(argv)

    def work() -> None:
        check_judge_arguments(args)
        contexts = list(read_contexts(args.input))
        check_inputs(contexts, args.steps, args.relevance)
        judge = open_cli_judge(args)
        annotated, report = annotate(
            contexts, judge, args.steps, args.relevance, args.grader, args.mode, args.max_new_tokens
        )
        write_contexts(args.output, annotated)
        cache = judge.cache
        out = info_stream(args.output)
        print(
            f"annotated {report.contexts} contexts with {judge.name}: {report.pairs} passage "
            f"pairs, {report.answer_pairs} answer-likelihood pairs, "
            f"{report.relevance_checks} relevance checks, {report.answers} answers; "
            f"cache hits {cache.hits}, misses {cache.misses}",
            file=out,
        )
        if report.grades:
            grades = ", ".join(f"{g} {n}" for g, n in sorted(report.grades.items()))
            print(f"grades: {grades}", file=out)
        for what, n in report.failures.items():
            print(f"failures: {n} {what}", file=sys.stderr)

    return run_cli("udcg annotate", work)


if __name__ == "__main__":
    sys.exit(main())
