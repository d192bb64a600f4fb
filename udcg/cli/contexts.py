"""``udcg contexts RUN --topics T --collection C -k K -o OUT [--answers A] [--qrels Q]
[--name NAME]``: a TREC run joined with its topics and passage collection into contexts JSONL.

Each query's top-k documents in trec_eval order, with question, passage texts, scores and,
when given, reference answers and qrels relevance (:mod:`udcg.io.joins.run_contexts`); the
collection is streamed, keeping only the passages the run needs. ``-`` as RUN reads standard input,
as OUT writes standard output. A one-line summary goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from udcg.cli.common import add_out, parse, run_cli
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import write_contexts
from udcg.io.contexts.model import Context
from udcg.io.files import STDIO, refuse_same_file
from udcg.io.joins.run_contexts import build_run_contexts
from udcg.progress import progress

_INPUTS = ("topics", "collection", "answers", "qrels")


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``udcg contexts``."""
    parser = argparse.ArgumentParser(
        prog="udcg contexts",
        description="Join a TREC run with topics and a passage collection into contexts JSONL "
        "(each query's top-k passages in trec_eval order), ready for the judge.",
    )
    parser.add_argument("run", help="run file: qid Q0 doc_id rank score tag (gzip ok; - = stdin)")
    parser.add_argument(
        "--topics",
        required=True,
        help="queries: qid<TAB>text, or JSONL {qid, text|query|question[, answers]} (gzip ok)",
    )
    parser.add_argument(
        "--collection",
        required=True,
        help="passages, streamed: doc_id<TAB>text, doc_id<TAB>title<TAB>text (or a header "
        "naming the columns), or JSONL {doc_id|id|_id, text|contents[, title]} (gzip ok)",
    )
    parser.add_argument("-k", "--k", type=int, required=True, help="passages per context")
    add_out(parser, "contexts JSONL (.gz compresses; - = stdout)", required=True)
    parser.add_argument(
        "--answers",
        help="reference answers: qid<TAB>answer[<TAB>answer...], or JSONL {qid, answers: [...]}",
    )
    parser.add_argument("--qrels", help="qrels file: qid iteration doc_id grade (relevant: >= 1)")
    parser.add_argument("--name", help="the contexts' run name (default: the run file's tag)")
    return parser


def _queries(n: int) -> str:
    return f"{n} {'query' if n == 1 else 'queries'}"


@dataclass
class _Tally:
    """What was written: contexts, passages, short contexts, contexts without judgements."""

    contexts: int = 0
    passages: int = 0
    short: int = 0
    unjudged: int = 0

    def count(self, contexts: Iterable[Context], k: int, bar: Any) -> Iterator[Context]:
        """``contexts`` as they are, counted (and shown on ``bar``) while they pass."""
        for ctx in contexts:
            bar.update(1)
            self.contexts += 1
            self.passages += len(ctx.passages)
            self.short += len(ctx.passages) < k
            self.unjudged += ctx.passages[0].relevant is None
            yield ctx

    def summary(self, k: int, qrels: bool, out: str, seconds: float) -> str:
        notes = [f"k={k}"]
        if self.short:
            notes.append(f"{_queries(self.short)} with fewer than {k}")
        if qrels and self.unjudged:
            notes.append(f"{_queries(self.unjudged)} without qrels: relevance left unset")
        where = "standard output" if out == STDIO else out
        return (
            f"udcg contexts: {_queries(self.contexts)}, {self.passages} passages "
            f"({'; '.join(notes)}) -> {where} in {seconds:.1f} s"
        )


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a user mistake)."""
    args = parse(build_parser(), argv)

    def work() -> None:
        start = time.perf_counter()
        for name in _INPUTS:
            if getattr(args, name) == STDIO:
                raise UDCGInputError("only RUN may be - (standard input)", field=name)
        inputs = {f"--{name}": getattr(args, name) for name in _INPUTS}
        refuse_same_file(args.out, {"RUN": args.run, **inputs})
        contexts = build_run_contexts(
            args.run,
            args.topics,
            args.collection,
            args.k,
            answers=args.answers,
            qrels=args.qrels,
            run_name=args.name,
        )
        tally = _Tally()
        with progress(None, "contexts", unit="ctx") as bar:
            write_contexts(args.out, tally.count(contexts, args.k, bar))
        seconds = time.perf_counter() - start
        print(tally.summary(args.k, args.qrels is not None, args.out, seconds), file=sys.stderr)

    return run_cli("udcg contexts", work)


if __name__ == "__main__":
    sys.exit(main())
