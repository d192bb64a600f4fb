"""``udcg probe --judge openai:MODEL@URL [JUDGE OPTIONS] [--format text|json]``: ask a judge's
server what it offers each annotate step, with a handful of tiny requests.

Prints what the server answered (models listed, log-probs and how many top alternatives come
back, the abstention token and whether it is among them, prompt log-probs with ``echo``,
``response_format`` JSON output, generation) and the row of the serving table: what each
annotate step gets from this server (``exact``, ``upper bound``, ``yes``, ``no``).
``--format json`` prints the same as one JSON object. Takes the judge options of ``udcg
annotate`` (``--judge-option``, ``--timeout``, ``--template-tokenizer``...); with
``--template-tokenizer`` it also reads one answer likelihood. A spec that is not
``openai:...``, and a server that does not answer, are one line on stderr and exit status 2;
a failing check is reported in the output, not as an error. The judge cache is not read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from udcg.cli.common import CommandParser, parse, run_cli
from udcg.cli.judge_args import add_judge_arguments, check_judge_arguments, judge_options
from udcg.errors import UDCGInputError
from udcg.io.files import standard_output
from udcg.judge.spec import OPENAI
from udcg.validation import printable

if TYPE_CHECKING:
    from udcg.judge.openai_probe import ServerReport

PROG = "udcg probe"


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``udcg probe``."""
    parser = CommandParser(
        prog=PROG,
        description="Ask an OpenAI-compatible judge server what it offers each annotate step "
        "(log-probs, top log-probs limit, abstention token, echo, tokenizer, JSON output).",
    )
    add_judge_arguments(parser)
    parser.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="output: the findings and the table row, or one JSON object (default: %(default)s)",
    )
    return parser


def _text(report: ServerReport) -> str:
    """The findings, then the serving-table row as Markdown; control and format characters
    (a server's reasons may hold escape sequences) escaped on every line."""
    listed = {None: "no list", True: "yes", False: "NO (check the model name)"}
    top = (
        f"{report.top_logprobs_returned} returned of {report.top_logprobs_asked} asked"
        if report.chat_logprobs
        else "not read (failed check: abstention)"
        if report.refused
        else "no log-probs"
    )
    if report.abstain_in_top:
        where = f"in the top log-probs (log-prob {report.abstain_logprob:.4g})"
    elif report.abstain_in_top is False:
        where = f"outside the top log-probs (bound: log-prob {report.abstain_bound:.4g})"
        if report.abstain_exact is not None:
            where += f"; exact by echo: {'yes' if report.abstain_exact else 'no'}"
    else:
        where = "not checked"
    lines = [
        f"server            {report.url}",
        f"model             {report.model} (listed by /v1/models: {listed[report.model_listed]})",
        f"chat log-probs    {top}",
        f"abstention token  {report.abstain_token!r} ({report.abstain_token_source}), {where}",
        f"echo log-probs    {'yes' if report.echo_logprobs else 'no'} (/v1/completions)",
        f"JSON output       {report.json_output} (response_format json_object)",
        f"generates         {'yes' if report.generate else 'no'}",
    ]
    lines += [f"failed check      {name}: {reason}" for name, reason in report.errors.items()]
    steps = report.steps()
    lines += [
        "",
        "| server | " + " | ".join(steps) + " |",
        "|" + " --- |" * (len(steps) + 1),
        f"| {report.model} | " + " | ".join(steps.values()) + " |",
    ]
    return "\n".join(map(printable, lines))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``udcg probe``; returns the exit status."""
    args = parse(build_parser(), argv)

    def run() -> int:
        out = standard_output()  # where the findings go: refused closed or read-only, first
        if not args.judge.startswith(OPENAI):
            raise UDCGInputError(
                f"probes a server judge (openai:MODEL@BASE_URL), got {args.judge!r}",
                field="--judge",
            )
        if args.engine != "local" or args.cache is not None:
            raise UDCGInputError("asks the server directly; --engine and --cache do not apply")
        check_judge_arguments(args)
        from udcg.judge import load_judge
        from udcg.judge.openai_http import masked
        from udcg.judge.openai_probe import probe_server, report_json
        from udcg.labels.annotate import relevance_messages

        judge = load_judge(args.judge, args.judge_key, **judge_options(args))
        relevance = relevance_messages(
            "Who wrote Hamlet?",
            ["William Shakespeare"],
            "Hamlet is a tragedy written by William Shakespeare.",
        )
        with judge:
            report = probe_server(judge, relevance)
        shown = report_json(report) if args.format == "json" else _text(report)
        print(masked(shown), file=out)  # a server may quote the key anywhere it answers
        return 0

    return run_cli(PROG, run)


if __name__ == "__main__":
    sys.exit(main())
