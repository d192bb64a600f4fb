"""``udcg tables {distractors,selection} --data NQ-OPEN [--limit N] [-k K] [-o DIR]``: UDCG's
Table 1 (the same relevant passage among weak or hard distractors) and Table 2 (the top k of
a retriever's top ``--candidates`` by binary relevance, by utility or by eRAG label) on
NQ-open with a judge (:mod:`udcg.pipeline.paper_tables`).

Writes ``DIR/<study>.json`` (every number, the command, the settings, the judge cache counts)
and ``DIR/<study>.md``, and prints the table. Stage outputs go to ``--cache-dir`` and judge
calls to the judge cache, so a rerun or an interrupted run recomputes nothing it already has.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from udcg.cli.common import CommandParser, close_at_end, info_stream, parse, run_cli
from udcg.errors import UDCGInputError
from udcg.io.files import atomic_write, exclusive_writer
from udcg.pipeline.datasets import NQ_OPEN_SOURCE

#: The NQ-open oracle file where ``udcg benchmark dataset=nq_open`` looks for it.
DEFAULT_DATA = "../shared/data/nq-open-oracle.jsonl.gz"


def build_parser(prog: str = "udcg tables") -> argparse.ArgumentParser:
    """The arguments of ``udcg tables``."""
    parser = CommandParser(
        prog=prog,
        description="UDCG's Table 1 (weak vs hard distractors) and Table 2 (top k of the top "
        "N by relevance, utility or eRAG) on NQ-open with a judge.",
    )
    parser.add_argument(
        "study",
        choices=("distractors", "selection"),
        help="distractors: Table 1; selection: Table 2",
    )
    parser.add_argument(
        "--data", default=DEFAULT_DATA, help="the NQ-open oracle file (default: %(default)s)"
    )
    parser.add_argument("--limit", type=int, default=100, help="first N questions (default: 100)")
    parser.add_argument("-k", "--k", type=int, default=5, help="passages per context (default: 5)")
    parser.add_argument(
        "--candidates", type=int, default=25, help="selection: the top-N pool (default: 25)"
    )
    parser.add_argument("--judge", default="smollm2-135m", help="judge spec (default: %(default)s)")
    parser.add_argument(
        "--utility",
        default="abstention",
        help="utility source: abstention | answer_likelihood (default: %(default)s)",
    )
    parser.add_argument(
        "--n-bootstrap", type=int, default=1000, help="bootstrap resamples (default: 1000)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="random distractors and bootstrap (default: 0)"
    )
    parser.add_argument(
        "--no-erag",
        action="store_true",
        help="distractors: no eRAG labels (saves k generations per question)",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path("outputs/udcg_tables/cache"),
        help="stage outputs (default: %(default)s)",
    )
    parser.add_argument(
        "-o", "--out", type=Path, default=Path("outputs/udcg_tables"), help="output folder"
    )
    return parser


def run(args: argparse.Namespace, command: Sequence[str]) -> None:
    """Run one study, write ``OUT/<study>.json`` and ``.md`` and print the table; a second
    process on the same output is refused while one runs."""
    args.out.mkdir(parents=True, exist_ok=True)
    with exclusive_writer(args.out / f"{args.study}.json", "tables output"):
        _study(args, command)


def _study(args: argparse.Namespace, command: Sequence[str]) -> None:
    from udcg.pipeline.benchmark import connect_judge
    from udcg.pipeline.datasets import nq_open
    from udcg.pipeline.paper_tables import (
        OUTCOME_COLUMNS,
        compare_conditions,
        distractor_study,
        markdown,
        selection_study,
    )
    from udcg.pipeline.settings import EvaluateSettings
    from udcg.pipeline.stages import StageCache
    from udcg.retrieval import BM25Retriever

    if not Path(args.data).exists():
        raise UDCGInputError(f"no such file; --data is {NQ_OPEN_SOURCE}", path=args.data)
    started = time.time()
    settings = EvaluateSettings(
        k=args.k,
        judge=args.judge,
        utility=args.utility,
        seed=args.seed,
        n_bootstrap=args.n_bootstrap,
        cache_dir=args.cache_dir,
    )
    dataset = nq_open(args.data, limit=args.limit)
    judge = close_at_end(connect_judge(settings))
    cache = StageCache(args.cache_dir)
    if args.study == "distractors":
        conditions = distractor_study(
            dataset, BM25Retriever(), settings, judge, cache, erag=not args.no_erag
        )
        reference = "weak"
    else:
        conditions = selection_study(
            dataset, BM25Retriever(), settings, judge, cache, args.candidates, name="bm25"
        )
        reference = "bm25"
    result = compare_conditions(
        conditions,
        args.k,
        settings.judge_key,
        settings.utility,
        reference,
        args.n_bootstrap,
        args.seed,
    )
    result["command"] = shlex.join(command)
    result["seconds"] = round(time.time() - started, 1)
    result["judge_cache"] = judge.cache.stats()
    with atomic_write(args.out / f"{args.study}.json") as handle:
        handle.write(json.dumps(result, indent=2) + "\n")
    columns = None if args.study == "distractors" else list(OUTCOME_COLUMNS)
    table = markdown(result, columns)
    with atomic_write(args.out / f"{args.study}.md") as handle:
        handle.write(f"    {result['command']}\n\n{table}\n")
    print(table, file=info_stream())
    print(f"{result['n_questions']} questions, {result['seconds']} s", file=info_stream())


def main(
    argv: Sequence[str] | None = None,
    prog: str = "udcg tables",
    data: str = DEFAULT_DATA,
) -> int:
    """Entry point; returns the exit status (2 for a user mistake). ``prog`` names the
    command in messages and in the recorded command line; ``data``: the default ``--data``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(prog)
    parser.set_defaults(data=data)
    args = parse(parser, argv)
    return run_cli(prog, lambda: run(args, [*prog.split(), *argv]))
