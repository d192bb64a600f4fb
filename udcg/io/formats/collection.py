"""Passage collections, streamed line by line, and the line formats they share with topics.

A collection file (gzip detected by content) is either

* JSONL, one passage per line: ``{"doc_id"|"id"|"_id": ..., "text"|"contents": ...}`` with an
  optional ``"title"`` (the BEIR and Pyserini conventions; other keys are ignored); or
* TSV, one passage per line: ``doc_id<TAB>text`` or ``doc_id<TAB>title<TAB>text``. A first
  line that names its columns (``doc_id``/``id``/``_id``, ``text``/``contents`` and optionally
  ``title``, in any order) is a header: DPR's ``psgs_w100.tsv`` (``id text title``) reads as is.

The format is chosen by the first non-blank line (``{`` starts JSONL); blank lines are skipped
but counted, so line numbers match an editor's. Ids are JSON strings or integers (TSV ids are
stripped of spaces). Every line is checked, but only the passages asked for are kept, so memory
is bounded by what the caller needs, not by the collection. A repeated id among the kept
passages is an error at its second line; ids that are not kept are not compared (that would
hold every id of the collection in memory).
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any

from udcg.errors import UDCGInputError
from udcg.io.contexts import checks as check
from udcg.io.contexts.checks import Where
from udcg.io.files import PathType, numbered_lines
from udcg.progress import progress

__all__ = ["Document", "Layout", "Record", "read_collection", "records", "unique_records"]


@dataclass(frozen=True, slots=True)
class Document:
    """One passage of a collection; ``title`` is ``None`` when the file gives none.

    Examples:
        >>> Document("1", "Canberra is the capital.", title="Australia").title
        'Australia'
    """

    doc_id: str
    text: str
    title: str | None = None


@dataclass(frozen=True)
class Layout:
    """The keys of one kind of id-keyed file (a collection, topics, answers).

    ``id_keys`` and ``text_keys``: the accepted JSON keys of the id and of the text (also the
    accepted TSV header names; the first one names the field in messages); ``columns``: the
    headerless TSV layouts, one role per column (``id``, ``text`` or a JSON key); a last role
    ending in ``*`` takes the remaining columns (one or more) as a list.

    Examples:
        The collection's layout: DPR's header names its columns; a headerless line of three
        columns is id, title, text:

        >>> COLLECTION.header(["id", "text", "title"]), COLLECTION.roles(3, Where(None, 1))
        (('id', 'text', 'title'), ('id', 'title', 'text'))
    """

    what: str
    id_keys: tuple[str, ...]
    text_keys: tuple[str, ...]
    columns: tuple[tuple[str, ...], ...]
    #: the other JSON keys its reader uses (a passage's title, a topic's answers)
    uses: tuple[str, ...] = ()

    @property
    def read_keys(self) -> tuple[str, ...]:
        """The JSON keys whose values its reader uses (id, text and ``uses``): the only ones a
        lone surrogate is refused in."""
        return (*self.id_keys, *self.text_keys, *self.uses)

    def header(self, fields: list[str]) -> tuple[str, ...] | None:
        """The column roles when ``fields`` (a first line) name the columns, else None."""
        roles = tuple(
            "id" if name in self.id_keys else "text" if name in self.text_keys else name
            for name in fields
        )
        known = {role for layout in self.columns for role in layout}
        if {"id", "text"} <= set(roles) <= known and len(set(roles)) == len(roles):
            return roles
        return None

    def roles(self, count: int, where: Where) -> tuple[str, ...]:
        """The headerless layout for a first line of ``count`` columns."""
        for roles in self.columns:
            if len(roles) == count or (roles[-1].endswith("*") and count >= len(roles)):
                return roles
        forms = " or ".join("<TAB>".join(map(self.name, roles)) for roles in self.columns)
        raise UDCGInputError(
            f"expected {forms}, found {count} column(s)", path=where.path, line=where.line
        )

    def name(self, role: str) -> str:
        """How messages name a column role: ``id`` and ``text`` by their first key."""
        return {"id": self.id_keys[0], "text": self.text_keys[0]}.get(role, role.rstrip("*"))

    def one_of(self, obj: dict[str, Any], role: str, where: Where) -> tuple[str, Any]:
        """``(key, value)`` of ``role`` (``id`` or ``text``) in a JSON object: exactly one of
        its keys must be present."""
        keys = self.id_keys if role == "id" else self.text_keys
        present = [key for key in keys if key in obj]
        if not present:
            raise where.error(
                keys[0], f"missing: a {self.what} needs one of the keys {', '.join(keys)}"
            )
        if len(present) > 1:
            raise where.error(present[1], f"{' and '.join(present)} are both given; keep one")
        return present[0], obj[present[0]]


@dataclass(frozen=True, slots=True)
class Record:
    """One line of an id-keyed file: its checked id and its values (the JSON object, or the
    TSV columns by role, a ``*`` role's list under its name without the star).

    Examples:
        >>> record = Record(Where(None, 1), "1", {"_id": 1, "contents": "Paris."}, json=True)
        >>> record.text(COLLECTION)
        'Paris.'
    """

    where: Where
    id: str
    values: dict[str, Any]
    json: bool
    #: the field of a lone surrogate among the values (refused if the record is read)
    surrogate: str | None = None

    def text(self, layout: Layout) -> str:
        """The record's text, which must be a string."""
        if not self.json:
            return self.values["text"]
        key, text = layout.one_of(self.values, "text", self.where)
        if not isinstance(text, str):
            raise self.where.error(key, f"must be a string, got {check.kind(text)}")
        return text


Parser = Callable[[Where, str], Record]


def records(path: PathType, layout: Layout) -> Iterator[Record]:
    """Every non-blank line of ``path`` as a :class:`Record` (a TSV header is skipped); a file
    without any record is an error once its lines are exhausted.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> lines = "id\\ttext\\ttitle\\n1\\tCanberra.\\tAustralia\\n2\\tParis.\\tFrance\\n"
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "psgs.tsv").write_text(lines)
        ...     first = next(records(Path(folder) / "psgs.tsv", COLLECTION))
        >>> first.id, first.values
        ('1', {'id': '1', 'text': 'Canberra.', 'title': 'Australia'})
    """
    lines = ((n, text.rstrip("\r\n")) for n, text in numbered_lines(path) if text.strip())
    first = next(lines, None)
    count = 0
    if first is not None:
        parse: Parser = functools.partial(_json_record, layout=layout)
        if not first[1].lstrip().startswith("{"):
            header = layout.header(first[1].split("\t"))
            roles = header or layout.roles(first[1].count("\t") + 1, Where(path, first[0]))
            parse = _tsv_parser(roles, layout)
            first = next(lines, None) if header else first
        for number, text in itertools.chain([first] if first else [], lines):
            count += 1
            yield parse(Where(path, number), text)
    if not count:
        raise UDCGInputError(f"empty file: no {layout.what} lines", path=path)


def _json_record(where: Where, text: str, layout: Layout) -> Record:
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise UDCGInputError(check.json_problem(exc), path=where.path, line=where.line) from None
    if not isinstance(obj, dict):
        raise UDCGInputError(
            f"expected a JSON object, got {check.kind(obj)}", path=where.path, line=where.line
        )
    key, value = layout.one_of(obj, "id", where)
    record_id = check.identifier(value, key, where)
    read = {k: obj[k] for k in layout.read_keys if k in obj}
    return Record(where, record_id, obj, True, check.lone_surrogate(text, read))


def _tsv_parser(roles: tuple[str, ...], layout: Layout) -> Parser:
    """The parser of TSV lines with columns ``roles``."""
    rest = roles[-1].endswith("*")
    fixed = roles[:-1] if rest else roles
    names = ", ".join(map(layout.name, roles))
    shape = f"{len(roles)}{' or more' if rest else ''} columns ({names})"

    def parse(where: Where, text: str) -> Record:
        fields = text.split("\t")
        if len(fields) != len(roles) and not (rest and len(fields) > len(roles)):
            raise UDCGInputError(
                f"expected {shape} separated by tabs, found {len(fields)}",
                path=where.path,
                line=where.line,
            )
        values: dict[str, Any] = dict(zip(fixed, fields, strict=False))
        if rest:
            values[roles[-1].rstrip("*")] = fields[len(fixed) :]
        record_id = check.identifier(values["id"].strip(), layout.id_keys[0], where)
        return Record(where, record_id, values, False)

    return parse


#: The collection's keys: JSON keys and TSV header names, headerless TSV layouts.
COLLECTION = Layout(
    "passage",
    ("doc_id", "id", "_id"),
    ("text", "contents"),
    (("id", "text"), ("id", "title", "text")),
    uses=("title",),
)


def unique_records(path: PathType, layout: Layout, ids: Collection[str] | None) -> Iterator[Record]:
    """The records of ``path`` whose id is in ``ids`` (all when ``None``); a repeated id among
    them is an error at its second line.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "psgs.jsonl"
        ...     _ = path.write_text('{"_id": "d1", "text": "a"}\\n{"_id": "d1", "text": "b"}\\n')
        ...     kept = [r.id for r in unique_records(path, COLLECTION, {"d2"})]
        ...     try:
        ...         list(unique_records(path, COLLECTION, None))
        ...     except UDCGInputError as error:
        ...         print(kept, error.line, error.reason)
        [] 2 duplicate passage 'd1' (first at line 1)
    """
    first_lines: dict[str, int | None] = {}
    with progress(None, f"{layout.what}s read", unit=layout.what, leave=False) as bar:
        for count, record in enumerate(records(path, layout), start=1):
            if count % PROGRESS_STEP == 0:  # a long read (21M passages) shows it moves
                bar.update(PROGRESS_STEP)
            if ids is not None and record.id not in ids:
                continue
            if record.surrogate is not None:  # UTF-8 cannot write it into the contexts
                raise record.where.error(record.surrogate, check.LONE_SURROGATE)
            first = first_lines.setdefault(record.id, record.where.line)
            if first != record.where.line:
                raise record.where.error(
                    layout.id_keys[0],
                    f"duplicate {layout.what} {record.id!r} (first at line {first})",
                )
            yield record


#: Records read between two updates of the reading's progress.
PROGRESS_STEP = 10_000


def read_collection(path: PathType, doc_ids: Collection[str] | None = None) -> dict[str, Document]:
    """``{doc_id: Document}`` of the passages of ``path`` whose id is in ``doc_ids`` (all of
    them when ``None``), read one line at a time (see the module docstring for the formats).

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> lines = "id\\ttext\\ttitle\\n1\\tCanberra.\\tAustralia\\n2\\tParis.\\tFrance\\n"
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "psgs.tsv").write_text(lines)
        ...     passages = read_collection(Path(folder) / "psgs.tsv", doc_ids={"2"})
        >>> passages
        {'2': Document(doc_id='2', text='Paris.', title='France')}
    """
    return {
        record.id: Document(
            record.id,
            record.text(COLLECTION),
            check.optional_str(record.values.get("title"), "title", record.where) or None,
        )
        for record in unique_records(path, COLLECTION, doc_ids)
    }
