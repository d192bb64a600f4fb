"""``udcg annotate IN.jsonl OUT.jsonl --judge smollm2-135m --steps abstain relevance outcomes
[--relevance string|llm] [--grader span|llm]``: judge labels for a contexts file (see
:mod:`udcg.labels.annotate` for what each step writes). Every call goes through the on-disk
cache, so an interrupted run resumes where it stopped; the output is written atomically at the
end. ``-`` as IN reads standard input, as OUT writes standard output (the counts then go to
stderr)."""

from __future__ import annotations

import argparse
import sys

from udcg.cli.common import info_stream, run_cli
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
    parser.add_argument("--judge", default="smollm2-135m", help="judge spec (see udcg.judge)")
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
    parser.add_argument("--cache", help="judge cache (SQLite); default ~/.cache/udcg/judge.sqlite")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a user mistake)."""
    args = _parser().parse_args(argv)

    def work() -> None:
        from udcg.judge import load_judge
        from udcg.judge.cached import CachedJudge

        contexts = list(read_contexts(args.input))
        check_inputs(contexts, args.steps, args.relevance)
        judge = CachedJudge(load_judge(args.judge), args.cache)
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
