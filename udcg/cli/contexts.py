"""``udcg contexts RUN (--topics T --collection C | --dataset ID) -k K -o OUT [--answers A]
[--qrels Q] [--name NAME]``: a TREC run joined with its topics and passage collection into
contexts JSONL.

Each query's top-k documents in trec_eval order, with question, passage texts, scores and,
when given, reference answers and qrels relevance (:mod:`udcg.io.joins.run_contexts`); the
collection is streamed, keeping only the passages the run needs. With ``--dataset ID`` the
topics, passages and qrels come from an ir_datasets dataset
(:mod:`udcg.io.formats.ir_datasets`): queries from ``queries_iter()``, passages looked up by id
in its docs store, qrels from ``qrels_iter()`` when it has them; ``--topics``,
``--collection`` and ``--qrels`` files replace those parts. ``-`` as RUN reads standard input,
as OUT writes standard output; ``hf:DIR`` as OUT writes a Hugging Face dataset
(``save_to_disk``, :mod:`udcg.io.formats.hf_datasets`). A one-line summary goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from udcg.cli.common import (
    CommandParser,
    add_out,
    messages,
    output_path,
    parse,
    refuse_stdin_twice,
    run_cli,
)
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import write_contexts
from udcg.io.contexts.model import Context
from udcg.io.files import STDIO, refuse_same_file
from udcg.io.formats.hf_datasets import HF_PREFIX, hf_spec
from udcg.io.joins.run_contexts import build_run_contexts
from udcg.progress import progress

_INPUTS = ("topics", "collection", "answers", "qrels")


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``udcg contexts``."""
    parser = CommandParser(
        prog="udcg contexts",
        description="Join a TREC run with topics and a passage collection into contexts JSONL "
        "(each query's top-k passages in trec_eval order), ready for the judge.",
    )
    parser.add_argument("run", help="run file: qid Q0 doc_id rank score tag (gzip ok; - = stdin)")
    parser.add_argument(
        "--topics",
        help="queries: qid<TAB>text, or JSONL {qid, text|query|question[, answers]} (gzip ok); "
        "required without --dataset",
    )
    parser.add_argument(
        "--collection",
        help="passages, streamed: doc_id<TAB>text, doc_id<TAB>title<TAB>text (or a header "
        "naming the columns), or JSONL {doc_id|id|_id, text|contents[, title]} (gzip ok); "
        "required without --dataset",
    )
    add_dataset(parser)
    parser.add_argument("-k", "--k", type=int, required=True, help="passages per context")
    add_out(
        parser,
        "contexts JSONL (.gz compresses; - = stdout), or hf:DIR for a Hugging Face dataset "
        "saved with save_to_disk",
        required=True,
        type=_out_name,
    )
    parser.add_argument(
        "--answers",
        help="reference answers: qid<TAB>answer[<TAB>answer...], or JSONL {qid, answers: [...]}",
    )
    parser.add_argument(
        "--qrels",
        help="qrels file: qid iteration doc_id grade (relevant: >= 1); default with --dataset: "
        "the dataset's qrels, when it has them",
    )
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
        """The one line on stderr: what was written, where, how long it took."""
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


def dataset_sources(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """Topics, collection and qrels (``args.topics``, ``args.collection``, ``args.qrels``): the
    files given, the rest from the ir_datasets dataset ``args.dataset`` when one is given
    (qrels: None when it has none)."""
    if args.dataset is None:
        return args.topics, args.collection, args.qrels
    from udcg.io.formats.ir_datasets import load_ir_dataset
    from udcg.io.formats.trec import qrels_from_dict

    dataset = load_ir_dataset(args.dataset)
    topics, collection, qrels = args.topics, args.collection, args.qrels
    if topics is None:
        dataset.require("queries", "give --topics")
        topics = dataset.topics
    if collection is None:
        dataset.require("docs", "give --collection")
        collection = dataset.passages
    if qrels is None and dataset.has("qrels"):
        qrels = qrels_from_dict(dataset.qrels())
    return topics, collection, qrels


def add_dataset(parser: argparse.ArgumentParser) -> None:
    """``--dataset ID``: topics, passages and qrels from ir_datasets."""
    parser.add_argument(
        "--dataset",
        metavar="ID",
        help="an ir_datasets id (e.g. msmarco-passage/dev/small): its queries, its passages "
        "looked up by id in the docs store and its qrels (the ir-datasets extra)",
    )


def require_files_without_dataset(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> None:
    """Without ``--dataset``, ``--topics`` and ``--collection`` are required (a usage error)."""
    if args.dataset is None:
        missing = [f"--{name}" for name in ("topics", "collection") if getattr(args, name) is None]
        if missing:
            parser.error(
                f"the following arguments are required without --dataset: {', '.join(missing)}"
            )


def _out_path(out: str) -> str:
    """The path ``-o`` names: the folder of ``hf:DIR``, else ``out`` itself."""
    return out.removeprefix(HF_PREFIX) if out.startswith(HF_PREFIX) else out


def _out_name(text: str) -> str:
    """``-o``: ``hf:DIR`` names a folder (a trailing slash is fine), anything else a file
    (:func:`udcg.cli.common.output_path`)."""
    return text if text.startswith(HF_PREFIX) else output_path(text)


def _write(out: str, contexts: Iterable[Context]) -> None:
    """``contexts`` to the JSONL file ``out``, or to a Hugging Face dataset for ``hf:DIR``."""
    if not out.startswith(HF_PREFIX):
        write_contexts(out, contexts, check=False)  # made from checked input
        return
    from udcg.io.formats.hf_datasets import save_contexts_dataset

    save_contexts_dataset(contexts, out.removeprefix(HF_PREFIX))


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a user mistake)."""
    parser = build_parser()
    args = parse(parser, argv)
    require_files_without_dataset(parser, args)

    def work() -> None:
        start = time.perf_counter()
        for name in _INPUTS:
            if getattr(args, name) == STDIO:
                raise UDCGInputError("only RUN may be - (standard input)", field=name)
        if args.out == HF_PREFIX:
            raise UDCGInputError(
                f"expected {HF_PREFIX}DIR, a folder to save the dataset to", field="out"
            )
        folder, split = None, None
        if args.out.startswith(HF_PREFIX):  # as its folder is read back: no trailing / or /.
            folder, split = hf_spec(HF_PREFIX + os.path.normpath(args.out[len(HF_PREFIX) :]))
        if split is not None:
            raise UDCGInputError(
                f"{args.out} would be read as the split {split!r} of {folder}, and -o hf:DIR "
                "writes one dataset: name its folder without #SPLIT",
                field="out",
            )
        inputs = {"RUN": args.run, **{f"--{name}": getattr(args, name) for name in _INPUTS}}
        refuse_stdin_twice(inputs)
        refuse_same_file(_out_path(args.out), inputs)
        topics, collection, qrels = dataset_sources(args)
        contexts = build_run_contexts(
            args.run,
            topics,
            collection,
            args.k,
            answers=args.answers,
            qrels=qrels,
            run_name=args.name,
        )
        tally = _Tally()
        with progress(None, "contexts", unit="ctx") as bar:
            _write(args.out, tally.count(contexts, args.k, bar))
        seconds = time.perf_counter() - start
        print(tally.summary(args.k, qrels is not None, args.out, seconds), file=messages())

    return run_cli("udcg contexts", work)


if __name__ == "__main__":
    sys.exit(main())
