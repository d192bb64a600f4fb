"""Contexts from a team's own TREC run: each query's top-k documents joined with the question
(topics), the passage text (collection) and, optionally, reference answers and qrels.

* Order: per query, score descending, ties broken by document id descending (trec_eval's
  order, :func:`udcg.io.formats.trec.trec_order`; the rank column is ignored); queries in
  ascending id order. A query with fewer than k documents gives a shorter context.
* ``relevant``: qrels grade >= 1; an unjudged document is not relevant. A query without any
  judgement keeps ``relevant`` unset (unknown, not false).
* ``answers``: from the answers file when it has the query, else from the topics file.
* ``run``: ``run_name``, by default the tag column of the run file's first line.
* The title of a passage, when the collection gives one, is kept as ``extra["title"]``.

Memory is bounded by what the run's top k needs: the run is read first, then only its queries
are kept from the topics and only its documents from the collection, which is streamed. The
topics or the collection may also be a lookup, a callable from ids to ``{id: Topic}`` or
``{id: Document}`` that leaves out the ids it lacks (an ir_datasets dataset's queries and docs
store, :class:`udcg.io.formats.ir_datasets.IRDataset`); messages name it by ``str()``.
Errors: a ranked document missing from the collection, or a query missing from the topics, is
an error at its line of the run, which also counts the others missing
(``RUN:LINE: field 'doc_id': 'd17' is not in the collection FILE (4 more documents missing
too)``); the readers' errors are located in their own files.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Collection, Container, Iterator, Mapping
from operator import itemgetter

import numpy as np
import pyarrow as pa

from udcg.errors import UDCGInputError, UDCGWarning
from udcg.io.arrow import dictionary_encode, take, to_numpy
from udcg.io.contexts.model import Context, Passage
from udcg.io.files import PathType, open_binary
from udcg.io.formats.collection import Document, read_collection
from udcg.io.formats.topics import Topic, read_answers, read_topics
from udcg.io.formats.trec import (
    BOM,
    LINE_END,
    Qrels,
    Run,
    locate_duplicate,
    read_trec_qrels,
    read_trec_run,
    trec_order,
)
from udcg.io.joins.trec_contexts import judged_grades, run_line
from udcg.validation import positive_int

__all__ = ["build_run_contexts", "refuse_repeats", "run_tag", "top_k_rows"]

#: ids -> ``{id: entry}`` for the ids found (a file is read by its reader instead)
TopicSource = PathType | Callable[[Collection[str]], Mapping[str, Topic]]
CollectionSource = PathType | Callable[[Collection[str]], Mapping[str, Document]]


def _codes(ids: pa.Array) -> np.ndarray:
    """Integer codes of Arrow strings, plain or dictionary-encoded (equal ids, equal codes)."""
    return to_numpy(dictionary_encode(ids).indices).astype(np.int64)


def refuse_repeats(run: Run) -> np.ndarray:
    """The run's query codes, after refusing a document ranked twice for one query (an error
    at its line when the run was read from a file).

    Examples:
        >>> from udcg.io.formats.trec import run_from_dict
        >>> refuse_repeats(run_from_dict({"q2": {"d1": 1.0}, "q1": {"d1": 2.0}})).tolist()
        [0, 1]
    """
    queries, docs = _codes(run.qids), _codes(run.doc_ids)
    if len(np.unique(queries * (int(docs.max(initial=0)) + 1) + docs)) < len(run):
        locate_duplicate(run.source, "run")
        raise UDCGInputError("a document is ranked twice for one query", field="doc_id")
    return queries


def top_k_rows(run: Run, k: int) -> np.ndarray:
    """Row indices of each query's first ``k`` documents in trec_eval order, queries in
    ascending id order. A document ranked twice for one query is an error at its line.

    Examples:
        Rows of the run file: q1's best document (row 1), then q2's (row 0):

        >>> import tempfile
        >>> from pathlib import Path
        >>> from udcg.io.formats.trec import read_trec_run
        >>> lines = "q2 Q0 d1 1 3 bm25\\nq1 Q0 d1 1 2 bm25\\nq1 Q0 d2 2 1 bm25\\n"
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "bm25.run").write_text(lines)
        ...     run = read_trec_run(Path(folder) / "bm25.run")
        >>> top_k_rows(run, k=1).tolist()
        [1, 0]
    """
    queries = refuse_repeats(run)
    order = trec_order(run.qids, run.scores, run.doc_ids)
    grouped = queries[order]
    starts = np.ones(len(order), dtype=bool)
    starts[1:] = grouped[1:] != grouped[:-1]
    first = np.flatnonzero(starts)[np.cumsum(starts) - 1]
    return order[np.arange(len(order)) - first < k]


def run_tag(run: Run, named: bool = False) -> str | None:
    """The tag column of the file ``run`` was read from (None without one, or when the run is
    ``named`` otherwise); a line with another tag is an error at that line: one run file holds
    one system's ranking, and two systems' lines would be ranked together as one. A tag that is
    to name the run must be UTF-8.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from udcg.io.formats.trec import read_trec_run
        >>> lines = "q2 Q0 d1 1 3 bm25\\nq1 Q0 d1 1 2 bm25\\nq1 Q0 d2 2 1 dense\\n"
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "both.run").write_text(lines)
        ...     run_tag(read_trec_run(Path(folder) / "both.run"))
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: ...both.run:3: field 'tag': 'dense' after 'bm25' (line 1): ...
    """
    if run.source is None:
        return None
    with open_binary(run.source) as handle:
        data = handle.read().removeprefix(BOM)
    tagged = _one_tag(data)
    if tagged is not None:  # every line ends in the first line's tag: counted, not parsed
        return None if named else tagged
    first: tuple[int, bytes | None] | None = None
    for number, line in enumerate(LINE_END.split(data), start=1):  # lines as Arrow reads them
        if not (fields := line.split()):
            continue
        tag = fields[5] if len(fields) > 5 else None  # bytes: compared as written
        if first is None:
            first = number, tag
        elif tag != first[1]:
            raise UDCGInputError(
                f"{_shown_tag(tag)} after {_shown_tag(first[1])} (line {first[0]}): a run file "
                "holds one system's ranking, and these lines would be ranked with the others "
                "as one; split the file by tag",
                path=run.source,
                line=number,
                field="tag",
            )
    if first is None or first[1] is None or named:  # named: the tag is not the run's name
        return None
    try:
        return first[1].decode()
    except UnicodeDecodeError:
        raise UDCGInputError(
            f"{_shown_tag(first[1])} is not valid UTF-8: rewrite the tag column (or name the "
            "run: udcg contexts --name)",
            path=run.source,
            line=first[0],
            field="tag",
        ) from None


def _shown_tag(tag: bytes | None) -> str:
    return repr(None if tag is None else tag.decode(errors="backslashreplace"))


def _one_tag(data: bytes) -> str | None:
    """The tag of a run file's bytes when each of its lines ends in the first line's tag (a
    count of ``" TAG\\n"`` and its forms, run files being 6 columns), else None (then read
    line by line: another tag, blank lines, lines of other forms).

    Examples:
        >>> _one_tag(b"q1 Q0 d1 1 2 bm25\\nq1 Q0 d2 2 1 bm25\\n")
        'bm25'
        >>> _one_tag(b"q Q0 d 1 2 a\\nq Q0 e 2 1 b\\n") is None
        True
    """
    fields = data[: data.find(b"\n") if b"\n" in data else len(data)].split()
    if len(fields) != 6 or not data.endswith(b"\n") or b"\t" in data:  # tabs: line by line
        return None
    tag = fields[5]
    ends = sum(data.count(b" " + tag + end) for end in (b"\n", b"\r\n"))
    crlf = data.count(b"\r\n")
    if ends != data.count(b"\n") or data.count(b"\r") != crlf:  # a lone CR ends a line too
        return None
    try:
        return tag.decode()
    except UnicodeDecodeError:
        return None


def _check_present(
    run: Run, rows: list[tuple[str, str, float]], present: Container[str], column: int, what: str
) -> None:
    """The first row whose ``column`` (0: qid, 1: doc_id) is not in ``present`` is an error at
    its line of the run file, telling how many other ids are missing."""
    missing = dict.fromkeys(row[column] for row in rows if row[column] not in present)
    if not missing:
        return
    first = next(row for row in rows if row[column] in missing)
    n = len(missing) - 1
    noun = (("query", "queries"), ("document", "documents"))[column][n > 1]
    more = f" ({n} more {noun} missing too)" if n else ""
    raise UDCGInputError(
        f"{first[column]!r} is not in {what}{more}",
        path=run.source,
        line=run_line(run, first[0], first[1]),
        field=("qid", "doc_id")[column],
    )


def build_run_contexts(
    run: PathType | Run,
    topics: TopicSource,
    collection: CollectionSource,
    k: int,
    *,
    answers: PathType | None = None,
    qrels: PathType | Qrels | None = None,
    run_name: str | None = None,
) -> Iterator[Context]:
    """The top-``k`` context of every query of ``run`` with its question, passage texts and
    scores, and, when given, reference answers and qrels relevance (see the module docstring).
    Every file is read and checked before this returns; the contexts are built as iterated.

    Examples:
        q1 has qrels (d1 relevant, d2 not judged: not relevant); q2 has none (unknown):

        >>> import tempfile
        >>> from pathlib import Path
        >>> files = {"bm25.run": "q2 Q0 d1 1 3 bm25\\nq1 Q0 d1 1 2 bm25\\nq1 Q0 d2 2 1 bm25\\n",
        ...          "topics.tsv": "q1\\tWho wrote Emma?\\nq2\\tWhere is Canberra?\\n",
        ...          "psgs.tsv": "d1\\tAusten wrote Emma.\\nd2\\tCanberra is in Australia.\\n",
        ...          "test.qrels": "q1 0 d1 1\\n"}
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     paths = {name: Path(folder) / name for name in files}
        ...     _ = [paths[name].write_text(text) for name, text in files.items()]
        ...     run, topics, psgs, qrels = paths.values()
        ...     contexts = list(build_run_contexts(run, topics, psgs, k=2, qrels=qrels))
        >>> [(c.qid, c.run, [(p.doc_id, p.relevant) for p in c.passages]) for c in contexts]
        [('q1', 'bm25', [('d1', True), ('d2', False)]), ('q2', 'bm25', [('d1', None)])]
    """
    k = positive_int(k, "k")
    ranked = run if isinstance(run, Run) else read_trec_run(run)
    top = top_k_rows(ranked, k)
    rows = list(
        zip(
            take(ranked.qids, top).to_pylist(),
            take(ranked.doc_ids, top).to_pylist(),
            ranked.scores[top].tolist(),
            strict=True,
        )
    )
    qids = dict.fromkeys(row[0] for row in rows)
    questions = topics(qids) if callable(topics) else read_topics(topics, qids)
    _check_present(ranked, rows, questions, 0, f"the topics {topics}")
    references = read_answers(answers, qids) if answers is not None else {}
    judged = None
    if qrels is not None:
        judged = judged_grades(qrels if isinstance(qrels, Qrels) else read_trec_qrels(qrels))
        _warn_if_no_document_judged(rows, judged, k)
    ids = {row[1] for row in rows}
    documents = collection(ids) if callable(collection) else read_collection(collection, ids)
    _check_present(ranked, rows, documents, 1, f"the collection {collection}")
    tag = run_tag(ranked, named=run_name is not None)  # one system per file, whatever the name
    name = run_name if run_name is not None else tag
    return _contexts(rows, questions, documents, references, judged, name)


def _warn_if_no_document_judged(
    rows: list[tuple[str, str, float]], judged: dict[str, dict[str, int]], k: int
) -> None:
    """A :class:`UDCGWarning` when the qrels judge queries of the run but no top-k document of
    these queries is among the documents the qrels judge (for any query): every passage is
    labelled not relevant, as a doc id scheme the run and the qrels do not share gives
    (``d17`` and ``17``, ``msmarco_passage_17``)."""
    ours = [(qid, doc_id) for qid, doc_id, _ in rows if qid in judged]
    known = {doc_id for grades in judged.values() for doc_id in grades}
    if ours and known.isdisjoint(doc_id for _, doc_id in ours):
        qid, doc_id = ours[0]
        some = ", ".join(map(repr, list(judged[qid])[:3]))
        warnings.warn(
            f"the qrels judge {len({q for q, _ in ours})} of the run's queries but none of "
            f"the documents in their top {k}, so every passage is labelled not relevant: do the"
            f" run and the qrels use one doc id scheme? (query {qid!r}: run {doc_id!r}, qrels "
            f"{some})",
            UDCGWarning,
            stacklevel=3,
        )


def _contexts(
    rows: list[tuple[str, str, float]],
    questions: dict[str, Topic],
    documents: dict[str, Document],
    references: dict[str, list[str]],
    judged: dict[str, dict[str, int]] | None,
    name: str | None,
) -> Iterator[Context]:
    for qid, ranked in itertools.groupby(rows, key=itemgetter(0)):
        grades = None if judged is None else judged.get(qid)
        passages = [
            Passage(
                doc_id=doc_id,
                text=documents[doc_id].text,
                score=score,
                relevant=None if grades is None else grades.get(doc_id, 0) >= 1,
                extra={} if documents[doc_id].title is None else {"title": documents[doc_id].title},
            )
            for _, doc_id, score in ranked
        ]
        topic = questions[qid]
        yield Context(
            qid,
            passages,
            run=name,
            question=topic.text,
            answers=references.get(qid, topic.answers),
        )
