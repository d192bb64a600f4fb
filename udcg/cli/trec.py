"""``udcg trec QRELS RUN -m nDCG@10 AP RR P@10 [-q] [--format text|json|csv]``.

Prints the mean of each measure over the evaluated queries (and, with ``-q``, one row per query)
like trec_eval: ``measure<TAB>qid<TAB>value`` with ``all`` for the mean. ``-`` for QRELS or RUN
reads standard input.
"""

from __future__ import annotations

from udcg._threads import one_blas_thread

one_blas_thread()  # a short command: before numpy is imported (see udcg._threads)

import argparse  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402

from udcg.cli.common import run_cli  # noqa: E402
from udcg.errors import UDCGInputError  # noqa: E402
from udcg.io.files import STDIO  # noqa: E402
from udcg.trec.engine import Evaluation, evaluate_table  # noqa: E402

DEFAULT_MEASURES = ["nDCG@10", "AP", "RR", "P@10"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="udcg trec",
        description="Evaluate a TREC run against qrels with trec_eval semantics.",
    )
    parser.add_argument(
        "qrels", help="qrels file: qid iteration doc_id relevance (gzip ok; - reads stdin)"
    )
    parser.add_argument(
        "run", help="run file: qid Q0 doc_id rank score tag (gzip ok; - reads stdin)"
    )
    parser.add_argument(
        "-m",
        "--measures",
        nargs="+",
        default=DEFAULT_MEASURES,
        metavar="MEASURE",
        help="ir_measures names, e.g. nDCG@10 AP AP@100 RR P@5 R@100 Hits@10 "
        f"(default: {' '.join(DEFAULT_MEASURES)})",
    )
    parser.add_argument("-q", "--per-query", action="store_true", help="also print each query")
    parser.add_argument("--format", choices=["text", "json", "csv"], default="text")
    return parser


def _rows(result: Evaluation, per_query: bool) -> list[tuple[str, str, float]]:
    rows: list[tuple[str, str, float]] = []
    if per_query:
        for qid, values in zip(result.qids, result.values.tolist(), strict=True):
            rows.extend((str(m), qid, v) for m, v in zip(result.measures, values, strict=True))
    rows.extend((m, "all", v) for m, v in result.mean().items())
    return rows


def write_result(result: Evaluation, per_query: bool, fmt: str) -> None:
    """Write ``result`` to stdout as trec_eval-like text, JSON or CSV."""
    if fmt == "json":
        payload: dict = {"mean": result.mean(), "num_queries": len(result.qids)}
        if per_query:
            payload["per_query"] = result.to_dict()
        json.dump(payload, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    rows = _rows(result, per_query)
    if fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["measure", "qid", "value"])
        writer.writerows((m, q, repr(v)) for m, q, v in rows)
        return
    width = max(len(m) for m, _, _ in rows)
    sys.stdout.writelines(f"{m:<{width}}\t{q}\t{v:.4f}\n" for m, q, v in rows)
    sys.stdout.write(f"{'num_q':<{width}}\tall\t{len(result.qids)}\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a user mistake)."""
    args = _parser().parse_args(argv)

    def work() -> None:
        if args.qrels == args.run == STDIO:
            raise UDCGInputError("QRELS and RUN cannot both be - (standard input)")
        write_result(
            evaluate_table(args.qrels, args.run, args.measures), args.per_query, args.format
        )

    return run_cli("udcg trec", work)


if __name__ == "__main__":
    sys.exit(main())
