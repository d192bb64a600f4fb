"""``udcg annotate IN.jsonl OUT.jsonl --judge smollm2-135m --steps abstain relevance outcomes
[--relevance string|llm] [--grader span|llm] [--chunk N] [--shard I/N]``: judge labels for a
contexts file (see :mod:`udcg.labels.annotate` for what each step writes), stored under the
judge's key (``--judge-name``, else the spec without connection details). Judge options and
the cache: :mod:`udcg.cli.judge_args`.

The input is checked whole first (no judge call before a mistake is found), then read as a
stream and annotated ``--chunk`` contexts at a time, each finished chunk appended to
``OUT.partial``, renamed to OUT at the end (:mod:`udcg.labels.stream`): rerun the same command
after a crash or a kill and it resumes after the last chunk written, the judge cache covering
the calls in between. ``--shard I/N`` annotates only shard I of N (:mod:`udcg.labels.shards`);
``udcg merge-shards`` joins the N outputs. ``-`` as IN reads standard input, as OUT writes
standard output, chunk by chunk, without resuming (the counts then go to stderr)."""

from __future__ import annotations

import argparse
import functools
import sys
import warnings
from collections.abc import Iterator, Sequence

from udcg.cli.common import info_stream, run_cli
from udcg.cli.judge_args import add_judge_arguments, check_judge_arguments, open_cli_judge
from udcg.errors import UDCGWarning
from udcg.io.contexts import Context, read_contexts
from udcg.labels.annotate import (
    DEFAULT_STEPS,
    GRADERS,
    RELEVANCE_MODES,
    STEPS,
    AnnotationReport,
    annotate,
    check_inputs,
)
from udcg.labels.shards import in_shard, parse_shard
from udcg.labels.stream import DEFAULT_CHUNK, annotate_stream

#: Value field -> how the warning names it.
_BOUND_NAMES = {
    "abstain_prob": ("abstention", "pairs"),
    "answer_prob": ("answer-likelihood", "answer_pairs"),
    "relevance_prob": ("relevance", "relevance_checks"),
}


def add_step_arguments(parser: argparse.ArgumentParser, steps: Sequence[str]) -> None:
    """``--steps`` (one of ``steps``), ``--relevance``, ``--grader`` and ``--max-new-tokens``:
    the options that decide which judge calls an annotation makes."""
    parser.add_argument(
        "--steps",
        nargs="+",
        default=list(DEFAULT_STEPS),
        choices=steps,
        help=f"default: {' '.join(DEFAULT_STEPS)}",
    )
    parser.add_argument("--relevance", choices=RELEVANCE_MODES, default="string")
    parser.add_argument("--grader", choices=GRADERS, default="span")
    parser.add_argument("--max-new-tokens", type=int, default=32)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="udcg annotate", description=__doc__.splitlines()[0])
    parser.add_argument("input", help="contexts JSONL (gzip ok; - reads stdin)")
    parser.add_argument("output", help="annotated contexts JSONL (.gz compresses; - is stdout)")
    add_step_arguments(parser, STEPS)
    parser.add_argument("--mode", choices=["first_token", "sequence"], default="first_token")
    parser.add_argument(
        "--chunk",
        type=int,
        default=DEFAULT_CHUNK,
        metavar="N",
        help="contexts annotated and written at a time (default: %(default)s)",
    )
    parser.add_argument(
        "--shard",
        metavar="I/N",
        help="annotate only shard I of N (by query id); name OUT part-I-of-N.jsonl and join "
        "the N outputs with 'udcg merge-shards'",
    )
    add_judge_arguments(parser)
    return parser


def bounds_warning(report: AnnotationReport) -> str | None:
    """One line counting the values that are only upper bounds, or None when there are none."""
    parts = [
        f"{report.bounds[field]} of {getattr(report, total)} {what} values"
        for field, (what, total) in _BOUND_NAMES.items()
        if report.bounds[field]
    ]
    if not parts:
        return None
    return (
        f"{'; '.join(parts)} are upper bounds (the server's top log-probs did not hold the "
        "token; listed per passage under 'bounds')"
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a user mistake)."""
    args = _parser().parse_args(argv)

    def work() -> None:
        check_judge_arguments(args)
        shard = parse_shard(args.shard) if args.shard else None

        def contexts() -> Iterator[Context]:
            stream = read_contexts(args.input)
            return stream if shard is None else in_shard(stream, shard)

        total = check_inputs(contexts(), args.steps, args.relevance)
        judge = open_cli_judge(args)
        step = functools.partial(
            annotate,
            judge=judge,
            steps=args.steps,
            relevance=args.relevance,
            grader=args.grader,
            mode=args.mode,
            max_new_tokens=args.max_new_tokens,
        )
        report, resumed = annotate_stream(contexts(), args.output, step, args.chunk, total)
        cache = judge.cache
        out = info_stream(args.output)
        if resumed:
            print(f"resumed after {resumed} contexts already written", file=out)
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
        warning = bounds_warning(report)
        if warning:
            warnings.warn(warning, UDCGWarning, stacklevel=1)

    return run_cli("udcg annotate", work)


if __name__ == "__main__":
    sys.exit(main())
