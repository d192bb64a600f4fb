"""``udcg demo``: build the embedded demo set and annotate it with the judge (about 20 minutes
on 2 CPU cores); see :mod:`udcg.demo_data.demo` for what it holds. The set is annotated as
``udcg annotate`` annotates (:func:`udcg.labels.stream.annotate_stream`, in one chunk), so OUT
gets the same ``OUT.manifest.json`` record of the judge, steps and input, and the same lock."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from udcg.cli.common import CommandParser, add_out, info_stream, judge_inputs, parse, run_cli
from udcg.cli.judge_args import add_judge_arguments, check_judge_arguments, open_cli_judge
from udcg.demo_data.demo import OUTPUT, SOURCE, STEPS, build_contexts, load_source
from udcg.labels.annotate import annotate, check_provided
from udcg.labels.provenance import default_record
from udcg.labels.stream import annotate_stream, refuse_outputs


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``udcg demo``."""
    parser = CommandParser(
        prog="udcg demo",
        description="Rebuild the embedded demo set and annotate it with the judge (about 20 "
        "minutes on 2 CPU cores).",
    )
    parser.add_argument(
        "--source",
        type=Path,
        default=SOURCE,
        help="the questions and passages the set is built from (default: the shipped file)",
    )
    add_out(
        parser,
        "annotated contexts JSONL (default: the shipped demo file; - writes to stdout)",
        type=Path,
        default=OUTPUT,
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the set's sampling (default: %(default)s)"
    )
    add_judge_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Build, annotate and write the demo set."""
    args = parse(build_parser(), argv)

    def work() -> None:
        check_judge_arguments(args)
        refuse_outputs(args.out, {"--source": args.source, **judge_inputs(args)})
        contexts = build_contexts(load_source(args.source), args.seed)
        judge = open_cli_judge(args)
        check_provided(judge, STEPS, "string")
        report, _ = annotate_stream(
            contexts,
            args.out,
            lambda part: annotate(part, judge, steps=STEPS),
            chunk=len(contexts),
            total=len(contexts),
            record=default_record(judge, STEPS, len(contexts)),
        )
        print(
            f"wrote {report.contexts} contexts to {args.out}: {report.pairs} passage pairs, "
            f"{report.answer_pairs} answer-likelihood pairs, "
            f"grades {dict(report.grades)}; "
            f"cache hits {judge.cache.hits}, misses {judge.cache.misses}",
            file=info_stream(str(args.out)),
        )

    return run_cli("udcg demo", work)


if __name__ == "__main__":
    sys.exit(main())
