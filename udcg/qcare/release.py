"""Read the output of the Q-CARE release's pipeline (github DISL-Lab/Q-CaRE-COLM-26,
``evaluate.py``) into contexts, so that ``udcg qcare score`` computes its metrics again.

A results file is a JSON list of per-query records (read for the format only)::

    {"qid": "nq_test_812", "query": "...", "model_answer": "...", "target_model": "GPT-5",
     "decomposed_query": {"Core subquery1": "...", "Core subquery2": "..."},
     "atomic_facts": {"Atomic fact1": "..."},
     "relevance_check": {
       "query_chunk_coverage": {"Chunk 2": ["Core subquery1"]},
       "chunk_fact_relevance": {"Chunk 2": {"selected_facts": ["Atomic fact1"]}},
       "query_fact_relevance": {"Core subquery1": {"selected_facts": ["Atomic fact1"]}},
       "query_fact_coverage": {"Core subquery1": "Covered", "Core subquery2": "Not covered"}},
     "metrics": {"precision_at_10": 0.05, "ndcg_at_10": 0.63, ...}}

or, from ``evaluate_retriever.py``, ``{"qid", "query", "decomposed_query", "retriever",
"query_chunk_coverage", "metrics"}`` (no answer). One context per record, run = the retriever,
with:

* ``subqueries``: the values of ``decomposed_query`` in file order;
* ``passages``: the top ``k`` (10, as the release judges) chunks, ``doc_id`` their 1-based
  position (``"1"`` for ``Chunk 1``; a chunk text may repeat in a list), ``text`` from the
  benchmark file's ``retrieved_chunk[retriever]`` when it is given, and
  ``covers[s]`` = sub-query s is listed under the chunk in ``query_chunk_coverage``;
* ``outcomes[target_model]``: ``answer``, ``claims`` (the values of ``atomic_facts``),
  ``subquery_covered[s]`` (``"Covered"``; ``null`` when the sub-query has no label),
  ``claim_relevance[f][s]`` and ``claim_support[f][chunk]`` from the ``selected_facts`` lists;
* ``extra["release_metrics"]``: the record's published ``metrics``, kept for comparison.

``selected_facts`` entries are fact keys (``Atomic fact2``) or, as the release's ``paper``
parsing keeps them, fact texts: a text equal (after trimming) to one claim is that claim; an
entry matching no claim is ignored and counted in ``outcomes[MODEL]["unresolved_facts"]``.
The release counts each distinct entry instead, so a claim named once by key and once by text
counts twice there (and a ratio above 1 becomes 0); udcg counts claims. Anything of the wrong
type, a key naming no sub-query or a chunk outside 1..k is an error naming the file, the item
and the field.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.contexts.checks import Where, json_problem, kind
from udcg.io.contexts.model import Context, Passage
from udcg.io.files import PathType, atomic_write, read_text
from udcg.qcare.human import dataset_group
from udcg.qcare.scores import GENERATOR_METRICS, qcare_scores
from udcg.validation import positive_int

__all__ = [
    "RELEASE_TOP_K",
    "annotator_coverage",
    "read_release_results",
    "release_order",
    "release_table",
    "table_rows",
    "write_release_table",
]

#: Chunks the release's pipeline judges per query.
RELEASE_TOP_K = 10
#: The retriever of ``evaluate.py``'s records (they do not name it).
DEFAULT_RETRIEVER = "BM25"
_CHUNK = re.compile(r"Chunk (\d+)")
_CHECKS = (
    "query_chunk_coverage",
    "chunk_fact_relevance",
    "query_fact_relevance",
    "query_fact_coverage",
)


def load_json(path: PathType) -> Any:
    """The parsed JSON of ``path``; bad UTF-8 or JSON is an error at its line."""
    text = read_text(path)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        line = exc.lineno if isinstance(exc, json.JSONDecodeError) else None
        raise UDCGInputError(json_problem(exc), path=path, line=line) from None


def _object(value: Any, name: str, where: Where) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise where.error(name, f"must be an object, got {kind(value)}")
    return value


def _text_map(value: Any, name: str, where: Where) -> dict[str, str]:
    """A ``{key: text}`` object (``decomposed_query``, ``atomic_facts``)."""
    for key, text in _object(value, name, where).items():
        if not isinstance(text, str):
            raise where.error(f"{name}.{key}", f"must be a string, got {kind(text)}")
    return value


def _keys(value: Any, name: str, where: Where) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise where.error(name, f"must be a list of strings, got {kind(value)}")
    return value


def _selected(value: Any, name: str, where: Where) -> list[str]:
    """The ``selected_facts`` list of a ``{"selected_facts": [...]}`` object."""
    return _keys(
        _object(value, name, where).get("selected_facts", []), f"{name}.selected_facts", where
    )


class _Facts:
    """Resolves ``selected_facts`` entries (keys or texts) to claim indices."""

    def __init__(self, facts: dict[str, str]) -> None:
        self.index = {key: i for i, key in enumerate(facts)}
        self.by_text: dict[str, int] = {}
        for i, text in enumerate(facts.values()):
            self.by_text.setdefault(text.strip(), i)
        self.unresolved = 0

    def flags(self, entries: list[str]) -> list[bool]:
        chosen = [False] * len(self.index)
        for entry in entries:
            i = self.index.get(entry, self.by_text.get(entry.strip()))
            if i is None:
                self.unresolved += 1
            else:
                chosen[i] = True
        return chosen


def _chunk(key: str, name: str, where: Where, k: int) -> int:
    """The 0-based position of a ``Chunk N`` key (N in 1..k)."""
    match = _CHUNK.fullmatch(key)
    if match is None or not 1 <= int(match.group(1)) <= k:
        raise where.error(name, f"expected 'Chunk N' with N in 1..{k}, got {key!r}")
    return int(match.group(1)) - 1


def _record(
    obj: Any,
    where: Where,
    chunks: Mapping[str, Mapping[str, list[str]]] | None,
    retriever: str | None,
    k: int,
    model: str | None,
) -> Context:
    if not isinstance(obj, dict):
        raise UDCGInputError(
            f"must be an object (one record per query), got {kind(obj)}",
            path=where.path,
            field=where.prefix.rstrip("."),
        )
    for key in ("qid", "decomposed_query"):
        if key not in obj:
            raise where.error(key, "missing (every record needs qid and decomposed_query)")
    if "relevance_check" not in obj and "query_chunk_coverage" not in obj:
        raise where.error("relevance_check", "missing (and no query_chunk_coverage either)")
    qid = obj["qid"]
    if not isinstance(qid, (str, int)) or isinstance(qid, bool):
        raise where.error("qid", f"must be a string, got {kind(qid)}")
    qid = str(qid)
    subqueries = _text_map(obj["decomposed_query"], "decomposed_query", where)
    sub_index = {key: s for s, key in enumerate(subqueries)}
    if "relevance_check" in obj:
        checks = _object(obj["relevance_check"], "relevance_check", where)
        prefix = "relevance_check."
    else:  # evaluate_retriever.py: the coverage alone, at the top level
        checks, prefix = {"query_chunk_coverage": obj["query_chunk_coverage"]}, ""
    recorded = obj.get("retriever")
    if retriever is not None and recorded is not None and recorded != retriever:
        raise where.error(
            "retriever",
            f"the record's coverage was judged on {recorded!r} chunks, not on the "
            f"{retriever!r} chunks --retriever (retriever=) names: leave it out, or import "
            f"results judged on {retriever!r} chunks",
        )
    run = retriever or recorded or DEFAULT_RETRIEVER
    if not isinstance(run, str):
        raise where.error("retriever", f"must be a string, got {kind(run)}")
    texts: list[str | None] = [None] * k
    if chunks is not None:
        if qid not in chunks:
            raise where.error("qid", f"{qid!r} is not in the benchmark file")
        if run not in chunks[qid]:
            raise where.error("qid", f"the benchmark file has no {run} chunks for {qid!r}")
        texts = list(chunks[qid][run][:k])
    n_chunks = len(texts)

    covers = [[False] * len(subqueries) for _ in range(n_chunks)]
    coverage = _object(
        checks.get("query_chunk_coverage", {}), f"{prefix}query_chunk_coverage", where
    )
    for chunk_key, listed_keys in coverage.items():
        name = f"{prefix}query_chunk_coverage.{chunk_key}"
        j = _chunk(chunk_key, name, where, n_chunks)
        for sq_key in _keys(listed_keys, name, where):
            if sq_key not in sub_index:
                raise where.error(name, f"names {sq_key!r}, which decomposed_query does not hold")
            covers[j][sub_index[sq_key]] = True
    passages = [Passage(str(j + 1), texts[j], covers=covers[j]) for j in range(n_chunks)]
    extra: dict[str, Any] = {}
    if "metrics" in obj:
        extra["release_metrics"] = obj["metrics"]
    ctx = {"run": run, "question": obj.get("query"), "subqueries": list(subqueries.values())}
    if not isinstance(ctx["question"], (str, type(None))):
        raise where.error("query", f"must be a string, got {kind(ctx['question'])}")

    name = model or obj.get("target_model")
    if name is None or "atomic_facts" not in obj:
        return Context(qid, passages, **ctx, extra=extra, source=where.source())
    if not isinstance(name, str):
        raise where.error("target_model", f"must be a string, got {kind(name)}")
    outcome = _outcome(obj, checks, list(subqueries), n_chunks, where)
    return Context(
        qid, passages, **ctx, outcomes={name: outcome}, extra=extra, source=where.source()
    )


def _outcome(
    obj: dict[str, Any], checks: dict[str, Any], sq_keys: list[str], n_chunks: int, where: Where
) -> dict[str, Any]:
    """``outcomes[MODEL]`` of a record: the answer, its claims and the three answer checks."""
    sub_index = {key: s for s, key in enumerate(sq_keys)}
    facts = _Facts(_text_map(obj["atomic_facts"], "atomic_facts", where))
    base = "relevance_check.query_fact_coverage"
    labels = _object(checks.get("query_fact_coverage", {}), base, where)
    covered: list[bool | None] = []
    for sq_key in sq_keys:
        status = labels.get(sq_key)
        if status is not None and status not in ("Covered", "Not covered"):
            raise where.error(
                f"{base}.{sq_key}", f"must be 'Covered' or 'Not covered', got {kind(status)}"
            )
        covered.append(None if status is None else status == "Covered")
    relevance = [[False] * len(sq_keys) for _ in facts.index]
    base = "relevance_check.query_fact_relevance"
    for sq_key, value in _object(checks.get("query_fact_relevance", {}), base, where).items():
        if sq_key not in sub_index:
            raise where.error(f"{base}.{sq_key}", "names no sub-query of decomposed_query")
        for f, flag in enumerate(facts.flags(_selected(value, f"{base}.{sq_key}", where))):
            relevance[f][sub_index[sq_key]] = flag
    support = [[False] * n_chunks for _ in facts.index]
    base = "relevance_check.chunk_fact_relevance"
    for chunk_key, value in _object(checks.get("chunk_fact_relevance", {}), base, where).items():
        j = _chunk(chunk_key, f"{base}.{chunk_key}", where, n_chunks)
        for f, flag in enumerate(facts.flags(_selected(value, f"{base}.{chunk_key}", where))):
            support[f][j] = support[f][j] or flag
    return {
        "answer": obj.get("model_answer"),
        "claims": list(obj["atomic_facts"].values()),
        "subquery_covered": covered,
        "claim_relevance": relevance,
        "claim_support": support,
        "unresolved_facts": facts.unresolved,
    }


def _benchmark_chunks(path: PathType) -> dict[str, dict[str, list[str]]]:
    """``{qid: {retriever: chunk texts}}`` of a benchmark file's ``retrieved_chunk``."""
    items = load_json(path)
    if not isinstance(items, list):
        raise UDCGInputError(f"expected a JSON list of records, got {kind(items)}", path=path)
    out: dict[str, dict[str, list[str]]] = {}
    for i, item in enumerate(items):
        where = Where(path, None, prefix=f"[{i}].")
        if not isinstance(item, dict):
            raise UDCGInputError(f"must be an object, got {kind(item)}", path=path, field=f"[{i}]")
        lists = _object(item.get("retrieved_chunk"), "retrieved_chunk", where)
        chunks = {
            name: _keys(texts, f"retrieved_chunk.{name}", where) for name, texts in lists.items()
        }
        qid = str(item.get("qid"))
        if out.setdefault(qid, chunks) != chunks:  # which list the run read, nothing says
            raise UDCGInputError(
                f"qid {qid!r} is given twice, with other retrieved chunks",
                path=path,
                field=f"[{i}].qid",
            )
    return out


def read_release_results(
    path: PathType,
    benchmark: PathType | None = None,
    *,
    retriever: str | None = None,
    k: int = RELEASE_TOP_K,
    model: str | None = None,
) -> list[Context]:
    """Contexts from a Q-CARE release results file (a JSON list, ``evaluate.py``'s or
    ``evaluate_retriever.py``'s output).

    ``benchmark``: the benchmark file the run read (``data/testbed/*.json``), for the chunk
    texts of ``retrieved_chunk[retriever]`` (without it, passages have no text);
    ``retriever``: the run name and the benchmark's chunk list (default: the record's
    ``retriever``, else ``BM25``, evaluate.py's default; a record naming another retriever is
    refused: its coverage was judged on that one's chunks); ``k``: chunks judged per query;
    ``model``: the outcome key (default: each record's ``target_model``).

    Examples:
        One sub-query of two covered by chunk 2, one claim supported by chunk 2:

        >>> import json, tempfile
        >>> from pathlib import Path
        >>> record = {"qid": "q1", "query": "who and when?", "target_model": "m",
        ...     "model_answer": "Austen.", "decomposed_query": {"Core subquery1": "who?",
        ...     "Core subquery2": "when?"}, "atomic_facts": {"Atomic fact1": "Austen wrote it."},
        ...     "relevance_check": {"query_chunk_coverage": {"Chunk 2": ["Core subquery1"]},
        ...         "chunk_fact_relevance": {"Chunk 2": {"selected_facts": ["Atomic fact1"]}},
        ...         "query_fact_relevance": {
        ...             "Core subquery1": {"selected_facts": ["Atomic fact1"]}},
        ...         "query_fact_coverage": {"Core subquery1": "Covered",
        ...                                 "Core subquery2": "Not covered"}}}
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "results.json"
        ...     _ = path.write_text(json.dumps([record]))
        ...     (ctx,) = read_release_results(path)
        >>> [p.covers for p in ctx.passages[:3]], ctx.outcomes["m"]["subquery_covered"]
        ([[False, False], [True, False], [False, False]], [True, False])
    """
    positive_int(k, "k")
    items = load_json(path)
    if not isinstance(items, list):
        raise UDCGInputError(f"expected a JSON list of records, got {kind(items)}", path=path)
    chunks = None if benchmark is None else _benchmark_chunks(benchmark)
    return [
        _record(item, Where(path, None, prefix=f"[{i}]."), chunks, retriever, k, model)
        for i, item in enumerate(items)
    ]


#: The release's datasets (``qid`` group, column) of its close- and open-ended splits.
CLOSE_DATASETS = (
    ("nq_", "NQ"),
    ("newsqa_", "NewsQA"),
    ("hotpotqa_", "HotpotQA"),
    ("finqa_", "FinQA"),
)
OPEN_DATASETS = (
    ("PubMedQA_", "PubMedQA"),
    ("science-", "LoTTE-Sci."),
    ("technology-", "LoTTE-Tech."),
    ("eli5_", "ELI5"),
)
#: The release's target models, by group, in its table's order.
MODEL_GROUPS = {
    "Open Source": ("Qwen3_4B", "Qwen3_30B", "Gemma3_4B", "Gemma3_27B", "GPT-oss_20B"),
    "Proprietary": ("Gemini-2.5-pro", "Claude-Sonnet", "GPT-5"),
}
#: The columns of ``metric_table_all.csv``.
TABLE_HEADER = (
    "Group",
    "LLM",
    "Metric",
    *(label for _, label in CLOSE_DATASETS),
    "Close Avg.",
    *(label for _, label in OPEN_DATASETS),
    "Open Avg.",
)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def annotator_coverage(ctx: Context, model: str) -> Context:
    """``ctx`` with ``covers`` from annotator ``model`` where its passages hold that
    annotator's labels (``covers_by_annotator``), else ``ctx`` unchanged.

    Examples:
        >>> p = Passage("1", covers=[None], extra={"covers_by_annotator": {"GPT-5": [True]}})
        >>> annotator_coverage(Context("q", [p]), "GPT-5").passages[0].covers
        [True]
    """
    labels = [p.extra.get("covers_by_annotator", {}).get(model) for p in ctx.passages]
    if any(label is None for label in labels):
        return ctx
    passages = [
        replace(p, covers=list(label)) for p, label in zip(ctx.passages, labels, strict=True)
    ]
    return replace(ctx, passages=passages)


def release_table(
    contexts: Sequence[Context],
    models: Sequence[str] | None = None,
    metrics: Sequence[str] = GENERATOR_METRICS,
    *,
    k: int | None = None,
    gain: str = "linear",
) -> list[list[Any]]:
    """The rows of the release's ``metric_table_all.csv`` (:data:`TABLE_HEADER`) from
    labelled contexts: per target model (``outcomes[model]``; default: every model found, the
    release's first) and metric, the mean over each dataset's queries (the dataset is
    ``extra["dataset"]``, else the ``qid``'s group), ``Close Avg.`` and ``Open Avg.`` the means
    of the dataset columns; then one ``Overall`` row per metric, the mean over models. Values
    are floats (``None`` when nothing is defined); contexts of other datasets are left out.
    A model's C-Prec and C-nDCG use the coverage of the annotator named after it when the
    passages hold it (``covers_by_annotator``), as the release scores each model with its own
    ``[Chunk]`` file; missing values (no claims, unlabelled checks) are left out of the means
    where the release counts them as 0.

    Examples:
        Two NQ queries with one claim each, one of them supported:

        >>> from udcg.io.contexts.model import Context, Passage
        >>> def ctx(qid, supported):
        ...     answer = {"claims": ["A."], "claim_support": [[supported]]}
        ...     return Context(qid, [Passage("1")], subqueries=["who?"], outcomes={"GPT-5": answer})
        >>> (row, overall) = release_table([ctx("nq_1", True), ctx("nq_2", False)],
        ...                                metrics=["Verifiableness"])
        >>> row[:5], row[7]
        (['Proprietary', 'GPT-5', 'Verifiableness', 0.5, None], 0.5)
        >>> overall[:4]
        ['', 'Verifiableness', 'Overall', 0.5]
    """
    if models is None:
        models = release_order(m for c in contexts for m in c.outcomes)
    values: dict[str, dict[str, list[tuple[str, float | None]]]] = {}
    for model in models:
        chosen = [annotator_coverage(c, model) for c in contexts if model in c.outcomes]
        scores = qcare_scores(chosen, model, k, gain=gain)
        datasets = [str(c.extra.get("dataset") or dataset_group(c.qid)) for c in chosen]
        values[model] = {}
        for metric in metrics:
            data, missing = scores.values[metric], np.ma.getmaskarray(scores.values[metric])
            values[model][metric] = [
                (name, None if missing[i] else float(data.data[i]))
                for i, name in enumerate(datasets)
            ]
    return table_rows(values, metrics)


def release_order(models: Iterable[str]) -> list[str]:
    """The distinct ``models`` in the release's table order (:data:`MODEL_GROUPS`), then the
    others in the order given.

    Examples:
        >>> release_order(["GPT-5", "mine", "Qwen3_4B", "GPT-5"])
        ['Qwen3_4B', 'GPT-5', 'mine']
    """
    found = dict.fromkeys(models)
    known = [m for group in MODEL_GROUPS.values() for m in group if m in found]
    return known + [m for m in found if m not in known]


def table_rows(
    values: Mapping[str, Mapping[str, Sequence[tuple[str, float | None]]]],
    metrics: Sequence[str],
) -> list[list[Any]]:
    """:data:`TABLE_HEADER` rows from per-query values ``values[model][metric]`` = a list of
    ``(dataset group, value or None)``: per model and metric the mean over each dataset's
    defined values, ``Close Avg.`` and ``Open Avg.`` the means of the dataset columns, then
    one ``Overall`` row per metric (the mean over models of each column).

    Examples:
        >>> rows = table_rows({"GPT-5": {"Completeness": [("nq_", 1.0), ("nq_", 0.5)]}},
        ...                   ["Completeness"])
        >>> rows[0][:5], rows[0][7]
        (['Proprietary', 'GPT-5', 'Completeness', 0.75, None], 0.75)
        >>> rows[1][:4]
        ['', 'Completeness', 'Overall', 0.75]
    """
    group_of = {m: name for name, group in MODEL_GROUPS.items() for m in group}
    columns = CLOSE_DATASETS + OPEN_DATASETS
    rows: list[list[Any]] = []
    cells: dict[str, list[list[float]]] = {m: [[] for _ in columns] for m in metrics}
    for model, by_metric in values.items():
        for metric in metrics:
            means = []
            for col, (prefix, _) in enumerate(columns):
                picked = [v for name, v in by_metric[metric] if name == prefix and v is not None]
                means.append(_mean(picked))
                if means[-1] is not None:
                    cells[metric][col].append(means[-1])
            rows.append([group_of.get(model, ""), model, metric, *_with_averages(means)])
    for metric in metrics:
        overall = [_mean(v) for v in cells[metric]]
        rows.append(["", metric, "Overall", *_with_averages(overall)])
    return rows


def _with_averages(means: list[float | None]) -> list[float | None]:
    """The dataset means with ``Close Avg.`` and ``Open Avg.`` inserted after each split."""
    n = len(CLOSE_DATASETS)
    close, opened = means[:n], means[n:]
    average = [_mean([v for v in part if v is not None]) for part in (close, opened)]
    return [*close, average[0], *opened, average[1]]


def write_release_table(path: PathType, rows: Sequence[Sequence[Any]], digits: int = 3) -> None:
    """Write :func:`release_table` rows as CSV with :data:`TABLE_HEADER`, values rounded to
    ``digits`` as the release writes them (``0.85``, not ``0.850``; empty when ``None``):
    numpy's rounding (``0.8525`` gives ``0.852``, where Python's ``round`` gives ``0.853``).

    Examples:
        >>> import io
        >>> from contextlib import redirect_stdout
        >>> with redirect_stdout(io.StringIO()) as out:
        ...     write_release_table("-", [["", "Completeness", "Overall", 0.8500004] + [None] * 9])
        >>> out.getvalue().splitlines()[1]
        ',Completeness,Overall,0.85,,,,,,,,,'
    """
    with atomic_write(path) as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(TABLE_HEADER)
        for row in rows:
            writer.writerow(
                [
                    "" if v is None else float(np.round(v, digits)) if isinstance(v, float) else v
                    for v in row
                ]
            )
