"""``udcg trec [-m MEASURE]... QRELS RUN [-q] [--format text|json|csv]``, with utilities
``udcg trec -m UDCG@5 -m UDCGtheta@5 QRELS RUN --utilities U [--utility SOURCE]
[--weights W.safetensors]...``, and with coverage gains ``udcg trec -m C-nDCG@10 QRELS RUN
--coverage FILE``.

Prints the mean of each measure over the evaluated queries (and, with ``-q``, one row per query)
like trec_eval: ``measure<TAB>qid<TAB>value`` with ``all`` for the mean. ``-`` for QRELS, RUN or
the utilities reads standard input (one of them at most). Options go before or after the files
(docs/cli.md).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from typing import TYPE_CHECKING

from udcg.cli.common import (
    CommandParser,
    add_allow_mismatch,
    add_judge_key,
    add_measures,
    add_theta_weights,
    add_utility,
    parse,
    reads_stdin,
    refuse_stdin_twice,
    run_cli,
    utility_field,
)
from udcg.cli.weights import add_allow_unverified
from udcg.errors import UDCGInputError
from udcg.io.files import standard_output
from udcg.trec.engine import Evaluation, evaluate_table

if TYPE_CHECKING:
    from udcg.io.weights.files import ThetaWeights

DEFAULT_MEASURES = ["nDCG@10", "AP", "RR", "P@10"]


def add_measures_argument(parser: argparse.ArgumentParser) -> None:
    """``-m/--measure`` as ``udcg trec`` and ``udcg compare`` take it."""
    add_measures(
        parser,
        DEFAULT_MEASURES,
        "ir_measures names, e.g. nDCG@10 AP AP@100 RR P@5 R@100 Hits@10 HitCount@10, "
        "trec_eval and pytrec_eval names (map, P.10, ndcg_cut.10, recip_rank, P_5), UDCG@5 "
        "UDCG(gamma=0.5)@5 UDCGtheta@5, C-Prec@10 C-nDCG@10 C-nDCG(gain=exponential)@10 "
        "C-nDCG(binary=True)@10",
    )


def add_weights_mismatch(parser: argparse.ArgumentParser) -> None:
    """``--allow-mismatch`` as ``udcg trec`` and ``udcg compare`` take it: the fields a utilities
    file can tell (:func:`udcg.trec.utility_measures.plan` checks them)."""
    add_allow_mismatch(
        parser,
        ["utility", "judge", "fingerprint", "mode"],
        "use weights fitted on another utility source, judge key, judge (fingerprint) or "
        "abstention mode on purpose (a warning records it; an annotated contexts file names its "
        "judge and its manifest the fingerprint and mode, a TSV neither; the prompt is not "
        "checked)",
    )


def add_coverage(parser: argparse.ArgumentParser) -> None:
    """``--coverage FILE`` of the coverage measures, as ``udcg trec`` and ``compare`` take it."""
    parser.add_argument(
        "--coverage",
        metavar="FILE",
        help="for C-Prec and C-nDCG: TSV lines 'qid doc_id r' (gain r in [0, 1]), JSONL lines "
        '{"qid", "doc_id", "covers": [labels]} or {..., "coverage": r}, or contexts labelled '
        "by udcg qcare label (gzip ok)",
    )


def coverage_file(path: str | None) -> str | None:
    """``--coverage`` as evaluate takes it; standard input is refused (the file is read twice:
    its first line says its format)."""
    if path is not None and reads_stdin(path):
        raise UDCGInputError(f"--coverage cannot be {path} (standard input): give a file")
    return path


def add_utility_source(parser: argparse.ArgumentParser) -> None:
    """``--utility`` of a utilities file, as ``udcg trec``, ``compare`` and ``order`` take it."""
    add_utility(
        parser,
        "what the utilities' values are: abstention (P(abstain), u = 1 - p; the TSV default), "
        "answer_likelihood (P(answer), u = p) or given (u itself); a JSONL line says it by its "
        "key (abstain_prob, answer_prob, utility)",
        given=True,
    )


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``udcg trec``."""
    parser = CommandParser(
        prog="udcg trec",
        description="Evaluate a TREC run against qrels with trec_eval semantics.",
    )
    parser.add_argument(
        "qrels", help="qrels file: qid iteration doc_id relevance (gzip ok; - reads stdin)"
    )
    parser.add_argument(
        "run", help="run file: qid Q0 doc_id rank score tag (gzip ok; - reads stdin)"
    )
    add_measures_argument(parser)
    parser.add_argument(
        "--utilities",
        metavar="FILE",
        help="for UDCG measures: TSV lines 'qid doc_id value', JSONL lines "
        '{"qid", "doc_id", FIELD: value} or an annotated contexts JSONL (udcg annotate; '
        "gzip ok; - reads stdin)",
    )
    add_judge_key(
        parser,
        "with an annotated contexts file as --utilities: the judge whose "
        "passages[].abstain_prob[KEY] (or answer_prob[KEY]) to read (needed when it holds "
        "several judges)",
    )
    add_utility_source(parser)
    add_theta_weights(parser)
    add_weights_mismatch(parser)
    add_allow_unverified(parser)
    add_coverage(parser)
    parser.add_argument("-q", "--per-query", action="store_true", help="also print each query")
    parser.add_argument(
        "--format",
        choices=["text", "json", "csv"],
        default="text",
        help="trec_eval-like text, JSON or CSV (default: %(default)s)",
    )
    return parser


def _weights(
    paths: list[str] | None, allow_unverified: bool
) -> list[str] | list[ThetaWeights] | None:
    """``--weights`` as evaluate takes them: the paths, read here when unverified weights are
    allowed (:func:`udcg.io.weights.files.read_weights`)."""
    if not (paths and allow_unverified):
        return paths
    from udcg.io.weights.files import read_weights
    from udcg.io.weights.hub import weights_source

    return [read_weights(weights_source(path), allow_unverified=True) for path in paths]


def _rows(result: Evaluation, per_query: bool) -> list[tuple[str, str, float]]:
    rows: list[tuple[str, str, float]] = []
    if per_query:
        for qid, values in zip(result.qids, result.values.tolist(), strict=True):
            rows.extend((str(m), qid, v) for m, v in zip(result.measures, values, strict=True))
    rows.extend((m, "all", v) for m, v in result.mean().items())
    return rows


def write_result(result: Evaluation, per_query: bool, fmt: str) -> None:
    """Write ``result`` to stdout as trec_eval-like text, JSON or CSV."""
    out = standard_output()
    if fmt == "json":
        payload: dict = {"mean": result.mean(), "num_queries": len(result.qids)}
        if per_query:
            payload["per_query"] = result.to_dict()
        json.dump(payload, out, indent=2)
        out.write("\n")
        return
    rows = _rows(result, per_query)
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["measure", "qid", "value"])
        writer.writerows((m, q, repr(v)) for m, q, v in rows)
        return
    width = max(len(m) for m, _, _ in rows)
    out.writelines(f"{m:<{width}}\t{q}\t{v:.4f}\n" for m, q, v in rows)
    out.write(f"{'num_q':<{width}}\tall\t{len(result.qids)}\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a user mistake)."""
    args = parse(build_parser(), argv)

    def work() -> None:
        standard_output()  # where the results go: closed, refused before the work
        refuse_stdin_twice({"QRELS": args.qrels, "RUN": args.run, "--utilities": args.utilities})
        field = utility_field(args.utility)
        utilities = args.utilities
        if args.judge_key is not None:
            from udcg.io.joins.utilities import read_utility_file

            if utilities is None:
                raise UDCGInputError("--judge-key reads the --utilities file; none given")
            utilities = read_utility_file(utilities, field, args.judge_key)
        result = evaluate_table(
            args.qrels,
            args.run,
            args.measures,
            utilities=utilities,
            utility_field=field,
            weights=_weights(args.weights, args.allow_unverified),
            allow_mismatch=args.allow_mismatch,
            mismatch_option="--allow-mismatch {field}",
            coverage=coverage_file(args.coverage),
        )
        write_result(result, args.per_query, args.format)

    return run_cli("udcg trec", work)


if __name__ == "__main__":
    sys.exit(main())
