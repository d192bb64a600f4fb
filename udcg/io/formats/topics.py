"""Topics (query id -> question) and reference answers (query id -> answers), read line by line.

Files are gzip-detected by content, JSONL or TSV by their first non-blank line (as
collections, :mod:`udcg.io.formats.collection`):

* topics, JSONL: ``{"qid"|"query_id"|"_id"|"id": ..., "text"|"query"|"question": ...}`` with
  optional ``"answers": ["...", ...]`` (BEIR's ``queries.jsonl`` and ir_datasets exports read
  as is); TSV: ``qid<TAB>text`` (MS MARCO's ``queries.tsv``), an optional header ``qid text``;
* answers, JSONL: ``{"qid": ..., "answers": ["...", ...]}`` (same id keys); TSV:
  ``qid<TAB>answer[<TAB>answer...]``, one line per query.

As for collections, only the queries asked for are kept, and a repeated id among them is an
error at its second line.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from udcg.io.contexts import checks as check
from udcg.io.files import PathType
from udcg.io.formats.collection import Layout, Record, unique_records

__all__ = ["Topic", "read_answers", "read_topics"]

_QID_KEYS = ("qid", "query_id", "_id", "id")
TOPICS = Layout(
    "topic", _QID_KEYS, ("text", "query", "question"), (("id", "text"),), uses=("answers",)
)
ANSWERS = Layout("query", _QID_KEYS, ("answers",), (("id", "answers*"),))


@dataclass(frozen=True, slots=True)
class Topic:
    """One query: its question and, when the topics file gives them, reference answers.

    Examples:
        >>> Topic("q1", "Who wrote Emma?", answers=["Jane Austen"]).answers
        ['Jane Austen']
    """

    qid: str
    text: str
    answers: list[str] | None = None


def _answers(record: Record) -> list[str] | None:
    return check.str_list(record.values.get("answers"), "answers", record.where)


def read_topics(path: PathType, qids: Collection[str] | None = None) -> dict[str, Topic]:
    """``{qid: Topic}`` of the topics of ``path`` whose id is in ``qids`` (all when None).

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> line = '{"qid": "q1", "question": "Who wrote Emma?", "answers": ["Austen"]}'
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "topics.jsonl").write_text(line)
        ...     topics = read_topics(Path(folder) / "topics.jsonl")
        >>> topics
        {'q1': Topic(qid='q1', text='Who wrote Emma?', answers=['Austen'])}
    """
    return {
        record.id: Topic(record.id, record.text(TOPICS), _answers(record))
        for record in unique_records(path, TOPICS, qids)
    }


def read_answers(path: PathType, qids: Collection[str] | None = None) -> dict[str, list[str]]:
    """``{qid: answers}`` of the queries of ``path`` whose id is in ``qids`` (all when None);
    a JSONL line without ``answers`` is an error.

    Examples:
        A TSV line holds the id, then one answer per column:

        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "answers.tsv").write_text("q1\\tJane Austen\\tAusten\\n")
        ...     answers = read_answers(Path(folder) / "answers.tsv")
        >>> answers
        {'q1': ['Jane Austen', 'Austen']}
    """
    out: dict[str, list[str]] = {}
    for record in unique_records(path, ANSWERS, qids):
        answers = _answers(record)
        if answers is None:
            raise record.where.error("answers", "missing: expected a list of answer strings")
        out[record.id] = answers
    return out
