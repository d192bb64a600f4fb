"""Several systems' TREC runs to one verdict: contexts, judge labels, measures, comparison.

:func:`build_contexts` joins each run with the topics and collection (as ``udcg contexts``),
:func:`label_contexts` annotates each system's contexts with one judge (as ``udcg annotate``:
chunked, resumable, through the judge cache) and :func:`compare_systems` evaluates every
system on the chosen measures (trec_eval semantics, :mod:`udcg.trec.comparison`) with the
judge's utilities, the per-query differences to the baseline, their paired-bootstrap CIs and the
paired tests' p-values. With UDCG-theta weights, :func:`forecasts` gives each system's
forecast end-to-end accuracy (mean UDCG-theta) with its CI.

Relevance: with qrels, the qrels' grades (an unjudged document of a judged query is not
relevant; labels the qrels give are kept); without, the judge's relevance step labels each
passage from the reference answers, and the classic measures are computed against those labels
(the pool of every system's top k).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.compute as pc

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import read_contexts, relevance_matrix, write_contexts
from udcg.io.files import PathType
from udcg.io.joins.run_contexts import build_run_contexts
from udcg.io.joins.utility_sources import get_source
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


@dataclass(frozen=True)
class Labelled:
    """One system's annotated contexts and what labelling them did."""

    path: Path
    report: AnnotationReport
    resumed: int


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
) -> dict[str, Path]:
    """Each run's top-``k`` contexts (:func:`udcg.io.joins.run_contexts.build_run_contexts`, run
    name = system name) written to ``folder/NAME.jsonl``; every run is read and checked before
    any file is written."""
    built = {
        name: list(
            build_run_contexts(
                run, topics, collection, k, answers=answers, qrels=qrels, run_name=name
            )
        )
        for name, run in runs.items()
    }
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, contexts in built.items():
        paths[name] = folder / f"{name}.jsonl"
        write_contexts(paths[name], contexts)
    return paths


def steps_for(contexts: Mapping[str, Path], utility: str) -> list[str]:
    """The annotate steps the report needs: the utility source's step, and ``relevance`` when
    a passage has no relevance label (no qrels, or a query the qrels do not judge)."""
    steps = [get_source(utility).step]
    unlabelled = any(
        p.relevant is None
        for path in contexts.values()
        for c in read_contexts(path)
        for p in c.passages
    )
    return [*steps, "relevance"] if unlabelled else steps


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
    step = functools.partial(annotate, judge=judge, steps=steps)
    record = default_record(judge, steps)
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
    n_resamples: int = 10000,
    seed: int | None = 0,
    confidence: float = 0.95,
) -> dict[str, dict[str, dict[str, Any]]]:
    """``{system: {variant: {"forecast", "ci"}}}``: each system's forecast end-to-end accuracy,
    the mean UDCG-theta of its contexts (variant ``UDCG-theta``, and ``UDCG-theta
    (recalibrated)`` when ``model`` carries a calibration), with a percentile-bootstrap CI over
    its queries. A context with another number of passages than the model's k is refused."""
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
                    f"take exactly {k}: no forecast for a shorter ranking",
                    field="passages",
                    **ctx.location(),
                )
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
