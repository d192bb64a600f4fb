"""Q-CARE from the command line.

    udcg qcare label IN.jsonl -o OUT.jsonl --judge smollm2-135m [--answers-from MODEL]
    udcg qcare score LABELLED.jsonl [--answers-from MODEL] [-k 10] [--binary]
        [--gain {linear,exponential}] [--coverage {boolean,fractional}]
    udcg qcare agreement JUDGE.jsonl HUMAN.jsonl [--answers-from MODEL] [--split-by run]
        [--annotators]
    udcg qcare import RESULTS.json -o OUT.jsonl [--benchmark TESTBED.json] [--retriever BM25]
        [--table TABLE.csv]
    udcg qcare import ANNOTATIONS.csv... -o OUT.jsonl [--model NAME] [--table TABLE.csv]
    udcg qcare published SCORES.json... [--table TABLE.csv] [--comparison DIR]
        [--check LABELLED.jsonl] [--gain exponential] [-k 10]
    udcg qcare mtrag TASKS.jsonl -o OUT.jsonl [--run NAME] [--model NAME]
    udcg qcare rankings LABELLED.jsonl... [--types FILE | --type-field KEY] [--type A --type B]
        [-m MEASURE]... [-k 10] [--resamples 1000] [--seed 0] [-o agreement.json]

``label`` adds sub-queries, coverage labels and (with ``--answers-from``) the claims and
checks of ``outcomes[MODEL].answer``, through the cached judge (options and cache:
:mod:`udcg.cli.judge_args`), and prints label, fallback and judge-call counts. ``score``
prints the mean of each metric and why values are missing (``--out`` writes them per context).
``agreement`` prints Pearson and Spearman correlations between judge-based and human-based
metrics per split. ``import`` turns a results file of the Q-CARE release's pipeline into
labelled contexts (:func:`udcg.qcare.release.read_release_results`), or the release's human
annotation CSVs into contexts with human labels (:func:`udcg.qcare.human.read_human_labels`);
``--table`` also writes the release's aggregate table (:func:`udcg.qcare.release.release_table`).
``agreement --annotators`` adds the agreement between the human file's annotators
(:func:`udcg.qcare.agreement.annotator_agreement`). ``published`` reads the release's
per-query scores (:mod:`udcg.qcare.published`), writes their aggregates in the release's
layouts and, with ``--check``, prints how many of udcg's per-query values equal them.
``mtrag`` turns an MTRAG
task file into conversational contexts (:func:`udcg.qcare.conversation.read_mtrag_tasks`).
``rankings`` ranks the
retrievers (``run``; a context without one takes its file's name) by each metric on two query
types and prints the Spearman agreement of the two rankings with a bootstrap CI as a Markdown
table (``--out`` writes it as JSON; :mod:`udcg.qcare.rankings`). ``-`` as an input file
reads standard input; as OUT or ``--out`` it writes standard output, and the counts or means
go to stderr. ``--gain`` picks C-nDCG's gain and ``--coverage fractional`` reads the per-chunk
coverage from ``passages[].covers_prob`` (numbers in [0, 1]) instead of the booleans
``covers``. ``--answers-from MODEL`` names the answers to read (``outcomes[MODEL]``: a
generator's, which need not be the judge's), so it is not ``--judge-key``, the key of the
labelling judge.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TextIO

import numpy as np

from udcg.cli.common import (
    CommandParser,
    add_list_option,
    add_measures,
    add_out,
    info_stream,
    judge_inputs,
    output_path,
    parse,
    refuse_stdin_twice,
    refuse_stdout_twice,
    run_cli,
)
from udcg.cli.judge_args import add_judge_arguments, check_judge_arguments, open_cli_judge
from udcg.errors import UDCGInputError, UDCGWarning
from udcg.io.contexts.jsonl import read_contexts, write_contexts
from udcg.io.contexts.model import distinct_contexts
from udcg.io.contexts.sources import check_label_inputs, warn_given_outcome, warn_mixed_sources
from udcg.io.files import atomic_write, exclusive_writer, refuse_same_file, standard_output
from udcg.labels.provenance import refuse_derived_outputs, write_derived_manifest
from udcg.labels.stream import refuse_outputs
from udcg.qcare.agreement import agreement, annotator_agreement
from udcg.qcare.conversation import read_mtrag_tasks
from udcg.qcare.coverage import GAINS
from udcg.qcare.human import read_human_labels
from udcg.qcare.labels.checks import CHECK_MODES
from udcg.qcare.labels.label import (
    CHECKS,
    QCareReport,
    check_inputs,
    label_contexts,
)
from udcg.qcare.published import (
    PublishedMatch,
    compare_published,
    model_comparison,
    published_table,
    read_query_level_results,
)
from udcg.qcare.rankings import MEASURES as RANKING_MEASURES
from udcg.qcare.rankings import markdown_table, ranking_agreement, read_query_types
from udcg.qcare.release import (
    RELEASE_TOP_K,
    read_release_results,
    release_table,
    write_release_table,
)
from udcg.qcare.scores import COVERAGE_LABELS, QCareScores, qcare_scores
from udcg.validation import nonnegative_int


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``udcg qcare`` and its actions."""
    parser = CommandParser(
        prog="udcg qcare",
        description="Label contexts for Q-CARE with a judge, score them, measure judge-human "
        "agreement and the agreement of retriever rankings across query types, and read the "
        "Q-CARE release and MTRAG tasks.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    label = sub.add_parser(
        "label",
        help="add Q-CARE labels through the judge",
        description="Add sub-queries, coverage labels and (with --answers-from) the claims and "
        "checks of an answer to each context, through the cached judge.",
    )
    label.add_argument("input", help="contexts JSONL (gzip ok; - reads stdin)")
    add_out(
        label,
        "labelled contexts JSONL (.gz compresses; - is stdout)",
        required=True,
        old_positional=True,
    )
    label.add_argument(
        "--answers-from", metavar="MODEL", help="also label the answer outcomes[MODEL].answer"
    )
    label.add_argument(
        "--checks",
        choices=CHECK_MODES,
        default="auto",
        help="how Yes/No labels are read: from log-probs, from the text, or auto (log-probs "
        "when the judge gives them) (default: %(default)s)",
    )
    label.add_argument(
        "--retries",
        type=int,
        default=2,
        help="times a malformed decomposition or an unusable Yes/No reply is asked again "
        "(default: 2)",
    )
    label.add_argument(
        "--relabel",
        action="store_true",
        help="replace labels the input holds that this judge did not write (given by hand, "
        "or by another judge per the qcare_labels record); without it they are refused",
    )
    add_judge_arguments(label)
    score = sub.add_parser(
        "score",
        help="metrics from labels",
        description="Print the mean of each Q-CARE metric of labelled contexts and why values "
        "are missing.",
    )
    score.add_argument("input", help="labelled contexts JSONL (- reads stdin)")
    add_out(score, "write per-context metrics as JSONL (- is stdout)")
    agree = sub.add_parser(
        "agreement",
        help="judge vs human",
        description="Print Pearson and Spearman correlations between judge-based and "
        "human-based Q-CARE metrics, per split.",
    )
    agree.add_argument("judge_labels", help="judge-labelled contexts JSONL")
    agree.add_argument("human_labels", help="human-labelled contexts JSONL, same structure")
    agree.add_argument("--split-by", help="context field or extra key (e.g. run, split)")
    agree.add_argument("--no-fill", action="store_true", help="do not fill missing human labels")
    agree.add_argument(
        "--annotators",
        action="store_true",
        help="also print the agreement between the human file's annotators on coverage "
        "(Krippendorff's alpha; per pair, correlations of C-Prec and C-nDCG)",
    )
    release = sub.add_parser(
        "import",
        help="read a Q-CARE release results file",
        description="Turn a results file of the Q-CARE release's pipeline (evaluate.py or "
        "evaluate_retriever.py output), or its human annotation CSVs ([Query] and [Chunk] "
        "files), into labelled contexts for score and agreement.",
    )
    release.add_argument(
        "inputs",
        nargs="+",
        metavar="input",
        help="one results JSON (a list of per-query records), or annotation CSV files",
    )
    add_out(release, "labelled contexts JSONL (.gz compresses; - is stdout)", required=True)
    release.add_argument(
        "--benchmark",
        metavar="PATH",
        help="the benchmark JSON the run read, for the chunk texts (retrieved_chunk)",
    )
    release.add_argument(
        "--retriever",
        help="run name and retrieved_chunk key (default: the record's retriever, else BM25)",
    )
    release.add_argument(
        "-k",
        "--k",
        type=_positive,
        default=RELEASE_TOP_K,
        help="chunks judged per query (default: %(default)s)",
    )
    release.add_argument(
        "--model",
        help="outcome name of the answers (default: the records' target_model, or the model "
        "in the CSV file names)",
    )
    release.add_argument(
        "--table",
        type=output_path,
        metavar="PATH",
        help="also write the release's aggregate table (metric_table_all.csv's layout) of "
        "the generator metrics per model and dataset",
    )
    mtrag = sub.add_parser(
        "mtrag",
        help="read an MTRAG task file",
        description="Turn an MTRAG task file (JSON Lines, the conversation so far under input) "
        "into contexts whose query is a conversation, ready for label.",
    )
    mtrag.add_argument("input", help="MTRAG tasks JSONL (gzip ok)")
    add_out(mtrag, "contexts JSONL (.gz compresses; - is stdout)", required=True)
    mtrag.add_argument("--run", help="run name of the contexts (the retriever; default: none)")
    mtrag.add_argument(
        "--model",
        default="prediction",
        help="outcome name of the tasks' predictions (outcomes[MODEL].answer; default: "
        "%(default)s)",
    )
    rankings = sub.add_parser(
        "rankings",
        help="agreement of retriever rankings across query types",
        description="Rank the retrievers (runs) by each metric on two query types and print "
        "the Spearman agreement of the two rankings, with a bootstrap CI over queries.",
    )
    rankings.add_argument(
        "inputs",
        nargs="+",
        help="labelled contexts JSONL, one or more (a context without run takes its file's name)",
    )
    add_out(rankings, "write the agreement and the per-run means as JSON (- is stdout)")
    source = rankings.add_mutually_exclusive_group()
    source.add_argument(
        "--types",
        metavar="FILE",
        help="query types: QID<TAB>TYPE lines or a JSON object {qid: type}",
    )
    source.add_argument(
        "--type-field",
        default="query_type",
        metavar="KEY",
        help="the context key holding the query type (default: %(default)s)",
    )
    add_list_option(
        rankings,
        "--type",
        dest="pair",
        metavar="TYPE",
        help="the two query types to compare, e.g. --type close --type open (default: the "
        "two found)",
    )
    add_measures(rankings, RANKING_MEASURES, "metrics to rank by")
    rankings.add_argument(
        "--resamples", type=_positive, default=1000, help="bootstrap resamples (default: 1000)"
    )
    rankings.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="confidence level of the interval (default: %(default)s)",
    )
    rankings.add_argument(
        "--seed", type=int, default=0, help="seed of the bootstrap draws (default: 0)"
    )
    published = sub.add_parser(
        "published",
        help="read the Q-CARE release's per-query scores",
        description="Read the per-query scores the Q-CARE release publishes "
        "([<split>][<Model>]query_level_results.json), write their aggregate tables, and "
        "compare them with udcg's values of labelled contexts.",
    )
    published.add_argument(
        "inputs", nargs="+", metavar="input", help="query_level_results JSON files"
    )
    published.add_argument(
        "--table",
        type=output_path,
        metavar="PATH",
        help="write metric_table_all.csv's layout from the published values",
    )
    published.add_argument(
        "--comparison",
        metavar="DIR",
        help="write [<split>]model_comparison_results.json files into DIR",
    )
    published.add_argument(
        "--check",
        metavar="LABELLED",
        help="labelled contexts JSONL (e.g. udcg qcare import of the annotation CSVs): print, "
        "per model, split and metric, how many of udcg's values equal the published ones",
    )
    published.add_argument(
        "--tolerance",
        type=float,
        default=1e-9,
        help="largest difference counted as equal (default: %(default)s)",
    )
    for cmd in (score, agree, rankings, published):
        if cmd in (score, agree):
            cmd.add_argument(
                "--answers-from", metavar="MODEL", help="generator metrics of outcomes[MODEL]"
            )
        cmd.add_argument("-k", "--k", type=_positive, help="truncate retrieved lists to k")
        if cmd is not published:
            cmd.add_argument("--binary", action="store_true", help="binary coverage gains")
        cmd.add_argument(
            "--gain",
            choices=GAINS,
            default="linear",
            help="C-nDCG's gain g(r): linear r (the released Q-CARE code) or exponential "
            "2^(10 r) - 1 (the published Q-CARE numbers) (default: %(default)s)",
        )
        cmd.add_argument(
            "--coverage",
            choices=COVERAGE_LABELS,
            default="boolean",
            help="coverage labels: boolean passages[].covers, or fractional "
            "passages[].covers_prob in [0, 1] (judge probabilities, annotator means) "
            "(default: %(default)s)",
        )
    return parser


def format_report(report: QCareReport, judge: str) -> str:
    """Counts of a labelling run, as printed by ``label``."""
    per_context = report.judge_calls / max(report.contexts, 1)
    ref = report.reference_calls / max(report.contexts, 1)
    lines = [
        f"labelled {report.contexts} contexts ({report.questions} questions, "
        f"{report.answers} answers) with {judge}: {report.subqueries} sub-queries, "
        f"{report.claims} claims",
    ]
    for check in CHECKS:
        counts = report.labels[check]
        if report.prompts[check] or counts:
            lines.append(
                f"  {check:<16} {report.prompts[check]:>6} prompts: yes {counts['yes']}, "
                f"no {counts['no']}, unusable {counts['unusable']}"
            )
    lines.append(
        f"judge calls: {report.judge_calls} ({per_context:.1f} per context; the reference "
        f"pipeline makes {report.reference_calls}, {ref:.1f} per context)"
    )
    routes = ", ".join(f"{k} {v}" for k, v in sorted(report.checks.items()))
    lines.append(f"Yes/No labels: {routes or 'none'}")
    if report.text_reason:
        lines.append(f"log-probs unavailable, Yes/No parsed from text: {report.text_reason}")
    if report.replaced or report.dropped:
        dropped = ", ".join(f"outcomes.{m} {n}" for m, n in sorted(report.dropped.items()))
        lines.append(
            f"--relabel: replaced the labels of {report.replaced} contexts"
            + (f"; dropped another judge's labels of {dropped}" if dropped else "")
        )
    if report.stale:
        stale = ", ".join(f"outcomes.{m} {n}" for m, n in sorted(report.stale.items()))
        lines.append(
            f"dropped this judge's labels of {stale}: computed on another question, other "
            "passages or another answer (label them again with --answers-from)"
        )
    fallbacks = {k: v for k, v in report.fallbacks.items() if k != "generation prompts"}
    lines.append(
        "fallbacks and special cases: "
        + (", ".join(f"{k} {v}" for k, v in sorted(fallbacks.items())) or "none")
    )
    return "\n".join(lines)


def format_scores(scores: QCareScores) -> str:
    """Mean of each metric and the count and reasons of missing values."""
    lines = [f"{'metric':<16}{'mean':>8}{'n':>7}  missing"]
    for name, mean in scores.means().items():
        values = scores.values[name]
        n = int((~np.ma.getmaskarray(values)).sum())
        why = ", ".join(f"{r} {c}" for r, c in sorted(scores.missing[name].items())) or "-"
        shown = "n/a" if mean is None else f"{mean:.3f}"
        lines.append(f"{name:<16}{shown:>8}{n:>7}  {why}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a user mistake)."""
    args = parse(build_parser(), argv)

    def work() -> None:
        if args.command == "label":
            check_judge_arguments(args)
            nonnegative_int(args.retries, "retries")
            inputs = {"INPUT": args.input, **judge_inputs(args)}
            refuse_stdin_twice(inputs)
            refuse_outputs(args.out, inputs)
            with exclusive_writer(args.out, "qcare label output"):
                contexts = list(read_contexts(args.input))
                check_inputs(contexts, args.answers_from)  # before the judge loads
                judge = open_cli_judge(args)
                labelled, report = label_contexts(
                    contexts,
                    judge,
                    args.answers_from,
                    args.checks,
                    args.retries,
                    relabel=args.relabel,
                )
                write_contexts(args.out, labelled, check=False)
                made = {"format": "udcg-qcare-label/1", "judge": judge.name}
                made["judge_fingerprint"] = judge.fingerprint
                write_derived_manifest(args.out, args.input, made)
            out = info_stream(args.out)
            print(format_report(report, judge.name), file=out)
            print(f"cache hits {judge.cache.hits}, misses {judge.cache.misses}", file=out)
            if report.checks["bounds"]:
                warnings.warn(
                    f"{report.checks['bounds']} of {report.checks['logprobs']} Yes/No log-prob "
                    "labels were only bounded (Yes or No outside the server's top log-probs):"
                    " their hard label holds, their _prob value is written as null",
                    UDCGWarning,
                    stacklevel=1,
                )
        elif args.command == "import":
            _import(args)
        elif args.command == "mtrag":
            refuse_same_file(args.out, {"INPUT": args.input})
            tasks = read_mtrag_tasks(args.input, run=args.run, model=args.model)
            write_contexts(args.out, tasks)
            turns = sum(len(c.extra["conversation"]) for c in tasks)
            print(f"read {len(tasks)} tasks ({turns} turns in all)", file=info_stream(args.out))
        elif args.command == "rankings":
            _rankings(args)
        elif args.command == "published":
            _published(args)
        elif args.command == "score":
            if args.out:
                refuse_derived_outputs(args.out, {"INPUT": args.input})
            else:
                standard_output()  # the results go there: refused closed or read-only, before work
            contexts = distinct_contexts(read_contexts(args.input))
            check_label_inputs(contexts, [args.answers_from] if args.answers_from else [])
            warn_mixed_sources(contexts, args.input)
            if args.answers_from is not None:
                warn_given_outcome(contexts, args.answers_from, args.input)
            scores = qcare_scores(
                contexts,
                args.answers_from,
                args.k,
                args.binary,
                gain=args.gain,
                coverage=args.coverage,
            )
            print(format_scores(scores), file=info_stream(args.out))
            if args.out:
                _write_scores(args.out, contexts, scores, args)
        else:
            refuse_stdin_twice(
                {"judge_labels": args.judge_labels, "human_labels": args.human_labels}
            )
            out = standard_output()  # the results go there: refused closed or read-only, first
            judged = list(read_contexts(args.judge_labels))
            human = list(read_contexts(args.human_labels))  # read once: HUMAN may be a pipe
            for labelled in (judged, human):
                check_label_inputs(labelled, [args.answers_from] if args.answers_from else [])
            warn_mixed_sources(judged, args.judge_labels)
            rows, filled = agreement(
                judged,
                human,
                args.answers_from,
                args.split_by,
                args.k,
                args.binary,
                fill=not args.no_fill,
                gain=args.gain,
                coverage=args.coverage,
            )
            header = f"{'split':<14}{'metric':<16}{'n':>6}{'pearson':>10}{'spearman':>10}"
            print(header, file=out)
            for row in rows:
                print(
                    f"{row.split:<14}{row.metric:<16}{row.n:>6}"
                    f"{_cell(row.pearson):>10}{_cell(row.spearman):>10}",
                    file=out,
                )
            if filled:
                made = ", ".join(f"{k} {v}" for k, v in filled.items())
                print(f"filled from the judge: {made}", file=out)
            if args.annotators:
                _annotators(human, args, out)

    return run_cli("udcg qcare", work)


def _import(args: argparse.Namespace) -> None:
    """``udcg qcare import``: a pipeline results file or human annotation CSVs."""
    inputs = {f"INPUT {i + 1}": p for i, p in enumerate(args.inputs)}
    refuse_stdin_twice({**inputs, "--benchmark": args.benchmark})
    refuse_stdout_twice({"--out": args.out, "--table": args.table})
    refuse_same_file(args.out, {**inputs, "--benchmark": args.benchmark, "--table": args.table})
    if args.table:
        refuse_same_file(args.table, {**inputs, "--out": args.out, "--benchmark": args.benchmark})
    annotations = [p.lower().removesuffix(".gz").endswith(".csv") for p in args.inputs]
    out = info_stream(args.out, args.table)
    if all(annotations):
        if args.benchmark or args.retriever:
            raise UDCGInputError("--benchmark and --retriever read results files, not CSVs")
        contexts, report = read_human_labels(args.inputs, model=args.model)
        write_contexts(args.out, contexts)
        annotators = ", ".join(f"{n} {c}" for n, c in report.annotators.items()) or "none"
        print(
            f"imported {len(contexts)} contexts from {report.files} annotation files "
            f"({report.rows} rows, {report.annotations} annotations by {annotators}); "
            f"attention items dropped: {report.attention_items} (labels on them: "
            f"{report.attention_labels}); fact references matching no claim (ignored): "
            f"{report.unresolved_facts}",
            file=out,
        )
    elif len(args.inputs) == 1:
        contexts = read_release_results(
            args.inputs[0], args.benchmark, retriever=args.retriever, k=args.k, model=args.model
        )
        write_contexts(args.out, contexts)
        unresolved = sum(
            o.get("unresolved_facts", 0) for c in contexts for o in c.outcomes.values()
        )
        print(
            f"imported {len(contexts)} contexts; fact references matching no claim "
            f"(ignored): {unresolved}",
            file=out,
        )
    else:
        raise UDCGInputError("give one results JSON file, or annotation CSV files only")
    if args.table:
        write_release_table(args.table, release_table(contexts))


def _published(args: argparse.Namespace) -> None:
    """``udcg qcare published``: read, aggregate and compare the release's per-query scores."""
    inputs = {f"INPUT {i + 1}": p for i, p in enumerate(args.inputs)}
    refuse_stdin_twice({**inputs, "--check": args.check})
    if args.table:
        refuse_same_file(args.table, {**inputs, "--check": args.check})
    out = info_stream(args.table)  # the table may be standard output
    records = [r for path in args.inputs for r in read_query_level_results(path)]
    pairs = dict.fromkeys((r.model, r.split) for r in records)
    print(
        f"read {len(records)} published queries of {len(pairs)} model-split pairs from "
        f"{len(args.inputs)} files",
        file=out,
    )
    if args.table:
        write_release_table(args.table, published_table(records))
    if args.comparison:
        folder = Path(args.comparison)
        folder.mkdir(parents=True, exist_ok=True)
        for split, models in model_comparison(records).items():
            with atomic_write(folder / f"[{split}]model_comparison_results.json") as handle:
                json.dump(models, handle, indent=2)
                handle.write("\n")
    if args.check:
        matches = compare_published(
            list(read_contexts(args.check)),
            records,
            k=args.k or RELEASE_TOP_K,
            gain=args.gain,
            coverage=args.coverage,
            tolerance=args.tolerance,
        )
        print(format_matches(matches), file=out)


def format_matches(matches: Sequence[PublishedMatch]) -> str:
    """One line per model, split and metric: equal / compared, largest difference, and the
    first differing queries."""
    lines = [f"{'model':<16}{'split':<13}{'metric':<16}{'equal':>9}{'max diff':>10}  differing"]
    for m in matches:
        shown = f"{m.equal}/{m.compared}"
        rest = ", ".join(m.differing) + (" ..." if m.compared - m.equal > len(m.differing) else "")
        if m.missing:
            rest += f" (not defined by udcg: {m.missing})"
        if m.absent:
            rest += f" (no labelled context: {m.absent})"
        lines.append(
            f"{m.model:<16}{m.split:<13}{m.metric:<16}{shown:>9}{m.max_diff:>10.2g}  {rest or '-'}"
        )
    return "\n".join(lines)


def _rankings(args: argparse.Namespace) -> None:
    """``udcg qcare rankings``: read every input, name runs by file, print and write."""
    inputs = {**{f"INPUT {i + 1}": p for i, p in enumerate(args.inputs)}, "--types": args.types}
    refuse_stdin_twice(inputs)
    if args.out:
        refuse_same_file(args.out, inputs)
    else:
        standard_output()  # the results go there: refused closed or read-only, before work
    contexts = []
    for path in args.inputs:
        name = _file_run(path)
        read = distinct_contexts(read_contexts(path))
        contexts += [c if c.run else replace(c, run=name) for c in read]
    check_label_inputs(contexts)
    warn_mixed_sources(contexts, " ".join(map(str, args.inputs)))  # runs ranked across judges
    types = read_query_types(args.types) if args.types else args.type_field
    rows, dropped = ranking_agreement(
        contexts,
        types,
        pair=args.pair or None,
        measures=args.measures,
        k=args.k,
        gain=args.gain,
        coverage=args.coverage,
        binary=args.binary,
        n_resamples=args.resamples,
        confidence=args.confidence,
        seed=args.seed,
    )
    out = info_stream(args.out)
    runs = sorted(rows[0].means[rows[0].types[0]]) if rows else []
    print(f"{len(runs)} runs: {', '.join(runs)}", file=out)
    if dropped:
        print(
            "queries dropped (not in every run): "
            + ", ".join(f"{t} {n}" for t, n in dropped.items()),
            file=out,
        )
    print(markdown_table(rows, args.confidence), file=out)
    if args.out:
        report = {
            "runs": runs,
            "dropped": dropped,
            "resamples": args.resamples,
            "confidence": args.confidence,
            "seed": args.seed,
            "k": args.k,
            "gain": args.gain,
            "coverage": args.coverage,
            "binary": args.binary,
            "agreement": [row.to_json() for row in rows],
        }
        with atomic_write(args.out) as handle:
            handle.write(json.dumps(report, indent=2) + "\n")


def _annotators(contexts: list, args: argparse.Namespace, out: TextIO) -> None:
    """The ``--annotators`` part of ``agreement``, on ``out``: alpha, then per pair the
    correlations."""
    result = annotator_agreement(contexts, args.k, args.binary, gain=args.gain)
    if len(result.annotators) < 2:
        print(f"annotators: {len(result.annotators)} (no pair to compare)", file=out)
        return
    print(
        f"annotators: {', '.join(result.annotators)}; Krippendorff's alpha (coverage, "
        f"{result.units} pairable labels): {_cell(result.alpha)}",
        file=out,
    )
    print(f"{'annotators':<28}{'metric':<16}{'n':>6}{'pearson':>10}{'spearman':>10}", file=out)
    for row in result.rows:
        print(
            f"{row.split:<28}{row.metric:<16}{row.n:>6}"
            f"{_cell(row.pearson):>10}{_cell(row.spearman):>10}",
            file=out,
        )


def _file_run(path: str) -> str:
    """The run name of a contexts file: its name without ``.gz`` and ``.jsonl``."""
    name = Path(path).name
    for suffix in (".gz", ".jsonl", ".json"):
        name = name.removesuffix(suffix)
    return name or path


def _cell(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:+.3f}"


def _write_scores(path: str, contexts: list, scores: QCareScores, args: argparse.Namespace) -> None:
    """One line per context: its metrics and the options that produced them."""
    options = {
        "answers_from": args.answers_from,
        "k": args.k,
        "binary": args.binary,
        "gain": args.gain,
        "coverage": args.coverage,
    }
    with atomic_write(path) as handle:
        for i, ctx in enumerate(contexts):
            row = {"qid": ctx.qid, "run": ctx.run, **options}
            for name, values in scores.values.items():
                row[name] = None if np.ma.getmaskarray(values)[i] else float(values.data[i])
            handle.write(json.dumps(row) + "\n")
    # what made the scores: the labelled contexts (their digest, who labelled them) and options
    write_derived_manifest(path, args.input, {"format": "udcg-qcare-score/1", **options})


if __name__ == "__main__":
    sys.exit(main())
