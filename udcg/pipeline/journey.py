"""Several systems' TREC runs to one verdict: contexts, judge labels, measures, comparison.

:func:`build_contexts` joins each run with the topics and collection (as ``udcg contexts``),
:func:`label_contexts` annotates each system's contexts with one judge (as ``udcg annotate``:
chunked, resumable, through the judge cache) and :func:`compare_systems` evaluates every
system on the chosen measures (trec_eval semantics, :mod:`udcg.trec.comparison`) with the
judge's utilities, the per-query differences to the baseline, their paired-bootstrap CIs and the
paired tests' p-values. With UDCG-theta weights, :func:`forecasts` gives each system's
forecast end-to-end accuracy (mean UDCG-theta over the compared queries) with its CI; the
weights forecast contexts of exactly their k passages, so :func:`build_contexts` (``full``)
refuses, before any judge call, a run that ranks fewer for a compared query or none at all.

Relevance: with qrels, the qrels' grades (an unjudged document of a judged query is not
relevant; labels the qrels give are kept); without, the judge's relevance step labels each
passage from the reference answers, and the classic measures are computed against those labels
(the pool of every system's top k).
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.compute as pc

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, read_contexts, relevance_matrix, write_contexts
from udcg.io.files import PathType
from udcg.io.formats.collection import unique_records
from udcg.io.formats.topics import ANSWERS
from udcg.io.joins.run_contexts import build_run_contexts
from udcg.io.joins.utility_sources import get_source
from udcg.io.manifests import file_sha256
from udcg.labels.annotate import (
    AnnotationReport,
    annotate,
    check_inputs,
    check_provided,
)
from udcg.labels.provenance import default_record
from udcg.labels.stream import DEFAULT_CHUNK, annotate_stream
from udcg.trec.comparison import compare
from udcg.trec.engine import as_qrels, evaluate_table
from udcg.trec.significance import bootstrap_interval

if TYPE_CHECKING:
    from udcg.judge.cached import CachedJudge
    from udcg.theta import UDCGTheta

#: Measures reported when none are named.
DEFAULT_MEASURES = ("UDCG@5", "nDCG@10", "AP", "RR", "P@5")
#: The abstention mode :func:`label_contexts` labels in (weights are checked against it).
ABSTENTION_MODE = "first_token"


@dataclass(frozen=True)
class Labelled:
    """One system's annotated contexts and what labelling them did."""

    path: Path
    report: AnnotationReport
    resumed: int


def input_record(source: Any) -> dict[str, str] | None:
    """What a report records of one input: its ``path`` as given and the ``sha256`` of its
    (uncompressed) bytes (:func:`udcg.io.manifests.file_sha256`; standard input and a pipe
    hashed from the bytes already read, :func:`udcg.io.files.read_once`); None for no file
    (an input not given, or a dataset's part).

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "topics.tsv").write_text("q1\\tWho wrote Emma?\\n")
        ...     record = input_record(Path(folder) / "topics.tsv")
        >>> record["path"].endswith("topics.tsv"), record["sha256"][:12]
        (True, '5fbbbaf533e1')
        >>> input_record(None) is None
        True
    """
    if not isinstance(source, str | PathLike):
        return None
    return {"path": os.fspath(source), "sha256": file_sha256(source)}


def system_names(runs: Sequence[PathType]) -> list[str]:
    """A name per run file: its file name without the last suffix (``.gz`` first), refused
    when two runs would share one."""
    names = []
    for run in runs:
        path = Path(run)
        name = path.name.removesuffix(".gz")
        name = Path(name).stem or name
        if name in names:
            raise UDCGInputError(
                f"two runs are named {name!r} (by their file names); rename one", field="runs"
            )
        names.append(name)
    return names


def build_contexts(
    runs: Mapping[str, PathType],
    topics: PathType,
    collection: PathType,
    k: int,
    folder: Path,
    *,
    qrels: PathType | None = None,
    answers: PathType | None = None,
    full: bool = False,
    utility: str | None = None,
) -> dict[str, Path]:
    """Each run's top-``k`` contexts (:func:`udcg.io.joins.run_contexts.build_run_contexts`, run
    name = system name) written to ``folder/NAME.jsonl``; every run is read and checked before
    any file is written. ``full``: every system must rank at least ``k`` documents for every
    query the comparison scores (the queries of ``qrels`` and every query a run ranks), as
    UDCG-theta forecasts lists of exactly its k: a run that ranks fewer, or none, for such a
    query is refused. ``utility``: the source the contexts will be labelled for
    (:func:`steps_for`); every context those steps need answers for must have them
    (:func:`_require_answers`), checked here, before any file is written or the judge asked.

    Examples:
        A run ranking two documents gives a context of two, and is refused where contexts
        of three are needed:

        >>> import tempfile
        >>> from pathlib import Path
        >>> from udcg.errors import UDCGInputError
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     root = Path(folder)
        ...     _ = (root / "topics.tsv").write_text("q1\\tWho wrote Emma?\\n")
        ...     _ = (root / "docs.tsv").write_text("d1\\tAusten wrote Emma.\\nd2\\tRain.\\n")
        ...     run = root / "bm25.trec"
        ...     _ = run.write_text("q1 Q0 d1 1 2.0 bm25\\nq1 Q0 d2 2 1.0 bm25\\n")
        ...     inputs = {"bm25": run}, root / "topics.tsv", root / "docs.tsv"
        ...     paths = build_contexts(*inputs, 2, root / "contexts", full=True)
        ...     ranked = [p.doc_id for c in read_contexts(paths["bm25"]) for p in c.passages]
        ...     try:
        ...         build_contexts(*inputs, 3, root / "three", full=True)
        ...     except UDCGInputError as error:
        ...         refused = error.reason
        >>> ranked
        ['d1', 'd2']
        >>> refused.split(", and")[0]
        "system 'bm25' ranks 2 documents for query 'q1'"
    """
    built = {
        name: list(
            build_run_contexts(
                run, topics, collection, k, answers=answers, qrels=qrels, run_name=name
            )
        )
        for name, run in runs.items()
    }
    if full:
        _require_full(built, runs, k, set() if qrels is None else _judged(qrels))
    if utility is not None:
        _require_answers(built, utility, answers)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, contexts in built.items():
        paths[name] = folder / f"{name}.jsonl"
        write_contexts(paths[name], contexts, check=False)
    return paths


def _require_full(
    built: Mapping[str, Sequence[Any]], runs: Mapping[str, PathType], k: int, judged: set[str]
) -> None:
    """Every system ranks at least ``k`` documents for every compared query: those of
    ``judged`` (the qrels) and every query some run ranks."""
    queries = judged | {ctx.qid for contexts in built.values() for ctx in contexts}
    remedy = (
        f"the UDCG-theta weights forecast contexts of exactly {k} passages: rank at least {k} "
        "documents for every compared query, or leave the forecast (--weights) out"
    )
    for name, contexts in built.items():
        missing = sorted(queries - {ctx.qid for ctx in contexts})
        if missing:
            raise UDCGInputError(
                f"system {name!r} ranks no document for {len(missing)} of the {len(queries)} "
                f"compared queries (first {missing[0]!r}), and {remedy}",
                path=runs[name],
                field="run",
            )
        for ctx in contexts:
            if len(ctx.passages) < k:
                n = len(ctx.passages)
                raise UDCGInputError(
                    f"system {name!r} ranks {n} document{'' if n == 1 else 's'} for query "
                    f"{ctx.qid!r}, and {remedy}",
                    path=runs[name],
                    field="run",
                )


def steps_for(contexts: Mapping[str, Path], utility: str) -> list[str]:
    """The annotate steps the report needs: the utility source's step, and ``relevance`` when
    a passage has no relevance label (no qrels, or a query the qrels do not judge)."""
    return _steps(itertools.chain.from_iterable(map(read_contexts, contexts.values())), utility)


def _steps(contexts: Iterable[Context], utility: str) -> list[str]:
    """:func:`steps_for` of ``contexts``."""
    steps = [get_source(utility).step]
    unlabelled = any(p.relevant is None for c in contexts for p in c.passages)
    return [*steps, "relevance"] if unlabelled else steps


def _answer_steps(ctx: Context, steps: Sequence[str]) -> list[str]:
    """The steps of ``steps`` that need ``ctx``'s answers: ``answer_likelihood``, and
    ``relevance`` when a passage of ``ctx`` has no label (as
    :func:`udcg.labels.annotate.check_inputs` decides)."""
    unlabelled = any(p.relevant is None for p in ctx.passages)
    return [s for s in steps if s == "answer_likelihood" or (s == "relevance" and unlabelled)]


def _require_answers(
    built: Mapping[str, Sequence[Context]], utility: str, answers: PathType | None
) -> None:
    """Every context the steps of ``utility`` need answers for (:func:`_answer_steps`) has
    them (from ``answers``, else from the topics), none empty for ``answer_likelihood``. A
    mistake names the answers file (the query's line, when the file has the query), or
    ``--answers`` when none is given."""
    contexts = [ctx for listed in built.values() for ctx in listed]
    steps = _steps(contexts, utility)
    needs = {ctx.qid: need for ctx in contexts if (need := _answer_steps(ctx, steps))}
    of = {ctx.qid: ctx.answers or [] for ctx in contexts}
    missing = sorted(q for q in needs if not of[q])
    if missing and answers is None:
        raise UDCGInputError(
            f"step {', '.join(needs[missing[0]])} needs reference answers, and the topics give "
            f"none for {len(missing)} of the {len(needs)} queries that need them (first "
            f"{missing[0]!r}): give --answers",
            field="--answers",
        )
    if missing:
        raise UDCGInputError(
            f"step {', '.join(needs[missing[0]])} needs reference answers: {len(missing)} of "
            f"the {len(needs)} queries that need them have none (first {missing[0]!r})",
            path=answers,
            line=_answer_line(answers, missing[0]),
            field="answers",
        )
    for qid in needs:
        empty = [j for j, a in enumerate(of[qid]) if not a.strip()]
        if empty and "answer_likelihood" in needs[qid]:
            line = None if answers is None else _answer_line(answers, qid)
            raise UDCGInputError(
                f"query {qid!r}: empty answer (step answer_likelihood scores each answer)",
                path=None if line is None else answers,
                line=line,
                field=f"answers[{empty[0]}]",
            )


def _answer_line(answers: PathType, qid: str) -> int | None:
    """The line of query ``qid`` in the answers file ``answers`` (None: not there)."""
    lines = (record.where.line for record in unique_records(answers, ANSWERS, {qid}))
    return next(lines, None)


def label_contexts(
    contexts: Mapping[str, Path],
    judge: CachedJudge,
    steps: Sequence[str],
    folder: Path,
    chunk: int = DEFAULT_CHUNK,
) -> dict[str, Labelled]:
    """Each system's contexts annotated with ``judge`` into ``folder/NAME.jsonl`` (chunked and
    resumable, :func:`udcg.labels.stream.annotate_stream`; given relevance labels are kept).
    Every input is checked before the first judge call."""
    totals = {
        name: check_inputs(read_contexts(path), steps, "string") for name, path in contexts.items()
    }
    check_provided(judge, steps, "string")
    step = functools.partial(annotate, judge=judge, steps=steps, mode=ABSTENTION_MODE)
    record = default_record(judge, steps, chunk)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, path in contexts.items():
        target = folder / f"{name}.jsonl"
        report, resumed = annotate_stream(
            read_contexts(path), target, step, chunk, totals[name], record=record
        )
        out[name] = Labelled(target, report, resumed)
    return out


def pooled_values(
    labelled: Mapping[str, Path], read: str, judge_key: str | None = None
) -> dict[str, dict[str, Any]]:
    """``{qid: {doc_id: value}}`` over every system's annotated contexts: each passage's
    ``relevant`` label (``read="relevant"``) or its ``read`` probability under ``judge_key``.
    The same (query, document) with two different values is an error naming both systems."""
    values: dict[str, dict[str, Any]] = {}
    seen: dict[tuple[str, str], str] = {}
    for name, path in labelled.items():
        for ctx in read_contexts(path):
            row = values.setdefault(ctx.qid, {})
            for i, p in enumerate(ctx.passages):
                value = p.relevant if read == "relevant" else getattr(p, read)[judge_key]
                if p.doc_id in row and row[p.doc_id] != value:
                    raise UDCGInputError(
                        f"document {p.doc_id!r} of query {ctx.qid!r} has {read} "
                        f"{row[p.doc_id]!r} in system {seen[ctx.qid, p.doc_id]!r} and "
                        f"{value!r} in system {name!r}",
                        field=f"passages[{i}].{read}",
                    )
                row[p.doc_id] = value
                seen[ctx.qid, p.doc_id] = name
    return values


def compare_systems(
    qrels: PathType | Mapping[str, Mapping[str, int]],
    runs: Mapping[str, PathType],
    measures: Sequence[str],
    utilities: Mapping[str, Mapping[str, float]],
    utility_field: str,
    *,
    baseline: str,
    test: str = "t",
    alpha: float = 0.05,
    n_resamples: int = 10000,
    seed: int | None = 0,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """Every system on every measure: ``qids``, ``per_query[system][measure]`` (a judged query
    a run does not rank scores 0), ``means[system][measure] = {"mean", "ci"}`` and, for each
    other system, ``differences[system][measure] = {"difference", "ci", "p_value",
    "p_corrected", "significant"}`` to ``baseline`` (CIs, p-values and Holm's correction:
    :func:`udcg.trec.comparison.compare`, so ``udcg compare`` prints the same numbers) and
    ``unranked[system]``, the judged queries it does not rank."""
    report = compare(
        qrels,
        runs,
        list(measures),
        test=test,
        alpha=alpha,
        n_resamples=n_resamples,
        seed=seed,
        baseline=baseline,
        utilities=utilities,
        utility_field=utility_field,
        confidence=confidence,
    )
    systems = report.systems
    names = report.measures
    judged = sorted(_judged(qrels))
    row_of = {q: i for i, q in enumerate(judged)}
    values = np.zeros((len(judged), len(systems), len(names)))
    for j, s in enumerate(systems):
        table = evaluate_table(
            qrels, runs[s], names, utilities=utilities, utility_field=utility_field
        )
        kept = [i for i, q in enumerate(table.qids) if q in row_of]
        values[[row_of[table.qids[i]] for i in kept], j] = table.values[kept]
    b = systems.index(baseline)
    differences = values - values[:, [b]]
    # the means' intervals from the resamples compare's difference intervals are drawn from
    intervals = bootstrap_interval(
        values.reshape(len(judged), -1), confidence, n_resamples, seed
    ).reshape(2, len(systems), len(names))
    out: dict[str, Any] = {
        "qids": judged,
        "systems": systems,
        "baseline": baseline,
        "measures": names,
        "test": report.test,
        "alpha": report.alpha,
        "correction": report.correction,
        "confidence": confidence,
        "n_resamples": n_resamples,
        "seed": seed,
        "unranked": dict(report.unranked),
        "per_query": {
            s: {m: values[:, j, i].tolist() for i, m in enumerate(names)}
            for j, s in enumerate(systems)
        },
        "means": {},
        "differences": {},
    }
    for j, s in enumerate(systems):
        out["means"][s] = {
            m: {
                "mean": float(values[:, j, i].mean()),
                "ci": intervals[:, j, i].tolist(),
            }
            for i, m in enumerate(names)
        }
        if j == b:
            continue
        out["differences"][s] = {}
        for i, m in enumerate(names):
            c = report.comparison(s, baseline, m)
            out["differences"][s][m] = {
                "difference": float(differences[:, j, i].mean()),
                "ci": [c.ci_low, c.ci_high],
                "p_value": c.p_value,
                "p_corrected": c.p_corrected,
                "significant": c.significant,
            }
    return out


def _judged(qrels: PathType | Mapping[str, Mapping[str, int]]) -> set[str]:
    """The ids of the queries ``qrels`` judge."""
    return set(pc.unique(as_qrels(qrels).qids).to_pylist())


def forecasts(
    labelled: Mapping[str, Path],
    model: UDCGTheta,
    judge_key: str,
    utility: str,
    *,
    qids: Sequence[str] | None = None,
    n_resamples: int = 10000,
    seed: int | None = 0,
    confidence: float = 0.95,
) -> dict[str, dict[str, dict[str, Any]]]:
    """``{system: {variant: {"forecast", "ci"}}}``: each system's forecast end-to-end accuracy,
    the mean UDCG-theta of its contexts for the queries ``qids`` (None: every query it ranks),
    in that order, with a percentile-bootstrap CI over them (variant ``UDCG-theta``, and
    ``UDCG-theta (recalibrated)`` when ``model`` carries a calibration). Every system is
    averaged over the same queries, those the comparison scores: a query of ``qids`` a system
    does not rank is refused (the comparison scores it 0, and UDCG-theta forecasts lists of
    exactly its k), and a context of a query outside ``qids`` is not counted. A context with
    another number of passages than the model's k is refused.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> import numpy as np
        >>> from udcg.io.contexts.jsonl import Context, Passage, write_contexts
        >>> from udcg.theta import UDCGTheta
        >>> model = UDCGTheta(1)
        >>> model.alpha_, model.beta_, model.intercept_ = np.array([2.0]), -np.ones(1), 0.0
        >>> model.calibration_ = None
        >>> def context(qid, relevant):
        ...     return Context(qid, [Passage("d1", relevant=relevant, abstain_prob={"j": 0.0})])
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     a, b = Path(folder) / "a.jsonl", Path(folder) / "b.jsonl"
        ...     _ = write_contexts(a, [context("q1", True), context("q2", True)])
        ...     _ = write_contexts(b, [context("q1", True), context("q2", False)])
        ...     found = forecasts({"a": a, "b": b}, model, "j", "abstention",
        ...                       qids=["q1", "q2"], n_resamples=100)
        >>> {s: round(v["UDCG-theta"]["forecast"], 4) for s, v in found.items()}
        {'a': 0.8808, 'b': 0.5749}
    """
    k = len(model.alpha_)
    variants = {"UDCG-theta": False}
    if model.calibration_ is not None:
        variants["UDCG-theta (recalibrated)"] = True
    out = {}
    for name, path in labelled.items():
        contexts = list(read_contexts(path))
        for ctx in contexts:
            if len(ctx.passages) != k:
                raise UDCGInputError(
                    f"system {name!r}: {len(ctx.passages)} passages, the UDCG-theta weights "
                    f"take exactly {k}: no forecast for a ranking of another length",
                    field="passages",
                    **ctx.location(),
                )
        if qids is not None:
            of = {ctx.qid: ctx for ctx in contexts}
            missing = [q for q in qids if q not in of]
            if missing:
                raise UDCGInputError(
                    f"system {name!r} ranks no document for {len(missing)} of the {len(qids)} "
                    f"queries compared (first {missing[0]!r}): no forecast over them",
                    path=path,
                    field="qid",
                )
            contexts = [of[q] for q in qids]
        relevant = np.stack(relevance_matrix(contexts, unit=True))
        utilities = np.stack(get_source(utility).utilities(contexts, judge_key))
        columns = np.stack(
            [model.predict_proba(relevant, utilities, calibrated=c) for c in variants.values()],
            axis=1,
        )
        intervals = bootstrap_interval(columns, confidence, n_resamples, seed)
        out[name] = {
            variant: {"forecast": float(columns[:, i].mean()), "ci": intervals[:, i].tolist()}
            for i, variant in enumerate(variants)
        }
    return out
