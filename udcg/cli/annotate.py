"""``udcg annotate IN.jsonl -o OUT.jsonl --judge smollm2-135m --steps abstain,relevance,outcomes
[--relevance string|llm] [--relabel-relevance] [--grader span|llm] [--chunk N] [--shard I/N]``:
judge labels for a contexts file (see :mod:`udcg.labels.annotate` for what each step writes),
stored under the judge's key (``--judge-key``, else the spec without connection details). Judge
options and the cache: :mod:`udcg.cli.judge_args`.

The relevance step labels only the passages without a ``relevant`` label (those given, e.g. by
``udcg contexts --qrels``, are kept); ``--relabel-relevance`` recomputes them all. The command
says how many it kept and computed.

The input is read once: a pipe, FIFO or process substitution is first copied to a temporary
file. It is checked whole (no judge call before a mistake is found), then read as a stream and
annotated ``--chunk`` contexts at a time, each finished chunk appended to ``OUT.partial``,
renamed to OUT at the end, with ``OUT.manifest.json`` beside it recording what produced it
(:mod:`udcg.labels.stream`, :mod:`udcg.labels.provenance`): rerun the same command after a
crash or a kill and it resumes after the last chunk written, the judge cache covering the calls
in between; a partial file of another judge, other steps or options, or an edited input is
refused. A second run on the same OUT is refused while the first works. ``--shard I/N``
annotates only shard I of N (:mod:`udcg.labels.shards`); ``udcg merge-shards`` joins the N
outputs. ``-`` as IN reads standard input, as OUT writes standard output, chunk by chunk,
without resuming and without a manifest (the counts then go to stderr).

The summary counts the whole output: after a resume, ``annotated N contexts (R resumed from
OUT.partial, M now)``, the judge calls this run made, and the relevance labels, grades and
upper bounds of all N (those of the R resumed read back from OUT; their eRAG grades are not
kept, so the eRAG line gives this run's grades and the resumed passages' labels). Over the
whole output too,
each utility source annotated is checked (:mod:`udcg.labels.signal_check`): one warning line
with the numbers and the remedy when it carries almost no information."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shutil
import stat
import sys
import tempfile
import warnings
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path

from udcg.cli.common import (
    CommandParser,
    add_list_option,
    add_out,
    info_stream,
    judge_inputs,
    messages,
    parse,
    refuse_stdin_twice,
    run_cli,
)
from udcg.cli.judge_args import add_judge_arguments, check_judge_arguments, open_cli_judge
from udcg.errors import UDCGInputError, UDCGWarning
from udcg.io.contexts.jsonl import Context, read_contexts
from udcg.io.files import STDIO, PathType, exclusive_writer
from udcg.io.joins.utility_sources import SOURCES
from udcg.io.manifests import made_by, recorded_judges
from udcg.judge.spec import judge_key
from udcg.labels.annotate import (
    BOUNDS,
    DEFAULT_STEPS,
    GRADERS,
    GRADES,
    RELEVANCE_MODES,
    STEPS,
    AnnotationReport,
    annotate,
    check_inputs,
    check_provided,
    operations,
    refuse_stale_llm_labels,
    relabels,
)
from udcg.labels.erag import ERAG, ERAG_ANSWER
from udcg.labels.provenance import annotation_record, with_batching
from udcg.labels.shards import in_shard, parse_shard
from udcg.labels.signal_check import ContextSignal
from udcg.labels.stream import (
    DEFAULT_CHUNK,
    annotate_stream,
    partial_path,
    refuse_outputs,
)

#: Value field -> how the warning names it.
_BOUND_NAMES = {
    "abstain_prob": ("abstention", "pairs"),
    "answer_prob": ("answer-likelihood", "answer_pairs"),
    "relevance_prob": ("relevance", "relevance_checks"),
}


def add_step_arguments(parser: argparse.ArgumentParser, steps: Sequence[str]) -> None:
    """``--steps`` (one of ``steps``), ``--relevance``, ``--grader`` and ``--max-new-tokens``:
    the options that decide which judge calls an annotation makes."""
    add_list_option(
        parser,
        "--steps",
        default=list(DEFAULT_STEPS),
        items=steps,
        help=f"the annotation steps (repeatable, or comma-separated; default: "
        f"{','.join(DEFAULT_STEPS)})",
    )
    parser.add_argument(
        "--relevance",
        choices=RELEVANCE_MODES,
        default="string",
        help="relevance step: the reference answer in the passage (string) or the judge's "
        "yes/no (llm) (default: %(default)s)",
    )
    parser.add_argument(
        "--grader",
        choices=GRADERS,
        default="span",
        help="outcomes step: grade the answer by matching the reference answers (span) or "
        "by the judge (llm) (default: %(default)s)",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=32,
        help="most tokens of a generated answer (default: %(default)s)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``udcg annotate``."""
    parser = CommandParser(
        prog="udcg annotate",
        description="Add judge labels to a contexts file (utilities, relevance, answers and "
        "grades), chunk by chunk, resumable.",
    )
    parser.add_argument("input", help="contexts JSONL (gzip ok; - reads stdin)")
    add_out(
        parser,
        "annotated contexts JSONL (.gz compresses; - is stdout)",
        required=True,
        old_positional=True,
    )
    add_step_arguments(parser, STEPS)
    parser.add_argument(
        "--relabel-relevance",
        action="store_true",
        help="recompute the relevance of every passage (default: keep the labels given)",
    )
    parser.add_argument(
        "--mode",
        choices=["first_token", "sequence"],
        default="first_token",
        help="abstention step: P(abstain) of the marker's first token, or of its whole "
        "sequence (default: %(default)s)",
    )
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
        help="annotate only shard I of N (by query id); name the output part-I-of-N.jsonl and join "
        "the N outputs with 'udcg merge-shards'",
    )
    add_judge_arguments(parser)
    return parser


def bounds_warning(report: AnnotationReport, resumed: AnnotationReport | None = None) -> str | None:
    """One line counting the values that are only upper bounds (those of ``report``, judge
    values, and of ``resumed``, passages of the contexts resumed), or None when there are
    none."""
    parts = [
        f"{report.bounds[field]} of {getattr(report, total)} {what} values"
        for field, (what, total) in _BOUND_NAMES.items()
        if report.bounds[field]
    ]
    if resumed is not None:
        parts += [
            f"{resumed.bounds[field]} {what} values of passages in the {resumed.contexts} "
            "contexts resumed"
            for field, (what, _) in _BOUND_NAMES.items()
            if resumed.bounds[field]
        ]
    if not parts:
        return None
    return (
        f"{'; '.join(parts)} are bounds (the server's top log-probs did not hold the token;"
        " listed per passage under 'bounds': abstention values from above, relevance values"
        " from the side of 0.5 their label is on)"
    )


@contextlib.contextmanager
def spool_input(path: PathType) -> Iterator[PathType]:
    """``path`` itself when it can be read twice (a regular file, or ``-``, which the readers
    hold in memory); otherwise (a pipe, FIFO, process substitution) a temporary copy of its
    bytes (in ``TMPDIR``: memory holds one chunk, whatever the input size), read once, removed
    afterwards. Errors located in the copy name ``path``."""
    if os.fspath(path) == STDIO or not os.path.exists(path):
        yield path
        return
    mode = os.stat(path).st_mode
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):  # a directory: the reader says so
        yield path
        return
    fd, copy = tempfile.mkstemp(prefix="udcg-annotate-", suffix=".input")
    try:
        with open(path, "rb") as source, os.fdopen(fd, "wb") as target:
            shutil.copyfileobj(source, target, 1 << 20)
        yield copy
    except UDCGInputError as exc:
        if exc.path != copy:
            raise
        raise UDCGInputError(exc.reason, path=path, line=exc.line, field=exc.field) from None
    finally:
        os.unlink(copy)


def _relevance_line(report: AnnotationReport) -> str:
    """What the relevance step kept and computed."""
    return (
        f"relevance: kept {report.relevance_kept} given labels, computed "
        f"{report.relevance_computed}"
    )


def _erag_line(whole: AnnotationReport) -> str:
    """The eRAG grades of the passages labelled now, and the labels of those resumed (their
    grades are not kept in the output, only whether they were CORRECT)."""
    now = ", ".join(f"{g} {n}" for g, n in sorted(whole.erag_grades.items())) or "none"
    if not whole.erag_resumed:
        return f"eRAG grades: {now}"
    resumed = ", ".join(f"{g} {n}" for g, n in sorted(whole.erag_resumed.items()))
    return f"eRAG grades: {now} (passages labelled now); resumed passages: {resumed}"


def resumed_report(
    written: Iterable[Context],
    inputs: Iterable[Context],
    steps: Sequence[str],
    name: str,
    relabel_relevance: bool,
) -> AnnotationReport:
    """What the contexts ``written`` by an earlier run (annotated from ``inputs``, in order)
    hold: contexts, the relevance labels kept and computed, answers and grades, eRAG labels
    (correct or not) and unparsable eRAG grades, and per value field the passages whose value
    judge ``name`` gave only as an upper bound. Judge calls are
    not counted (this run made none for them)."""
    report = AnnotationReport()
    for done, given in zip(written, inputs, strict=True):
        report.contexts += 1
        if "relevance" in steps:
            computed = sum(relabels(p, relabel_relevance) for p in given.passages)
            report.relevance_computed += computed
            report.relevance_kept += len(given.passages) - computed
        outcome = done.outcomes.get(name)
        if "outcomes" in steps and outcome is not None:
            report.answers += 1
            grade = outcome.get("grade")
            if grade in GRADES:
                report.grades[grade] += 1
            else:
                report.failures["unparsable grade"] += 1
        for p in done.passages:
            report.bounds.update(p.extra.get(BOUNDS, {}).get(name, []))
            if "erag" in steps:
                label = p.extra.get(ERAG, {}).get(name)
                if label is not None:
                    report.erag_resumed["correct" if label == 1 else "not correct"] += 1
                elif name in p.extra.get(ERAG_ANSWER, {}):
                    report.failures["unparsable eRAG grade"] += 1
    return report


def _summary(report: AnnotationReport, resumed: AnnotationReport, partial: Path, name: str) -> str:
    """The first line of the summary: contexts of the whole output (resumed and now) and the
    judge calls this run made."""
    calls = (
        f"{report.pairs} passage pairs, {report.answer_pairs} answer-likelihood pairs, "
        f"{report.relevance_checks} relevance checks, {report.answers} answers"
        + (f", {report.erag_answers} eRAG answers" if report.erag_answers else "")
    )
    if not resumed.contexts:
        return f"annotated {report.contexts} contexts with {name}: {calls}"
    return (
        f"annotated {resumed.contexts + report.contexts} contexts ({resumed.contexts} resumed "
        f"from {partial}, {report.contexts} now) with {name}; judge calls now: {calls}"
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a user mistake)."""
    args = parse(build_parser(), argv)

    def work() -> None:
        check_judge_arguments(args)
        shard = parse_shard(args.shard) if args.shard else None
        inputs = {"IN": args.input, **judge_inputs(args)}
        refuse_stdin_twice(inputs)
        refuse_outputs(args.out, inputs)
        # the lock comes first: a second run on OUT is refused before it loads a judge
        with exclusive_writer(args.out, "annotation output"), spool_input(args.input) as source:
            annotate_file(source, shard)

    def annotate_file(source: PathType, shard: tuple[int, int] | None) -> None:
        def contexts() -> Iterator[Context]:
            stream = read_contexts(source)
            return stream if shard is None else in_shard(stream, shard)

        total = check_inputs(
            contexts(),
            args.steps,
            args.relevance,
            args.relabel_relevance,
            judge_key(args.judge, args.judge_key),
        )
        judge = open_cli_judge(args)
        check_provided(judge, args.steps, args.relevance)
        judges = recorded_judges(args.input)  # who made the values IN holds
        if args.relevance == "llm" and "relevance" in args.steps and not args.relabel_relevance:
            recorded = judges.get(judge.name, {}).get("relevance")
            refuse_stale_llm_labels(contexts(), judge.name, judge.fingerprint, recorded)
        step = functools.partial(
            annotate,
            judge=judge,
            steps=args.steps,
            relevance=args.relevance,
            grader=args.grader,
            mode=args.mode,
            max_new_tokens=args.max_new_tokens,
            relabel_relevance=args.relabel_relevance,
        )
        record = annotation_record(
            judge.name,
            judge.fingerprint,
            args.steps,
            args.relevance,
            args.relabel_relevance,
            args.grader,
            args.mode,
            args.max_new_tokens,
            shard,
            {op: judge.key_settings(op) for op in operations(args.steps, args.relevance)},
        )
        record = with_batching(record, judge, args.chunk)
        relabel = args.relabel_relevance
        judges = made_by(
            judges, judge.name, judge.fingerprint, args.steps, args.relevance, relabel, args.mode
        )
        signals = [
            ContextSignal(source.name, judge.name)
            for source in SOURCES.values()
            if source.step in args.steps
        ]

        def work(part: list[Context]) -> tuple[list[Context], AnnotationReport]:
            annotated, counts = step(part)
            for signal in signals:
                signal.add(annotated)
            return annotated, counts

        report, resumed = annotate_stream(
            contexts(), args.out, work, args.chunk, total, record=record, judges=judges
        )
        earlier = AnnotationReport()
        if resumed:  # the whole output: what the earlier run wrote, read back, and this run

            def written() -> Iterator[Context]:
                for ctx in islice(read_contexts(args.out), resumed):
                    for signal in signals:
                        signal.add([ctx])
                    yield ctx

            earlier = resumed_report(
                written(),
                islice(contexts(), resumed),
                args.steps,
                judge.name,
                args.relabel_relevance,
            )
        whole = AnnotationReport()
        whole.add(earlier)
        whole.add(report)
        cache = judge.cache
        out = info_stream(args.out)
        if resumed:
            print(f"resumed after {resumed} contexts already written", file=out)
        print(
            f"{_summary(report, earlier, partial_path(args.out), judge.name)}; "
            f"cache hits {cache.hits}, misses {cache.misses}",
            file=out,
        )
        if "relevance" in args.steps:
            print(_relevance_line(whole), file=out)
        if whole.grades:
            grades = ", ".join(f"{g} {n}" for g, n in sorted(whole.grades.items()))
            print(f"grades: {grades}", file=out)
        if whole.erag_grades or whole.erag_resumed:
            print(_erag_line(whole), file=out)
        for what, n in whole.failures.items():
            print(f"failures: {n} {what}", file=messages())
        warning = bounds_warning(report, earlier)
        if warning:
            warnings.warn(warning, UDCGWarning, stacklevel=1)
        cut = getattr(judge, "n_truncated", 0)
        if isinstance(cut, int) and cut:
            limit = judge.max_passage_tokens
            warnings.warn(
                f"{cut} passages judged now were cut to their first {limit} tokens for"
                " abstention and answer likelihood (--judge-option max_passage_tokens=N sets"
                " it, null: no cut)",
                UDCGWarning,
                stacklevel=1,
            )
        for signal in signals:
            check = signal.result()
            if check is not None and check.fires:
                warnings.warn(check.warning("--steps answer_likelihood"), UDCGWarning, stacklevel=1)

    return run_cli("udcg annotate", work)


if __name__ == "__main__":
    sys.exit(main())
