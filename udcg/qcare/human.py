"""Read the human annotations of the Q-CARE release (github DISL-Lab/Q-CaRE-COLM-26,
``data/human_labels/mturk/<TargetModel>/*.csv``) into contexts with human labels.

The files (read for the format only) are UTF-8 CSV with a byte-order mark; every row is one
annotation batch of items (11 in the release), one of them an injected attention check (its
``qid`` and ``idx`` are ``"attention"``, its ``attention_check`` entry ``"1"``). List cells are
Python literals, the i-th element of a list column belonging to the i-th item.

* ``[Chunk]`` rows hold one query and its retrieved chunks, one chunk per item. The labels
  are two objects keyed by ``Chunk N``, N the 0-based position of the item among the row's
  items (the attention item counts): ``query_chunk_coverage_check`` lists the sub-queries
  (``Core subqueryK``) a chunk covers, ``chunk_fact_relevance_check`` the claims
  (``Atomic factK`` or the claim's text) it supports.
* ``[Query]`` rows hold one query per item, each with its ten chunks. The labels are
  ``query_fact_coverage_check``, an object keyed by ``general_<item>_<K>`` (``"Covered"`` or
  ``"Not covered"``: does the answer cover sub-query K of item ``item``), and
  ``query_fact_relevance_check``, per item a list per sub-query of the claims relevant to it.

A row's kind is read from its cells (the label columns that are objects). The target model
whose answer was judged comes from the file name (``..._annotation_<decomposer>_<Model>_
reasoning.csv``) or the ``model`` argument. Each file is one annotator's pass: the annotator
of a label is named after the file's target model (``GPT-5``; ``GPT-5#2`` when one file labels
a query twice). Labels on the attention item are dropped and counted.

:func:`human_contexts` merges the annotations into one context per ``qid``:

* ``subqueries``, ``question`` and the passages (``doc_id`` the 1-based position, ``text``);
* ``passages[j].extra["covers_by_annotator"]``: ``{annotator: [bool per sub-query]}``;
  ``covers_prob`` the annotators' mean (the field fractional coverage reads) and ``covers``
  their majority (``null`` on a tie);
* ``outcomes[model]``: ``claims``, ``subquery_covered`` and ``claim_relevance`` (from the
  model's ``[Query]`` file), ``claim_support`` (from its ``[Chunk]`` file), each the
  majority of that model's annotators;
* ``extra["split"]`` (``close_ended``, from the file name) and ``extra["dataset"]`` (the
  release's dataset group: the ``qid`` up to its first ``_`` or ``-``, e.g. ``nq_``).

A malformed cell is an error naming the file, the line where the row starts and the column
(with the item index).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from udcg.errors import UDCGInputError
from udcg.io.contexts.model import Context, Passage
from udcg.io.files import PathType, read_text

__all__ = [
    "Annotation",
    "AnnotationReport",
    "dataset_group",
    "human_contexts",
    "read_annotation_csv",
    "read_human_labels",
]

ATTENTION = "attention"
#: The run of the contexts (the release's human study labels BM25's chunks).
RELEASE_RUN = "BM25"
_NAME = re.compile(
    r"\[(?:Query|Chunk)\]test-(?P<split>.+?)_annotation_(?P<decomposer>[^_]+)_(?P<model>.+?)"
    r"_reasoning$"
)
_CHUNK = re.compile(r"Chunk (\d+)")
_SUBQUERY = re.compile(r"Core subquery(\d+)")
_FACT = re.compile(r"Atomic fact(\d+)")
_GENERAL = re.compile(r"general_(\d+)_(\d+)")
_DATASET = re.compile(r"[^_-]*[_-]")
_PLAIN = re.compile(r"[^,\r\n]*")
COVERED = {"Covered": True, "Not covered": False}
REQUIRED = ("qid", "decomposed_query", "atomic_facts", "retrieved_chunk")
CHUNK_LABELS = ("query_chunk_coverage_check", "chunk_fact_relevance_check")
QUERY_LABELS = ("query_fact_coverage_check", "query_fact_relevance_check")


@dataclass
class Annotation:
    """One annotator's labels of one query from one row of one file.

    ``kind`` is ``"chunk"`` (``labels``: ``covers[chunk][sub-query]`` and
    ``claim_support[claim][chunk]``) or ``"query"`` (``subquery_covered[sub-query]``, ``None``
    when unlabelled, and ``claim_relevance[claim][sub-query]``).

    Examples:
        >>> a = Annotation("chunk", "nq_test_1", "GPT-5", "GPT-5", None, "who?", ["who?"],
        ...                ["A did it."], ["chunk one"], {"covers": [[True]]}, ("f.csv", 2))
        >>> a.kind, a.labels["covers"]
        ('chunk', [[True]])
    """

    kind: str
    qid: str
    model: str
    annotator: str
    split: str | None
    question: str | None
    subqueries: list[str]
    claims: list[str]
    chunks: list[str]
    labels: dict[str, Any]
    source: tuple[str, int]


@dataclass
class AnnotationReport:
    """Counts of a read: files, rows, annotations (one query of one row), attention items
    dropped, labels given on attention items (dropped too) and claim references matching no
    claim (ignored).

    Examples:
        >>> AnnotationReport(files=1, rows=2).attention_items
        0
    """

    files: int = 0
    rows: int = 0
    annotations: int = 0
    attention_items: int = 0
    attention_labels: int = 0
    unresolved_facts: int = 0
    annotators: Counter = field(default_factory=Counter)


def dataset_group(qid: str) -> str:
    """The release's dataset group of a ``qid``: its text up to the first ``_`` or ``-``.

    Examples:
        >>> dataset_group("nq_test_812"), dataset_group("science-test-4"), dataset_group("x")
        ('nq_', 'science-', 'x')
    """
    match = _DATASET.match(qid)
    return qid if match is None else match.group()


def _cells(text: str, path: PathType) -> Iterator[tuple[int, list[str]]]:
    """``(line where the record starts, cells)`` of each CSV record (RFC 4180 quoting)."""
    i, n, line = 0, len(text), 1
    while i < n:
        start, cells = line, []
        while True:
            if text.startswith('"', i):
                parts, i = [], i + 1
                while True:
                    j = text.find('"', i)
                    if j < 0:
                        raise UDCGInputError("a quoted cell is never closed", path=path, line=line)
                    parts.append(text[i:j])
                    line += text.count("\n", i, j)
                    if text.startswith('"', j + 1):
                        parts.append('"')
                        i = j + 2
                    else:
                        i = j + 1
                        break
                value = "".join(parts)
                if i < n and text[i] not in ",\r\n":
                    raise UDCGInputError(
                        f"text after a closing quote in cell {len(cells) + 1}", path=path, line=line
                    )
            else:
                match = _PLAIN.match(text, i)
                assert match is not None
                value, i = match.group(), match.end()
            cells.append(value)
            if text.startswith(",", i):
                i += 1
                continue
            i += 2 if text.startswith("\r\n", i) else 1
            line += 1
            break
        if cells != [""]:
            yield start, cells


class _Row:
    """One record with its header: parses cells as Python literals, errors located."""

    def __init__(self, path: PathType, line: int, values: dict[str, str]) -> None:
        self.path, self.line, self.values = path, line, values

    def error(self, column: str, message: str) -> UDCGInputError:
        return UDCGInputError(message, path=self.path, line=self.line, field=column)

    def literal(self, column: str) -> Any:
        text = self.values.get(column)
        if text is None:
            raise self.error(column, "missing column")
        try:
            return ast.literal_eval(text.strip())
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            shown = text.strip()[:40]
            raise self.error(column, f"not a Python literal: {shown!r}") from None

    def items(self, column: str, n: int) -> list[Any]:
        value = self.literal(column)
        if not isinstance(value, list) or len(value) != n:
            raise self.error(column, f"must be a list of {n} items, one per qid")
        return value


def _strings(value: Any, row: _Row, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise row.error(name, "must be a list of strings")
    return value


def _number(key: str, pattern: re.Pattern[str], row: _Row, name: str, limit: int) -> int:
    """The number N of a ``<prefix>N`` key, checked to be in 1..limit (0..limit-1 for
    ``Chunk N``)."""
    match = pattern.fullmatch(key) if isinstance(key, str) else None
    low = 0 if pattern is _CHUNK else 1
    high = limit - 1 if pattern is _CHUNK else limit
    if match is None or not low <= int(match.group(1)) <= high:
        what = pattern.pattern.replace(r"(\d+)", "N")
        raise row.error(name, f"expected '{what}' with N in {low}..{high}, got {key!r}")
    return int(match.group(1))


class _Claims:
    """Resolves claim references (``Atomic factK`` or the claim's text) to claim indices."""

    def __init__(self, claims: list[str], report: AnnotationReport) -> None:
        self.by_text: dict[str, int] = {}
        for i, text in enumerate(claims):
            self.by_text.setdefault(text.strip(), i)
        self.n, self.report = len(claims), report

    def index(self, ref: str) -> int | None:
        match = _FACT.fullmatch(ref.strip())
        if match is not None and 1 <= int(match.group(1)) <= self.n:
            return int(match.group(1)) - 1
        found = self.by_text.get(ref.strip())
        if found is None:
            self.report.unresolved_facts += 1
        return found


def _selected(value: Any, row: _Row, name: str) -> list[str]:
    """A list of claim references, bare or as ``{"selected_facts": [...]}``."""
    if isinstance(value, dict):
        value = value.get("selected_facts", [])
    return _strings(value, row, name)


def _chunk_row(
    row: _Row, qids: list[str], attention: set[int], report: AnnotationReport
) -> tuple[list[str], list[str], list[str], dict[str, Any]]:
    """Sub-queries, claims, chunk texts and labels of a ``[Chunk]`` row."""
    n = len(qids)
    kept = [i for i in range(n) if i not in attention]
    decompositions = row.items("decomposed_query", n)
    facts = row.items("atomic_facts", n)
    texts = row.items("retrieved_chunk", n)
    first = kept[0]
    subqueries = _strings(decompositions[first], row, f"decomposed_query[{first}]")
    claims = _strings(facts[first], row, f"atomic_facts[{first}]")
    for i in kept:
        if decompositions[i] != subqueries or facts[i] != claims:
            raise row.error(
                f"decomposed_query[{i}]",
                "items of one [Chunk] row must share the query's sub-queries and claims",
            )
        if not isinstance(texts[i], str):
            raise row.error(f"retrieved_chunk[{i}]", "must be a string (the item's chunk)")
    position = {item: j for j, item in enumerate(kept)}
    covers = [[False] * len(subqueries) for _ in kept]
    support = [[False] * len(kept) for _ in claims]
    resolve = _Claims(claims, report)
    for column in CHUNK_LABELS:
        labels = row.literal(column)
        if not isinstance(labels, dict):
            raise row.error(column, "must be an object keyed by 'Chunk N'")
        for key, value in labels.items():
            name = f"{column}[{key!r}]"
            item = _number(key, _CHUNK, row, name, n)
            if item in attention:
                report.attention_labels += 1
                continue
            j = position[item]
            if column == "query_chunk_coverage_check":
                for ref in _strings(value, row, name):
                    covers[j][_number(ref, _SUBQUERY, row, name, len(subqueries)) - 1] = True
            else:
                for ref in _selected(value, row, name):
                    f = resolve.index(ref)
                    if f is not None:
                        support[f][j] = True
    chunks = [texts[i] for i in kept]
    return subqueries, claims, chunks, {"covers": covers, "claim_support": support}


def _query_labels(
    row: _Row,
    item: int,
    subqueries: list[str],
    claims: list[str],
    relevance: Any,
    coverage: dict[tuple[int, int], bool],
    report: AnnotationReport,
) -> dict[str, Any]:
    """``subquery_covered`` and ``claim_relevance`` of one item of a ``[Query]`` row."""
    n_sub = len(subqueries)
    covered: list[bool | None] = [coverage.get((item, s + 1)) for s in range(n_sub)]
    extra = sorted(k for i, k in coverage if i == item and k > n_sub)
    if extra:
        raise row.error(
            f"query_fact_coverage_check['general_{item}_{extra[0]}']",
            f"names no sub-query of item {item} (it has {n_sub})",
        )
    name = f"query_fact_relevance_check[{item}]"
    grid = [[False] * n_sub for _ in claims]
    resolve = _Claims(claims, report)
    if isinstance(relevance, dict):  # the pipeline's layout: {"Core subqueryK": {...}}
        per_sub: list[Any] = [[] for _ in range(n_sub)]
        for key, value in relevance.items():
            per_sub[_number(key, _SUBQUERY, row, name, n_sub) - 1] = _selected(value, row, name)
    elif isinstance(relevance, list) and len(relevance) == n_sub:
        per_sub = relevance
    else:
        raise row.error(name, f"must be a list of {n_sub} claim lists, one per sub-query")
    for s, refs in enumerate(per_sub):
        for ref in _selected(refs, row, f"{name}[{s}]"):
            f = resolve.index(ref)
            if f is not None:
                grid[f][s] = True
    return {"subquery_covered": covered, "claim_relevance": grid}


def _query_row(
    row: _Row, qids: list[str], attention: set[int], report: AnnotationReport
) -> Iterator[tuple[str, str | None, list[str], list[str], list[str], dict[str, Any]]]:
    """Per item of a ``[Query]`` row: qid, question, sub-queries, claims, chunks, labels."""
    n = len(qids)
    questions = row.items("query", n) if "query" in row.values else [None] * n
    decompositions = row.items("decomposed_query", n)
    facts = row.items("atomic_facts", n)
    texts = row.items("retrieved_chunk", n)
    relevance = row.items("query_fact_relevance_check", n)
    coverage: dict[tuple[int, int], bool] = {}
    labels = row.literal("query_fact_coverage_check")
    if not isinstance(labels, dict):
        raise row.error("query_fact_coverage_check", "must be an object keyed by general_<i>_<K>")
    for key, value in labels.items():
        match = _GENERAL.fullmatch(key) if isinstance(key, str) else None
        name = f"query_fact_coverage_check[{key!r}]"
        if match is None or int(match.group(1)) >= n or int(match.group(2)) < 1:
            raise row.error(name, f"expected 'general_<item>_<K>' with item in 0..{n - 1}, K >= 1")
        item = int(match.group(1))
        if item in attention:
            report.attention_labels += 1
            continue
        if value not in COVERED:
            raise row.error(name, f"must be 'Covered' or 'Not covered', got {value!r}")
        coverage[(item, int(match.group(2)))] = COVERED[value]
    for i in range(n):
        if i in attention:
            continue
        subqueries = _strings(decompositions[i], row, f"decomposed_query[{i}]")
        claims = _strings(facts[i], row, f"atomic_facts[{i}]")
        chunks = _strings(texts[i], row, f"retrieved_chunk[{i}]")
        question = questions[i]
        if question is not None and not isinstance(question, str):
            raise row.error(f"query[{i}]", "must be a string")
        found = _query_labels(row, i, subqueries, claims, relevance[i], coverage, report)
        yield qids[i], question, subqueries, claims, chunks, found


def _file_info(path: PathType, model: str | None) -> tuple[str, str | None]:
    """Target model and split from the file name (``model`` wins when given)."""
    name = Path(str(path)).name.removesuffix(".gz").removesuffix(".csv")
    match = _NAME.fullmatch(name)
    split = match.group("split") if match else None
    if model is None:
        if match is None:
            raise UDCGInputError(
                "cannot tell the target model from the file name "
                "([Chunk]test-<split>_annotation_<decomposer>_<Model>_reasoning.csv); name it",
                path=path,
            )
        model = match.group("model")
    return model, split


def read_annotation_csv(
    path: PathType, *, model: str | None = None, report: AnnotationReport | None = None
) -> list[Annotation]:
    """The annotations of one ``[Query]`` or ``[Chunk]`` CSV file; ``model``: the target
    model whose answers it judges (default: from the file name); ``report`` collects counts.

    Examples:
        A [Chunk] row: one query, its two chunks and the attention item between them; the
        annotator says chunk 2 (item 2) covers the sub-query and supports the claim:

        >>> import csv, io, tempfile
        >>> from pathlib import Path
        >>> cells = {"idx": ["0", "attention", "0"], "qid": ["q1", "attention", "q1"],
        ...     "query": ["who?", "x?", "who?"], "decomposed_query": [["who?"], ["x?"], ["who?"]],
        ...     "atomic_facts": [["A."], ["B."], ["A."]], "retrieved_chunk": ["c1", "att", "c2"],
        ...     "query_chunk_coverage_check": {"Chunk 2": ["Core subquery1"]},
        ...     "chunk_fact_relevance_check": {"Chunk 2": ["Atomic fact1"]},
        ...     "attention_check": ["0", "1", "0"]}
        >>> text = io.StringIO()
        >>> csv.writer(text).writerows([list(cells), [repr(v) for v in cells.values()]])
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "[Chunk]test-close_ended_annotation_D_M_reasoning.csv"
        ...     _ = path.write_text("\\ufeff" + text.getvalue(), encoding="utf-8")
        ...     (a,) = read_annotation_csv(path)
        >>> a.model, a.split, a.chunks
        ('M', 'close_ended', ['c1', 'c2'])
        >>> a.labels
        {'covers': [[False], [True]], 'claim_support': [[False, True]]}
    """
    report = AnnotationReport() if report is None else report
    model, split = _file_info(path, model)
    records = _cells(read_text(path), path)
    first = next(records, None)
    if first is None:
        raise UDCGInputError("empty file (expected a header line)", path=path, line=1)
    header = [h.strip() for h in first[1]]
    for name in REQUIRED:
        if name not in header:
            raise UDCGInputError(f"missing column {name!r}", path=path, line=1)
    report.files += 1
    seen: Counter = Counter()
    out: list[Annotation] = []
    for line, cells in records:
        if len(cells) != len(header):
            raise UDCGInputError(
                f"{len(cells)} cells where the header has {len(header)}", path=path, line=line
            )
        row = _Row(path, line, dict(zip(header, cells, strict=True)))
        report.rows += 1
        qids = [str(q) for q in _strings(row.literal("qid"), row, "qid")]
        flags = row.items("attention_check", len(qids)) if "attention_check" in header else []
        attention = {i for i, q in enumerate(qids) if q == ATTENTION}
        attention |= {i for i, flag in enumerate(flags) if str(flag) == "1"}
        report.attention_items += len(attention)
        if len(attention) == len(qids):
            raise row.error("qid", "a row with no item besides the attention check")
        kind = _kind(row)
        if kind == "chunk":
            names = {qids[i] for i in range(len(qids)) if i not in attention}
            if len(names) != 1:
                raise row.error("qid", f"a [Chunk] row holds one query, got {sorted(names)}")
            questions = row.items("query", len(qids)) if "query" in header else None
            first_item = min(set(range(len(qids))) - attention)
            question = questions[first_item] if questions else None
            subqueries, claims, chunks, labels = _chunk_row(row, qids, attention, report)
            items = [(qids[first_item], question, subqueries, claims, chunks, labels)]
        else:
            items = list(_query_row(row, qids, attention, report))
        for qid, question, subqueries, claims, chunks, labels in items:
            seen[(kind, qid)] += 1
            count = seen[(kind, qid)]
            annotator = model if count == 1 else f"{model}#{count}"
            report.annotators[annotator] += 1
            out.append(
                Annotation(
                    kind,
                    qid,
                    model,
                    annotator,
                    split,
                    question,
                    subqueries,
                    claims,
                    chunks,
                    labels,
                    (str(path), line),
                )
            )
    report.annotations += len(out)
    return out


def _kind(row: _Row) -> str:
    """``chunk`` when the chunk labels are objects, ``query`` when the query labels are."""
    is_object = {
        name: name in row.values and row.values[name].strip().startswith("{")
        for name in CHUNK_LABELS + QUERY_LABELS
    }
    chunk = all(is_object[n] for n in CHUNK_LABELS)
    query = is_object["query_fact_coverage_check"]
    if chunk == query:
        raise row.error(
            "query_chunk_coverage_check",
            "cannot tell a [Chunk] row (chunk labels are objects keyed by 'Chunk N') from a "
            "[Query] row (query_fact_coverage_check keyed by general_<i>_<K>)",
        )
    return "chunk" if chunk else "query"


def _majority(grids: Sequence[Any]) -> tuple[Any, Any]:
    """``(majority, mean)`` of nested boolean grids of one shape (``None`` entries skipped;
    a tie or no vote gives ``None``)."""
    if grids and isinstance(grids[0], list):
        pairs = [_majority([g[i] for g in grids]) for i in range(len(grids[0]))]
        return [m for m, _ in pairs], [p for _, p in pairs]
    votes = [bool(g) for g in grids if g is not None]
    if not votes:
        return None, None
    mean = sum(votes) / len(votes)
    return (None if mean == 0.5 else mean > 0.5), mean


def _same(a: Annotation, b: Annotation, what: str) -> None:
    if getattr(a, what) != getattr(b, what):
        path, line = b.source
        raise UDCGInputError(
            f"qid {b.qid!r}: its {what} differ from those at {a.source[0]}:{a.source[1]}",
            path=path,
            line=line,
            field="decomposed_query" if what == "subqueries" else "retrieved_chunk",
        )


def human_contexts(annotations: Iterable[Annotation], run: str = RELEASE_RUN) -> list[Context]:
    """One context per ``qid`` from annotations of any files (see the module's docstring).

    Examples:
        Two annotators of one chunk's coverage disagree: mean 0.5, majority a tie (null):

        >>> a = Annotation("chunk", "nq_1", "M1", "M1", "close_ended", "who?", ["who?"], ["A."],
        ...                ["c1"], {"covers": [[True]], "claim_support": [[True]]}, ("a.csv", 2))
        >>> b = Annotation("chunk", "nq_1", "M2", "M2", "close_ended", "who?", ["who?"], ["B."],
        ...                ["c1"], {"covers": [[False]], "claim_support": [[False]]}, ("b.csv", 2))
        >>> (ctx,) = human_contexts([a, b])
        >>> p = ctx.passages[0]
        >>> p.covers, p.extra["covers_prob"], p.extra["covers_by_annotator"]
        ([None], [0.5], {'M1': [True], 'M2': [False]})
        >>> ctx.outcomes["M2"], ctx.extra
        ({'claims': ['B.'], 'claim_support': [[False]]}, {'split': 'close_ended', 'dataset': 'nq_'})
    """
    by_qid: dict[str, list[Annotation]] = {}
    for a in annotations:
        by_qid.setdefault(a.qid, []).append(a)
    out = []
    for qid, group in by_qid.items():
        base = next((a for a in group if a.kind == "chunk"), group[0])
        for a in group:
            _same(base, a, "subqueries")
            _same(base, a, "chunks")
        chunk_labels = [a for a in group if a.kind == "chunk"]
        passages = []
        for j, text in enumerate(base.chunks):
            extra: dict[str, Any] = {}
            covers = None
            if chunk_labels:
                by_annotator = {a.annotator: a.labels["covers"][j] for a in chunk_labels}
                covers, mean = _majority(list(by_annotator.values()))
                extra = {"covers_prob": mean, "covers_by_annotator": by_annotator}
            passages.append(Passage(str(j + 1), text, covers=covers, extra=extra))
        outcomes: dict[str, dict[str, Any]] = {}
        for model in dict.fromkeys(a.model for a in group):
            mine = [a for a in group if a.model == model]
            claims = mine[0].claims
            for a in mine:
                _same(mine[0], a, "claims")
            outcome: dict[str, Any] = {"claims": claims}
            for kind, names in (
                ("query", ("subquery_covered", "claim_relevance")),
                ("chunk", ("claim_support",)),
            ):
                labelled = [a.labels for a in mine if a.kind == kind]
                for name in names if labelled else ():
                    outcome[name] = _majority([labels[name] for labels in labelled])[0]
            outcomes[model] = outcome
        extra = {"split": base.split} if base.split is not None else {}
        extra["dataset"] = dataset_group(qid)
        out.append(
            Context(
                qid,
                passages,
                run=run,
                question=base.question,
                subqueries=list(base.subqueries),
                outcomes=outcomes,
                extra=extra,
                source=base.source,
            )
        )
    return out


def read_human_labels(
    paths: Iterable[PathType], *, model: str | None = None, run: str = RELEASE_RUN
) -> tuple[list[Context], AnnotationReport]:
    """Contexts with the human labels of annotation CSV files (any mix of ``[Query]`` and
    ``[Chunk]`` files, of any target models), and the counts of the read.

    Examples:
        >>> contexts, report = read_human_labels([])
        >>> contexts, report.files
        ([], 0)
    """
    report = AnnotationReport()
    annotations: list[Annotation] = []
    for path in paths:
        annotations += read_annotation_csv(path, model=model, report=report)
    return human_contexts(annotations, run), report
