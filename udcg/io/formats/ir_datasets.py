"""Topics, passages and qrels of an `ir_datasets <https://ir-datasets.com>`_ dataset, by id.

* topics: ``queries_iter()``; the question is the query's ``text`` field (else its
  ``default_text()``, e.g. a TREC topic's title), the reference answers its ``answers`` field
  when it has one; a query id given twice with other texts is an error (as the topic file
  readers refuse a repeated id);
* passages: ``docs_store().get_many(ids)``, looked up by id, never a scan of the collection;
  the text is the document's ``text`` field (else ``default_text()``), the title its ``title``
  field when non-empty;
* qrels: ``qrels_iter()``, one integer grade per (query, document); a pair judged twice is an
  error.

ir_datasets fetches what a dataset needs on first use (into ``IR_DATASETS_HOME``, by default
``~/.ir_datasets``) and builds a docs store on the first lookup (one pass over the collection,
kept on disk beside it); a dataset registered from local files
(``ir_datasets.registry.register``) is read where its files are. ``ir_datasets`` is the
``ir-datasets`` extra.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from udcg.errors import UDCGInputError
from udcg.io.formats.collection import Document
from udcg.io.formats.topics import Topic

__all__ = ["IRDataset", "Lookup", "load_ir_dataset"]

T = TypeVar("T")

#: what each part of a dataset is called in ir_datasets (``has_docs()``...)
_PARTS = ("docs", "queries", "qrels")


def _ir_datasets() -> Any:
    """The ``ir_datasets`` package, or the one-line error naming the extra."""
    try:
        import ir_datasets
    except ModuleNotFoundError as exc:
        raise UDCGInputError(
            "ir_datasets needs the 'ir-datasets' extra: pip install 'udcg[ir-datasets]'"
        ) from exc
    return ir_datasets


@dataclass(frozen=True)
class Lookup(Generic[T]):
    """Entries of one part of a dataset by id: ``lookup(ids)`` is ``{id: entry}`` for the ids
    found (the others are left out); ``str(lookup)`` names the part in messages.

    Examples:
        >>> squares = Lookup("squares", lambda ids: {i: int(i) ** 2 for i in ids if i != "3"})
        >>> squares(["2", "3"]), str(squares)
        ({'2': 4}, 'squares')
    """

    name: str
    read: Callable[[Collection[str]], dict[str, T]] = field(repr=False)

    def __call__(self, ids: Collection[str]) -> dict[str, T]:
        return self.read(ids)

    def __str__(self) -> str:
        return self.name


def _text(entry: Any) -> str:
    """The ``text`` field of a query or document, else its ``default_text()``."""
    text = getattr(entry, "text", None)
    if not isinstance(text, str):
        text = entry.default_text()
    return text


def _topic(query: Any) -> Topic:
    answers = getattr(query, "answers", None)
    answers = None if answers is None else [str(a) for a in answers]
    return Topic(str(query.query_id), _text(query), answers)


def _document(doc: Any) -> Document:
    title = getattr(doc, "title", None)
    title = title if isinstance(title, str) and title else None
    return Document(str(doc.doc_id), _text(doc), title)


def _failed(name: str, exc: OSError) -> UDCGInputError:
    """A failed download or unreadable file as one line naming the dataset ``name``."""
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return UDCGInputError(f"cannot read ir_datasets {name!r}: {reason}")


def _fetching(name: str, action: Callable[[], T]) -> T:
    """``action()``, a failed download or unreadable file as one line naming ``name``."""
    try:
        return action()
    except OSError as exc:
        raise _failed(name, exc) from None


def _each(name: str, items: Callable[[], Iterator[T]]) -> Iterator[T]:
    """What ``items()`` yields, a failed download or unreadable file as one line."""
    try:
        yield from items()
    except OSError as exc:
        raise _failed(name, exc) from None


@dataclass(frozen=True)
class IRDataset:
    """One ir_datasets dataset: its topics, passages (by id) and qrels.

    Examples:
        A dataset registered from local files through ir_datasets' own formats (docs
        ``doc_id<TAB>text``, queries ``qid<TAB>text``, TREC qrels):

        >>> import tempfile
        >>> from pathlib import Path
        >>> import ir_datasets
        >>> from ir_datasets.formats import TrecQrels, TsvDocs, TsvQueries
        >>> from ir_datasets.util import LocalDownload
        >>> files = {"docs.tsv": "d1\\tAusten wrote Emma.\\nd2\\tCanberra.\\n",
        ...          "queries.tsv": "q1\\tWho wrote Emma?\\n", "qrels.txt": "q1 0 d1 1\\n"}
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     local = {name: LocalDownload(Path(folder) / name) for name in files}
        ...     for name, text in files.items():
        ...         _ = (Path(folder) / name).write_text(text)
        ...     name = f"udcg-example/{Path(folder).name}"
        ...     ir_datasets.registry.register(name, ir_datasets.Dataset(
        ...         TsvDocs(local["docs.tsv"]),
        ...         TsvQueries(local["queries.tsv"]),
        ...         TrecQrels(local["qrels.txt"], {}),
        ...     ))
        ...     emma = load_ir_dataset(name)
        ...     topics, passages = emma.topics(["q1"]), emma.passages(["d2", "d9"])
        ...     qrels = emma.qrels()
        ...     every = [d.doc_id for d in emma.iter_passages()], list(emma.iter_topics())
        >>> topics
        {'q1': Topic(qid='q1', text='Who wrote Emma?', answers=None)}
        >>> passages  # d9 is not in the docs store: left out
        {'d2': Document(doc_id='d2', text='Canberra.', title=None)}
        >>> qrels, emma.has("docs")
        ({'q1': {'d1': 1}}, True)
        >>> every  # iter_passages() reads the whole collection, iter_topics() every query
        (['d1', 'd2'], [Topic(qid='q1', text='Who wrote Emma?', answers=None)])
    """

    id: str
    dataset: Any = field(repr=False, compare=False)

    def has(self, part: str) -> bool:
        """Whether the dataset has ``part``: ``docs``, ``queries`` or ``qrels``."""
        return bool(self.dataset.has(part))

    def require(self, part: str, hint: str | None = None) -> None:
        """Refuse a dataset without ``part`` (``docs``, ``queries`` or ``qrels``): one line
        naming what it has, then ``hint`` when given."""
        if not self.has(part):
            present = [p for p in _PARTS if self.has(p)] or ["none of docs, queries, qrels"]
            then = f": {hint}" if hint else ""
            raise UDCGInputError(
                f"ir_datasets {self.id!r} has no {part} (it has: {', '.join(present)}){then}"
            )

    @property
    def topics(self) -> Lookup[Topic]:
        """The queries as :class:`~udcg.io.formats.topics.Topic` by query id, read with
        ``queries_iter()`` (a dataset without queries is an error).
        """
        self.require("queries")

        def read(qids: Collection[str]) -> dict[str, Topic]:
            return _fetching(self.id, lambda: topics(set(qids)))

        def topics(wanted: set[str]) -> dict[str, Topic]:
            out: dict[str, Topic] = {}
            for query in self.dataset.queries_iter():
                qid = str(query.query_id)
                if qid in wanted and out.setdefault(qid, topic := _topic(query)) != topic:
                    raise UDCGInputError(  # which one the run's query is, nothing says
                        f"ir_datasets {self.id!r} queries give query {qid!r} twice, as "
                        f"{out[qid].text!r} and {topic.text!r}"
                    )
            return out

        return Lookup(f"ir_datasets {self.id!r} queries", read)

    @property
    def passages(self) -> Lookup[Document]:
        """The passages as :class:`~udcg.io.formats.collection.Document` by doc id, looked up
        in ``docs_store()`` (a dataset without docs is an error).
        """
        self.require("docs")

        def read(doc_ids: Collection[str]) -> dict[str, Document]:
            return _fetching(self.id, lambda: documents(list(doc_ids)))

        def documents(doc_ids: list[str]) -> dict[str, Document]:
            found = self.dataset.docs_store().get_many(doc_ids)
            return {str(doc_id): _document(doc) for doc_id, doc in found.items()}

        return Lookup(f"ir_datasets {self.id!r} docs store", read)

    def iter_topics(self) -> Iterator[Topic]:
        """Every query, in ``queries_iter()`` order."""
        self.require("queries")
        yield from _each(self.id, lambda: map(_topic, self.dataset.queries_iter()))

    def iter_passages(self) -> Iterator[Document]:
        """Every document, in ``docs_iter()`` order: a pass over the whole collection."""
        self.require("docs")
        yield from _each(self.id, lambda: map(_document, self.dataset.docs_iter()))

    def qrels(self, qids: Collection[str] | None = None) -> dict[str, dict[str, int]]:
        """``{qid: {doc_id: grade}}`` of the queries in ``qids`` (all when None), read with
        ``qrels_iter()``; a dataset without qrels, or a pair judged twice, is an error.
        """
        self.require("qrels")
        wanted = None if qids is None else set(qids)

        def read() -> dict[str, dict[str, int]]:
            out: dict[str, dict[str, int]] = {}
            for qrel in self.dataset.qrels_iter():
                qid, doc_id = str(qrel.query_id), str(qrel.doc_id)
                if wanted is not None and qid not in wanted:
                    continue
                grades = out.setdefault(qid, {})
                if doc_id in grades:
                    raise UDCGInputError(
                        f"ir_datasets {self.id!r} qrels judge query {qid!r}, document "
                        f"{doc_id!r} twice"
                    )
                grades[doc_id] = int(qrel.relevance)
            return out

        return _fetching(self.id, read)


def load_ir_dataset(dataset_id: str) -> IRDataset:
    """The ir_datasets dataset ``dataset_id`` (``ir_datasets.load``); an unknown id is a
    one-line error suggesting close ids. Nothing is fetched until a part is read.

    Examples:
        >>> load_ir_dataset("msmarco-passage/dev/small").has("qrels")  # nothing fetched yet
        True
        >>> try:
        ...     load_ir_dataset("msmarco-pasage/dev/small")
        ... except UDCGInputError as error:
        ...     print(error.reason.replace(" (", "\\n("))
        unknown ir_datasets id 'msmarco-pasage/dev/small'
        (did you mean msmarco-passage/dev/small, msmarco-passage/eval/small, msmarco-passage/eval?)
    """
    ir_datasets = _ir_datasets()
    try:
        dataset = ir_datasets.load(dataset_id)
    except KeyError:
        close = difflib.get_close_matches(dataset_id, list(ir_datasets.registry), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UDCGInputError(f"unknown ir_datasets id {dataset_id!r}{hint}") from None
    return IRDataset(dataset_id, dataset)
