"""``udcg report RUN RUN... (--topics T --collection C | --dataset ID) [--qrels Q] [--answers A]
--judge J -o DIR [-m MEASURE]... [--baseline NAME] [--weights W]``: several systems' TREC runs
to one verdict, in one command.

Each run (system name: its file name without suffix) is joined with the topics and collection
into top-k contexts (``DIR/contexts/NAME.jsonl``, as ``udcg contexts``; ``--dataset ID`` takes
topics, passages and qrels from ir_datasets, as there), annotated with the
judge (``DIR/labels/NAME.jsonl``, as ``udcg annotate``: chunked, resumable, through the shared
judge cache; relevance labels the qrels give are kept), evaluated on the measures (trec_eval
semantics; UDCG with the judge's utilities) and compared with the baseline (the first run, or
``--baseline``): per system and measure the mean with its bootstrap CI, the difference to the
baseline with its paired-bootstrap CI, the paired test's p-value and Holm-corrected
significance. With ``--weights``, each system's forecast end-to-end accuracy (mean UDCG-theta,
and the recalibrated one when the weights carry a calibration) with its CI, over the same
queries as the measures. The weights are checked before any judge call: their k against
``-k`` (never overridable: the forecast needs contexts of exactly that many passages, so a run
ranking fewer documents, or none, for a compared query is refused too), judge, utility source,
prompt and the abstention mode the report labels in (``first_token``), as ``udcg score``
checks them (:func:`udcg.pipeline.context_scores.checked_theta`). So are the reference answers
every query needs (its relevance from the answers, or ``--utility answer_likelihood``), before
any file is written (:func:`udcg.pipeline.journey.build_contexts`).

Writes ``DIR/report.md``, ``DIR/report.json`` (every number, per-query values included, the
judge's call and cache-hit counts, and what produced it: each input's path and SHA-256, the
judge's spec and fingerprint, the weights' SHA-256) and ``DIR/report.html`` (one
self-contained file, plots inline); prints the Markdown table. A rerun asks the judge nothing:
the cache answers every call.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import replace
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from udcg.cli.common import (
    CommandParser,
    OnceAction,
    add_allow_mismatch,
    add_measures,
    add_out,
    add_utility,
    info_stream,
    judge_inputs,
    messages,
    parse,
    refuse_stdin_twice,
    run_cli,
    weights_inputs,
)
from udcg.cli.contexts import add_dataset, dataset_sources, require_files_without_dataset
from udcg.cli.judge_args import add_judge_arguments, check_judge_arguments, open_cli_judge
from udcg.errors import UDCGInputError, UDCGWarning
from udcg.io.contexts.jsonl import read_contexts
from udcg.io.files import atomic_write, exclusive_writer, read_once, temporary_for
from udcg.io.joins.utility_sources import DEFAULT_SOURCE, get_source
from udcg.io.weights.files import MISMATCH_FIELDS
from udcg.judge.spec import judge_key
from udcg.labels.signal_check import check_contexts
from udcg.labels.stream import DEFAULT_CHUNK, output_files, refuse_outputs
from udcg.pipeline import journey
from udcg.pipeline.context_scores import checked_theta
from udcg.pipeline.journey_report import to_html, to_markdown
from udcg.trec.measures import COVERAGE_MEASURES, UTILITY_MEASURES, parse_measures
from udcg.trec.significance import TESTS

if TYPE_CHECKING:
    from udcg.judge.cached import CachedJudge
    from udcg.theta import UDCGTheta


#: The weights' fields ``--allow-mismatch`` may override: not k (parsed, to be refused in one
#: line): the forecast needs contexts of exactly the weights' k passages.
_MISMATCH = [field for field in MISMATCH_FIELDS if field != "k"]
#: What a report writes in its folder, beside ``contexts/`` and ``labels/``.
REPORT_FILES = ("report.md", "report.json", "report.html")


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``udcg report``."""
    parser = CommandParser(
        prog="udcg report",
        description="Compare several systems' TREC runs in one command: contexts, judge labels, "
        "measures and significance, written as report.md, report.json and report.html.",
    )
    parser.add_argument("runs", nargs="+", help="TREC run files, one per system (gzip ok)")
    parser.add_argument(
        "--topics", help="queries: qid<TAB>text, or JSONL (required without --dataset)"
    )
    parser.add_argument(
        "--collection", help="passages: doc_id<TAB>text, or JSONL (required without --dataset)"
    )
    add_dataset(parser)
    parser.add_argument(
        "--qrels",
        help="qrels (qid iteration doc_id grade; default with --dataset: its qrels); without: "
        "the judge labels relevance",
    )
    parser.add_argument(
        "--answers", help="reference answers: qid<TAB>answer..., or JSONL {qid, answers}"
    )
    add_out(parser, "folder the report and its files go to", required=True, folder=True)
    add_measures(parser, journey.DEFAULT_MEASURES, "measures, as udcg trec -m takes them")
    parser.add_argument(
        "-k",
        "--k",
        type=int,
        help="passages per context the judge labels (default: the largest UDCG cutoff, else 5)",
    )
    parser.add_argument("--baseline", help="system the others are compared with (default: first)")
    add_utility(
        parser,
        "utility source: abstention (u = 1 - abstain_prob) or answer_likelihood "
        "(default: %(default)s)",
        default=DEFAULT_SOURCE,
    )
    parser.add_argument("--test", choices=TESTS, default="t", help="paired test (default: t)")
    parser.add_argument(
        "--alpha", type=float, default=0.05, help="significance level (default: %(default)s)"
    )
    parser.add_argument(
        "--n-resamples", type=int, default=10000, help="bootstrap resamples (default: %(default)s)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the resamples (default: %(default)s)"
    )
    parser.add_argument(
        "--weights",
        action=OnceAction,
        help="UDCG-theta weights (folder or .safetensors): forecast accuracy",
    )
    add_allow_mismatch(
        parser,
        list(MISMATCH_FIELDS),
        f"use weights fitted with another FIELD on purpose (repeatable; {', '.join(_MISMATCH)}; "
        "never k: the weights' k must be -k)",
    )
    parser.add_argument(
        "--chunk",
        type=int,
        default=DEFAULT_CHUNK,
        metavar="N",
        help="contexts annotated and written at a time (default: %(default)s)",
    )
    add_judge_arguments(parser)
    return parser


def _k(args: argparse.Namespace) -> int:
    if args.k is not None:
        return args.k
    cutoffs = [
        m.cutoff
        for m in parse_measures(args.measures)
        if m.name in UTILITY_MEASURES and m.cutoff is not None
    ]
    return max(cutoffs, default=5)


def _once(source: Any) -> Any:
    """A file path as :func:`udcg.io.files.read_once` gives it (a pipe read whole, once); a
    dataset's topics or collection as they are."""
    return read_once(source) if isinstance(source, str | PathLike) else source


def _check_early(
    args: argparse.Namespace, runs: dict[str, str], baseline: str, k: int
) -> UDCGTheta | None:
    """What can be checked before any input is read or the judge asked: ``--allow-mismatch k``
    (never possible), the test's options, the ``--weights`` k (:func:`_weights_of_k`: returns
    the model) and measures the report can compute (UDCG cutoffs within the k passages
    labelled)."""
    from udcg.trec.comparison import check_options

    if "k" in args.allow_mismatch:
        raise UDCGInputError(
            "k cannot be overridden: the forecast takes contexts of exactly the weights' k "
            "passages; give -k the weights' k instead",
            field="--allow-mismatch",
        )
    check_options(runs, args.test, args.alpha, None, args.n_resamples, args.seed, baseline, 0.95)
    model = _weights_of_k(args, k) if args.weights else None
    for m in parse_measures(args.measures):
        if m.name in COVERAGE_MEASURES or m.name == "UDCGtheta":
            raise UDCGInputError(
                f"{m}: udcg report computes UDCG from the judge's utilities; coverage and "
                "UDCG-theta measures take their labels and weights from udcg compare "
                "(--coverage, --weights); --weights here gives the forecast",
                field="measures",
            )
        if m.name in UTILITY_MEASURES and m.cutoff is not None and m.cutoff > k:
            deeper = "" if args.weights else "raise -k, or "  # -k is the weights' k
            raise UDCGInputError(
                f"{m} reads the top {m.cutoff}, and -k {k} labels the top {k}: {deeper}give "
                f"measures within the top {k} (-m {_within(args.measures, k)})",
                field="measures",
            )
    return model


def _within(measures: Sequence[str], k: int) -> str:
    """``-m`` of ``measures`` with each judged measure's cutoff at most ``k``.

    Examples:
        >>> _within(["UDCG@5", "nDCG@10", "UDCG(gamma=0.5)@2"], 3)
        'UDCG@3,nDCG@10,UDCG(gamma=0.5)@2'
    """
    return ",".join(
        str(replace(m, cutoff=k) if m.name in UTILITY_MEASURES and (m.cutoff or 0) > k else m)
        for m in parse_measures(measures)
    )


def _check_judged(runs: dict[str, Any], qrels: Any) -> None:
    """With relevance from the qrels only, every query of the runs must be judged."""
    from udcg.io.formats.trec import read_trec_qrels, read_trec_run

    given = qrels if hasattr(qrels, "qids") else read_trec_qrels(qrels)
    judged = set(given.qids.to_pylist())
    for name, run in runs.items():
        missing = sorted(set(read_trec_run(run).qids.to_pylist()) - judged)
        if missing:
            raise UDCGInputError(
                f"run {name!r} ranks {len(missing)} quer{'y' if len(missing) == 1 else 'ies'} "
                f"the qrels do not judge (first {missing[0]!r}): give --answers for their "
                "relevance, or qrels of these topics",
                field="qrels",
            )


def _weights_of_k(args: argparse.Namespace, k: int) -> UDCGTheta:
    """The ``--weights`` model; its k must be ``-k`` (the forecast takes contexts of exactly
    its k)."""
    from udcg.theta import UDCGTheta

    model = UDCGTheta.from_pretrained(args.weights)
    fitted = len(model.alpha_)
    if fitted != k:
        raise UDCGInputError(
            f"the UDCG-theta weights forecast contexts of exactly {fitted} passages, and -k {k} "
            f"labels the top {k}: give -k {fitted}{_deeper(args.measures, fitted)}, or weights "
            f"fitted for k {k}",
            path=args.weights,
            field="k",
        )
    return model


def _checked_weights(
    args: argparse.Namespace, model: UDCGTheta, k: int
) -> tuple[UDCGTheta, list[str]]:
    """``model`` (the ``--weights``, of k ``-k``) and its notes: judge, utility source, prompt
    and abstention mode as ``udcg score`` checks them
    (:func:`udcg.pipeline.context_scores.checked_theta`)."""
    labels_abstention = get_source(args.utility).step == "abstain"
    with _naming(args.weights):
        return checked_theta(
            model, [k], judge_key(args.judge, args.judge_key), args.utility,
            args.allow_mismatch, mode=journey.ABSTENTION_MODE if labels_abstention else None,
            option="--allow-mismatch {field}",
        )  # fmt: skip


def _deeper(measures: Sequence[str], k: int) -> str:
    """`` -m ...`` within the top ``k`` when a judged measure of ``measures`` reads deeper."""
    within = _within(measures, k)
    return "" if within == ",".join(map(str, parse_measures(measures))) else f" -m {within}"


@contextlib.contextmanager
def _naming(weights: str) -> Iterator[None]:
    """A refusal of a field of the weights' card names the weights."""
    try:
        yield
    except UDCGInputError as error:
        if error.path is not None:
            raise
        raise UDCGInputError(error.reason, path=weights, field=error.field) from None


def _say(text: str) -> None:
    print(f"udcg report: {text}", file=messages(), flush=True)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a user mistake)."""
    parser = build_parser()
    args = parse(parser, argv)
    require_files_without_dataset(parser, args)

    def work() -> None:
        start = time.perf_counter()
        check_judge_arguments(args)
        given = {"--topics": args.topics, "--collection": args.collection}
        given |= {"--qrels": args.qrels, "--answers": args.answers}
        refuse_stdin_twice({"RUN": args.runs, **given, **judge_inputs(args)})
        names = journey.system_names(args.runs)
        runs = dict(zip(names, args.runs, strict=True))
        baseline = args.baseline or names[0]
        if baseline not in runs:
            raise UDCGInputError(
                f"unknown system {baseline!r}; known: {', '.join(names)}", field="--baseline"
            )
        if len(runs) < 2:
            raise UDCGInputError("needs at least 2 runs to compare", field="runs")
        topics, collection, qrels = dataset_sources(args)
        if qrels is None and args.answers is None:
            raise UDCGInputError("needs --qrels or --answers (or both): relevance comes from them")
        k = _k(args)
        theta = _check_early(args, runs, baseline, k)
        if args.out == "-":
            raise UDCGInputError("-o is the folder the report's files go to, not standard output")
        out = Path(args.out)
        inputs = {
            **{f"RUN {n}": r for n, r in runs.items()},
            "--topics": args.topics,
            "--collection": args.collection,
            "--qrels": args.qrels,
            "--answers": args.answers,
            **weights_inputs(args.weights),
            **judge_inputs(args),
        }
        written = [out / f"{folder}/{n}.jsonl" for folder in ("contexts", "labels") for n in runs]
        for path in [*(out / n for n in REPORT_FILES), *written]:
            refuse_outputs(path, inputs)  # and the files beside it: manifests, locks
        _refuse_other_systems(out, list(runs))
        # every input is read more than once (per run, then to compare): a pipe is read once
        runs = {n: _once(r) for n, r in runs.items()}
        topics, collection, qrels = _once(topics), _once(collection), _once(qrels)
        answers = _once(args.answers)
        if qrels is not None and answers is None:
            _check_judged(runs, qrels)
        sources = _sources(args, runs, topics, collection, qrels, answers)
        out.mkdir(parents=True, exist_ok=True)
        with exclusive_writer(out / "report.json", "report"):
            weights = None
            if theta is not None:  # checked before any file is written
                weights = _checked_weights(args, theta, k)
                for note in weights[1]:
                    _say(f"UDCG-theta: {note}")
            for name in REPORT_FILES:  # an earlier report is not of the contexts written now
                (out / name).unlink(missing_ok=True)
            contexts = journey.build_contexts(
                runs, topics, collection, k, out / "contexts",
                qrels=qrels, answers=answers, full=weights is not None, utility=args.utility,
            )  # fmt: skip
            _say(f"{len(runs)} systems' top-{k} contexts -> {out / 'contexts'}")
            steps = journey.steps_for(contexts, args.utility)
            judge = open_cli_judge(args)
            if weights is not None:  # before any judge call
                weights[1].extend(_fingerprint_notes(args, weights[0], judge.fingerprint))
            labelled = journey.label_contexts(contexts, judge, steps, out / "labels", args.chunk)
            calls, hits = judge.cache.misses, judge.cache.hits
            _say(
                f"labels ({' '.join(steps)}) by {judge.name} -> {out / 'labels'}: "
                f"judge calls {calls}, cache hits {hits}"
            )
            report = _report(
                args, runs, sources, baseline, k, steps, labelled, judge, weights, qrels
            )
            report["seconds"] = round(time.perf_counter() - start, 3)
            markdown = to_markdown(report)
            texts = (markdown, json.dumps(report, indent=2) + "\n", to_html(report))
            for name, text in zip(REPORT_FILES, texts, strict=True):
                with atomic_write(out / name) as handle:
                    handle.write(text)
        print(markdown, end="", file=info_stream())
        _say(f"{', '.join(REPORT_FILES)} -> {out} in {report['seconds']:.1f} s")

    return run_cli("udcg report", work)


def _refuse_other_systems(out: Path, names: list[str]) -> None:
    """Refuse an ``out`` whose ``contexts/`` or ``labels/`` hold files of systems this report
    does not compare (an earlier report of more systems): the folder would mix two reports.
    Files an annotate run writes beside a system's (:func:`udcg.labels.stream.output_files`),
    and a killed run's temporary files of them (:func:`udcg.io.files.temporary_for`), are its
    own."""
    own = {path.name for n in names for path in output_files(f"{n}.jsonl")}
    others = sorted(
        path
        for folder in ("contexts", "labels")
        if (out / folder).is_dir()
        for path in (out / folder).iterdir()
        if (temporary_for(path.name) or path.name) not in own
    )
    if others:
        more = f" and {len(others) - 1} other file(s)" if len(others) > 1 else ""
        raise UDCGInputError(
            f"{others[0]}{more} are not of the systems this report compares"
            f" ({', '.join(names)}): an earlier report's; remove them or choose another folder",
            field="--out",
        )


def _fingerprint_notes(args: argparse.Namespace, model: UDCGTheta, fingerprint: str) -> list[str]:
    """The ``--weights`` checked against the fingerprint of the judge that labels (the card
    records the one whose utilities they were fitted on; not for weights of another judge key,
    allowed on purpose); the notes it allows on purpose."""
    from udcg.io.weights.files import check_fingerprint

    key = judge_key(args.judge, args.judge_key)
    with _naming(args.weights):
        notes = check_fingerprint(
            model.card_, key, fingerprint, args.allow_mismatch, calibrated=True
        )
    for note in notes:
        _say(f"UDCG-theta: {note}")
    return notes


def _sources(
    args: argparse.Namespace,
    runs: dict[str, Any],
    topics: Any,
    collection: Any,
    qrels: Any,
    answers: Any,
) -> dict[str, Any]:
    """report.json's ``inputs``: the ``--dataset`` id and each input file's path and SHA-256
    (:func:`udcg.pipeline.journey.input_record`; None where not given or the dataset's)."""
    files = {"topics": topics, "collection": collection, "qrels": qrels, "answers": answers}
    return {
        "dataset": args.dataset,
        "runs": {name: journey.input_record(run) for name, run in runs.items()},
        **{name: journey.input_record(source) for name, source in files.items()},
    }


def _report(
    args: argparse.Namespace,
    runs: dict[str, str],
    sources: dict[str, Any],
    baseline: str,
    k: int,
    steps: list[str],
    labelled: dict[str, journey.Labelled],
    judge: CachedJudge,
    weights: tuple[UDCGTheta, list[str]] | None,
    given: Any,
) -> dict[str, Any]:
    """Everything report.json holds; ``sources``: its ``inputs`` (:func:`_sources`); ``given``:
    the qrels (a file, a dataset's, or None)."""
    source = get_source(args.utility)
    paths = {name: item.path for name, item in labelled.items()}
    values = journey.pooled_values(paths, source.field, judge.name)
    utilities = {q: {d: float(v) for d, v in row.items()} for q, row in values.items()}
    if given is not None and args.answers is None:  # relevance from the qrels alone
        qrels, unjudged = (given if args.qrels is not None else given.to_dict()), 0
    else:  # the answers' labels, for every query the qrels (if any) do not judge
        relevant = journey.pooled_values(paths, "relevant")
        qrels = {q: {d: int(v) for d, v in row.items()} for q, row in relevant.items()}
        unjudged = len(qrels)
        if given is not None:
            from udcg.io.formats.trec import read_trec_qrels

            judged = (read_trec_qrels(given) if args.qrels is not None else given).to_dict()
            qrels = {**{q: row for q, row in qrels.items() if q not in judged}, **judged}
            unjudged = len(qrels) - len(judged)
    comparison = journey.compare_systems(
        qrels, runs, args.measures, utilities, source.field,
        baseline=baseline, test=args.test, alpha=args.alpha,
        n_resamples=args.n_resamples, seed=args.seed,
    )  # fmt: skip
    forecast = None
    if weights is not None:
        model, overrides = weights
        forecast = {
            "weights": args.weights,
            **model.digests(),  # of the weights and the card (its calibration) as read
            "k": len(model.alpha_),
            "overrides": overrides,
            "queries": len(comparison["qids"]),
            "systems": journey.forecasts(
                paths, model, judge.name, args.utility, qids=comparison["qids"],
                n_resamples=args.n_resamples, seed=args.seed,
            ),
        }  # fmt: skip
    signal = check_contexts(
        itertools.chain.from_iterable(map(read_contexts, paths.values())), judge.name, args.utility
    )
    passages = {
        name: sum(len(c.passages) for c in read_contexts(path)) for name, path in paths.items()
    }
    notes = [] if signal is None or not signal.fires else [signal.warning()]
    deeper = [
        str(m)
        for m in parse_measures(args.measures)
        if m.name not in UTILITY_MEASURES and (m.cutoff is None or m.cutoff > k)
    ]
    if given is not None and unjudged:
        notes.append(
            f"{unjudged} of {len(qrels)} queries are not in the qrels: their relevance comes "
            "from the answers, as labelled in each system's top k"
        )
    if unjudged and deeper:
        notes.append(
            f"relevance comes from the judge's labels of each system's top {k}, pooled: "
            f"{', '.join(deeper)} read deeper ranks, where a document no system ranks in its "
            f"top {k} counts as not relevant, so their values depend on the systems compared "
            "(as with pooled TREC qrels); give --qrels judging every query, or -k as deep as the "
            "measures read"
        )
    for note in notes:
        warnings.warn(note, UDCGWarning, stacklevel=1)
    notes += [  # compare warned already; a forecast refuses them before any judge call
        f"system {s!r} ranks no document for {n} of the {len(comparison['qids'])} judged "
        "queries; they score 0 (trec_eval -c)"
        for s, n in comparison["unranked"].items()
        if n
    ]
    return {
        "format": "udcg-report/1",
        "runs": {name: str(path) for name, path in runs.items()},
        "inputs": sources,
        "k": k,
        "relevance_from": (
            "the judge (answers)"
            if given is None
            else f"qrels, and the answers for {unjudged} queries"
            if unjudged
            else "qrels"
        ),
        "utility": args.utility,
        "judge": {
            "name": judge.name,
            "spec": args.judge,
            "fingerprint": judge.fingerprint,
            "steps": steps,
            "calls": judge.cache.misses,
            "cache_hits": judge.cache.hits,
            "cache": str(judge.cache.path),
        },
        "labels": {
            name: {
                "file": str(item.path),
                "contexts": item.report.contexts,
                "resumed": item.resumed,
                "pairs": item.report.pairs + item.report.answer_pairs,
                "passages": passages[name],
                "relevance_given": passages[name] - item.report.relevance_computed,
                "relevance_computed": item.report.relevance_computed,
                "upper_bounds": dict(item.report.bounds),
            }
            for name, item in labelled.items()
        },
        "signal": None if signal is None else signal.as_dict(),
        "warnings": notes,
        "comparison": comparison,
        "forecast": forecast,
    }


if __name__ == "__main__":
    sys.exit(main())
