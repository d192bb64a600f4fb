"""The per-query scores the Q-CARE release publishes (github DISL-Lab/Q-CaRE-COLM-26,
``data/human_labels/scores/[<split>][<Model>]query_level_results.json``), their aggregates,
and the comparison of udcg's values with them.

A file is a JSON list of per-query records (read for the format only)::

    {"qid": "nq_test_812", "dataset_group": "nq_", "num_subqueries": 1,
     "covered_subqueries": 1, "total_atomic_facts": 1, "relevant_atomic_facts": 1,
     "verified_atomic_facts": 1, "completeness": 1.0, "conciseness": 1.0,
     "verifiableness": 1.0, "ndcg_at_10": 0.63, "precision_at_10": 0.1}

The split and the target model come from the file name (or are given). The release's
aggregates of these files are plain means over the records (a value it could not define is
already a 0 in the file): :func:`published_table` gives ``metric_table_all.csv``'s rows,
:func:`model_comparison` the ``[<split>]model_comparison_results.json`` objects, and
:func:`compare_published` counts, per metric, the queries where udcg's value from labelled
contexts (``udcg qcare import`` of the annotation CSVs) equals the published one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.contexts.checks import Where, kind
from udcg.io.contexts.model import Context
from udcg.io.files import PathType
from udcg.qcare.release import (
    RELEASE_TOP_K,
    annotator_coverage,
    load_json,
    release_order,
    table_rows,
)
from udcg.qcare.scores import GENERATOR_METRICS, METRICS, qcare_scores
from udcg.validation import nonnegative_float

__all__ = [
    "PUBLISHED_METRICS",
    "PublishedMatch",
    "PublishedQuery",
    "compare_published",
    "model_comparison",
    "published_table",
    "read_query_level_results",
]

#: udcg's metric for each published per-query key.
PUBLISHED_METRICS = {
    "completeness": "Completeness",
    "conciseness": "Conciseness",
    "verifiableness": "Verifiableness",
    "ndcg_at_10": "C-nDCG",
    "precision_at_10": "C-Prec",
}
#: The published per-query counts.
COUNTS = (
    "num_subqueries",
    "covered_subqueries",
    "total_atomic_facts",
    "relevant_atomic_facts",
    "verified_atomic_facts",
)
_FILE_NAME = re.compile(r"\[([^\]]+)\]\[([^\]]+)\]query_level_results\.json$")


@dataclass(frozen=True)
class PublishedQuery:
    """One published record: ``values`` by udcg metric name, ``counts`` by release key.

    Examples:
        >>> PublishedQuery("nq_1", "nq_", "GPT-5", "close_ended", {"C-Prec": 0.1}).values
        {'C-Prec': 0.1}
    """

    qid: str
    dataset: str
    model: str
    split: str
    values: dict[str, float]
    counts: dict[str, int] = field(default_factory=dict)


def _file_info(path: PathType, model: str | None, split: str | None) -> tuple[str, str]:
    match = _FILE_NAME.search(Path(path).name)
    split = split or (match.group(1) if match else None)
    model = model or (match.group(2) if match else None)
    if split is None or model is None:
        raise UDCGInputError(
            "cannot tell the split and model from the file name (expected "
            "'[<split>][<Model>]query_level_results.json'); give them",
            path=path,
        )
    return model, split


def _number(record: dict[str, Any], key: str, where: Where) -> float:
    if key not in record:
        raise where.error(key, "missing")
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.error(key, f"must be a number, got {kind(value)}")
    return value


def read_query_level_results(
    path: PathType, *, model: str | None = None, split: str | None = None
) -> list[PublishedQuery]:
    """The records of one published per-query file; ``model`` and ``split`` default to the
    ones in its name. A missing or non-numeric value is an error naming the record and key.

    Examples:
        >>> import json, tempfile
        >>> record = {"qid": "nq_test_1", "dataset_group": "nq_", "num_subqueries": 2,
        ...           "covered_subqueries": 1, "total_atomic_facts": 1,
        ...           "relevant_atomic_facts": 1, "verified_atomic_facts": 0,
        ...           "completeness": 0.5, "conciseness": 1.0, "verifiableness": 0.0,
        ...           "ndcg_at_10": 0.63, "precision_at_10": 0.1}
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "[close_ended][GPT-5]query_level_results.json"
        ...     _ = path.write_text(json.dumps([record]))
        ...     (q,) = read_query_level_results(path)
        >>> q.model, q.split, q.dataset, q.values["Completeness"], q.counts["num_subqueries"]
        ('GPT-5', 'close_ended', 'nq_', 0.5, 2)
    """
    model, split = _file_info(path, model, split)
    items = load_json(path)
    if not isinstance(items, list):
        raise UDCGInputError(f"expected a JSON list of records, got {kind(items)}", path=path)
    records = []
    for i, item in enumerate(items):
        where = Where(path, None, prefix=f"[{i}].")
        if not isinstance(item, dict):
            raise where.error("", f"must be an object, got {kind(item)}")
        for key in ("qid", "dataset_group"):
            if not isinstance(item.get(key), str):
                raise where.error(key, f"must be a string, got {kind(item.get(key))}")
        values = {name: float(_number(item, key, where)) for key, name in PUBLISHED_METRICS.items()}
        counts = {key: int(_number(item, key, where)) for key in COUNTS if key in item}
        records.append(
            PublishedQuery(item["qid"], item["dataset_group"], model, split, values, counts)
        )
    return records


def published_table(
    records: Iterable[PublishedQuery], metrics: Sequence[str] = GENERATOR_METRICS
) -> list[list[Any]]:
    """``metric_table_all.csv``'s rows (:func:`udcg.qcare.release.table_rows`) from published
    per-query values: per model (in the release's order) and metric the mean over each
    dataset's queries.

    Examples:
        >>> rows = published_table([
        ...     PublishedQuery("nq_1", "nq_", "GPT-5", "close_ended", {"Completeness": 1.0}),
        ...     PublishedQuery("nq_2", "nq_", "GPT-5", "close_ended", {"Completeness": 0.0})],
        ...     metrics=["Completeness"])
        >>> rows[0][:4]
        ['Proprietary', 'GPT-5', 'Completeness', 0.5]
    """
    values: dict[str, dict[str, list[tuple[str, float | None]]]] = {}
    for r in records:
        by_metric = values.setdefault(r.model, {m: [] for m in metrics})
        for metric in metrics:
            by_metric[metric].append((r.dataset, r.values[metric]))
    return table_rows({m: values[m] for m in release_order(values)}, metrics)


def _means(records: list[PublishedQuery]) -> dict[str, float]:
    return {
        key: sum(r.values[PUBLISHED_METRICS[key]] for r in records) / len(records)
        for key in ("completeness", "conciseness", "verifiableness", "ndcg_at_10")
    }


def _totals(records: list[PublishedQuery]) -> dict[str, int]:
    return {
        "total_subquery": sum(r.counts.get("num_subqueries", 0) for r in records),
        "total_atomic": sum(r.counts.get("total_atomic_facts", 0) for r in records),
    }


def model_comparison(records: Iterable[PublishedQuery]) -> dict[str, dict[str, Any]]:
    """The ``[<split>]model_comparison_results.json`` objects, by split: per model, the
    ``overall`` and per-``dataset_group`` means of Completeness, Conciseness,
    Verifiableness and C-nDCG with the query, sub-query and claim totals.

    Examples:
        >>> qs = [PublishedQuery(f"nq_{i}", "nq_", "GPT-5", "close_ended",
        ...                      dict.fromkeys(PUBLISHED_METRICS.values(), v),
        ...                      {"num_subqueries": 2, "total_atomic_facts": 1})
        ...       for i, v in enumerate([1.0, 0.5])]
        >>> entry = model_comparison(qs)["close_ended"]["GPT-5"]
        >>> entry["overall"]["completeness"], entry["overall"]["total_subquery"]
        (0.75, 4)
        >>> entry["by_dataset"]["nq_"]["num_queries"]
        2
    """
    grouped: dict[str, dict[str, list[PublishedQuery]]] = {}
    for r in records:
        grouped.setdefault(r.split, {}).setdefault(r.model, []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for split, by_model in grouped.items():
        out[split] = {}
        for model, chosen in by_model.items():
            datasets: dict[str, list[PublishedQuery]] = {}
            for r in chosen:
                datasets.setdefault(r.dataset, []).append(r)
            out[split][model] = {
                "model_name": model,
                "overall": {
                    **_means(chosen),
                    "total_queries": len(chosen),
                    **_totals(chosen),
                },
                "by_dataset": {
                    name: {"num_queries": len(group), **_totals(group), **_means(group)}
                    for name, group in sorted(datasets.items())
                },
            }
    return out


@dataclass(frozen=True)
class PublishedMatch:
    """For one model, split and metric: queries compared, how many equal the published
    value (within ``tolerance``), the largest difference and the first differing ``qid``\\ s;
    ``missing``: queries udcg leaves undefined; ``absent``: published queries without a
    labelled context (neither is compared).

    Examples:
        >>> m = PublishedMatch("GPT-5", "close_ended", "C-nDCG", 60, 58, 0.2, ["q7", "q9"], 0)
        >>> f"{m.equal}/{m.compared}"
        '58/60'
    """

    model: str
    split: str
    metric: str
    compared: int
    equal: int
    max_diff: float
    differing: list[str]
    missing: int
    absent: int = 0


def compare_published(
    contexts: Sequence[Context],
    records: Iterable[PublishedQuery],
    *,
    k: int = RELEASE_TOP_K,
    gain: str = "linear",
    coverage: str = "boolean",
    tolerance: float = 1e-9,
    show: int = 5,
) -> list[PublishedMatch]:
    """udcg's per-query metrics of ``contexts`` (``outcomes[model]``; a model's coverage from
    the annotator named after it, as the release scores each model with its own ``[Chunk]``
    file) against the published ones, per model, split and metric. Published queries
    without a context are counted (``absent``); a model or split with none, or two contexts
    of one query, is an error.

    Examples:
        >>> from udcg.io.contexts.model import Passage
        >>> ctx = Context("nq_1", [Passage("1", covers=[True]), Passage("2", covers=[False])],
        ...               subqueries=["who?"], outcomes={"GPT-5": {"claims": []}})
        >>> q = PublishedQuery("nq_1", "nq_", "GPT-5", "close_ended",
        ...                    {"C-Prec": 0.5, "C-nDCG": 1.0})
        >>> [(m.metric, m.compared, m.equal) for m in compare_published([ctx], [q], k=2)
        ...  if m.metric.startswith("C-")]
        [('C-Prec', 1, 1), ('C-nDCG', 1, 1)]
    """
    tol = nonnegative_float(tolerance, "tolerance")  # NaN would call every value equal
    by_qid: dict[str, Context] = {}
    for c in contexts:
        if c.qid in by_qid:
            raise UDCGInputError(
                f"two labelled contexts for query {c.qid!r}: the comparison needs one per query"
            )
        by_qid[c.qid] = c
    grouped: dict[tuple[str, str], list[PublishedQuery]] = {}
    for r in records:
        grouped.setdefault((r.model, r.split), []).append(r)
    matches = []
    for (model, split), chosen in grouped.items():
        every = chosen
        chosen = [r for r in every if model in by_qid.get(r.qid, _NO_CONTEXT).outcomes]
        if not chosen:
            raise UDCGInputError(
                f"no labelled context holds outcomes[{model!r}] for a published {split} query "
                f"(first: {every[0].qid})"
            )
        scored = [annotator_coverage(by_qid[r.qid], model) for r in chosen]
        scores = qcare_scores(scored, model, k, gain=gain, coverage=coverage)
        for metric in METRICS:
            if metric not in chosen[0].values:
                continue
            ours = scores.values[metric]
            missing = np.ma.getmaskarray(ours)
            diffs = [
                (abs(float(ours.data[i]) - r.values[metric]), r.qid)
                for i, r in enumerate(chosen)
                if not missing[i]
            ]
            differing = [qid for d, qid in diffs if d > tol]
            matches.append(
                PublishedMatch(
                    model,
                    split,
                    metric,
                    compared=len(diffs),
                    equal=len(diffs) - len(differing),
                    max_diff=max((d for d, _ in diffs), default=0.0),
                    differing=differing[:show],
                    missing=int(missing.sum()),
                    absent=len(every) - len(chosen),
                )
            )
    return matches


_NO_CONTEXT = Context("", [])
