"""Annotated contexts from a TREC run, its qrels, judge probabilities and end-to-end outcomes.

Files (columns separated by spaces or tabs; gzip detected by content; blank lines skipped):

* run: ``qid Q0 doc_id rank score tag`` (:func:`udcg.io.formats.trec.read_trec_run`);
* qrels: ``qid iteration doc_id grade`` (:func:`udcg.io.formats.trec.read_trec_qrels`);
* utilities: ``qid doc_id p``, the judge's probability ``p`` in [0, 1] for one passage: P(abstain)
  when ``utility_field`` is ``abstain_prob`` (utility source ``abstention``, u = 1 - p), the
  answer likelihood when it is ``answer_prob`` (``answer_likelihood``, u = p);
* outcomes: ``qid correct``, whether the generator answered the query correctly from its top-k
  context, ``correct`` in ``1``/``0``/``true``/``false`` (any case).

Each query's context is its top ``k`` documents of the run in trec_eval order (score descending,
ties broken by document id descending; the run's rank column is ignored). A passage is relevant
when its qrels grade is >= 1; an unjudged document is not relevant (trec_eval's rule). Passage
text is absent (``None``). Queries of the run that have no qrels are skipped, as trec_eval
skips them, and counted in a note. Probabilities and outcomes go under ``judge`` (the name the
pipeline reads labels by).

Errors: a malformed utilities or outcomes line is ``FILE:LINE: field 'x': ...``; a ranked
document without a utility value, or a query without an outcome, is an error at the first one,
located at its line of the run file; a repeated (query, document) in any file is an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from udcg.errors import UDCGInputError
from udcg.io.contexts.model import JUDGE_PROB_KEYS, Context, Passage
from udcg.io.files import PathType, numbered_lines, open_binary
from udcg.io.formats.trec import (
    BOM,
    Qrels,
    Run,
    locate_duplicate,
    read_trec_qrels,
    read_trec_run,
    split_columns,
    trec_order,
)
from udcg.validation import positive_int

__all__ = ["read_outcomes", "read_trec_contexts", "read_utilities"]

_TRUE, _FALSE = frozenset({"1", "true"}), frozenset({"0", "false"})


def _rows(path: PathType, names: tuple[str, ...]) -> Iterator[tuple[int, list[str]]]:
    """``(line_number, columns)`` of every non-blank line, each with exactly ``len(names)``."""
    for number, text in numbered_lines(path):
        fields = split_columns(text, names, path, number)
        if fields:
            yield number, fields


def read_utilities(path: PathType) -> dict[tuple[str, str], float]:
    """``{(qid, doc_id): p}`` from ``qid doc_id p`` lines, ``p`` a probability in [0, 1].

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "u.txt").write_text("q1 d1 0.25\\nq1 d2 0.5\\n")
        ...     probs = read_utilities(Path(folder) / "u.txt")
        >>> probs
        {('q1', 'd1'): 0.25, ('q1', 'd2'): 0.5}
    """
    out: dict[tuple[str, str], float] = {}
    for number, (qid, doc_id, text) in _rows(path, ("qid", "doc_id", "p")):
        try:
            value = float(text)
        except ValueError:
            value = None
        if value is None or not 0.0 <= value <= 1.0:  # NaN fails the comparison too
            raise UDCGInputError(
                f"{text!r} is not a probability in [0, 1]", path=path, line=number, field="p"
            )
        if (qid, doc_id) in out:
            raise UDCGInputError(
                f"duplicate document {doc_id!r} for query {qid!r}",
                path=path,
                line=number,
                field="doc_id",
            )
        out[qid, doc_id] = value
    return out


def read_outcomes(path: PathType) -> dict[str, bool]:
    """``{qid: correct}`` from ``qid correct`` lines, ``correct`` in 1/0/true/false.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "o.txt").write_text("q1 1\\nq2 false\\n")
        ...     outcomes = read_outcomes(Path(folder) / "o.txt")
        >>> outcomes
        {'q1': True, 'q2': False}
    """
    out: dict[str, bool] = {}
    for number, (qid, text) in _rows(path, ("qid", "correct")):
        word = text.lower()
        if word not in _TRUE | _FALSE:
            raise UDCGInputError(
                f"{text!r} is not 1, 0, true or false", path=path, line=number, field="correct"
            )
        if qid in out:
            raise UDCGInputError(f"duplicate query {qid!r}", path=path, line=number, field="qid")
        out[qid] = word in _TRUE
    return out


def judged_grades(qrels: Qrels) -> dict[str, dict[str, int]]:
    """``{qid: {doc_id: grade}}``; a repeated judgement is an error at its line."""
    grades = qrels.to_dict()
    if sum(map(len, grades.values())) < len(qrels):
        locate_duplicate(qrels.source, "qrels")
        raise UDCGInputError("a (query, document) pair is judged twice", path=qrels.source)
    return grades


def run_line(run: Run, qid: str, doc_id: str) -> int | None:
    """The first line of the run file that ranks ``doc_id`` for ``qid`` (in its first and
    third columns; Arrow also ends a row at a lone carriage return, which does not end a line
    in an editor); ``None`` when no line holds them or the run was not read from a file."""
    if run.source is None:
        return None
    wanted = [qid.encode(), doc_id.encode()]
    with open_binary(run.source) as handle:
        for number, raw in enumerate(handle, start=1):
            rows = (raw.removeprefix(BOM) if number == 1 else raw).split(b"\r")
            if any(row.split()[0:3:2] == wanted for row in rows):
                return number
    return None


def read_trec_contexts(
    run: PathType,
    qrels: PathType,
    utilities: PathType,
    outcomes: PathType,
    judge: str,
    k: int,
    utility_field: str = "abstain_prob",
) -> tuple[list[Context], list[str]]:
    """Per judged query of ``run``, its top-``k`` context with relevance, the judge's
    ``utility_field`` probabilities and outcome (see the module docstring for the formats);
    returns the contexts and notes on what was skipped.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> files = {"r.run": "q1 Q0 d1 1 2 bm25\\nq1 Q0 d2 2 1 bm25\\nq9 Q0 d1 1 1 bm25\\n",
        ...          "q.qrels": "q1 0 d1 1\\n", "u.txt": "q1 d1 0.25\\nq1 d2 0.5\\n",
        ...          "o.txt": "q1 1\\n"}
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     paths = [Path(folder) / name for name in files]
        ...     _ = [path.write_text(text) for path, text in zip(paths, files.values())]
        ...     (ctx,), notes = read_trec_contexts(*paths, judge="llama3", k=2)
        >>> [(p.doc_id, p.relevant, p.abstain_prob) for p in ctx.passages]
        [('d1', True, {'llama3': 0.25}), ('d2', False, {'llama3': 0.5})]
        >>> ctx.outcomes
        {'llama3': {'correct': True}}
        >>> notes
        ['1 of 2 run queries have no qrels and were skipped (as trec_eval)']
    """
    if utility_field not in JUDGE_PROB_KEYS:
        raise UDCGInputError(
            f"expected one of {', '.join(JUDGE_PROB_KEYS)}, got {utility_field!r}",
            field="utility_field",
        )
    positive_int(k, "k")
    ranked, grades = read_trec_run(run), judged_grades(read_trec_qrels(qrels))
    probs, correct = read_utilities(utilities), read_outcomes(outcomes)
    qids, doc_ids = ranked.qids.to_pylist(), ranked.doc_ids.to_pylist()
    scores = ranked.scores.tolist()
    contexts: list[Context] = []
    seen: dict[str, set[str]] = {}
    for row in trec_order(ranked.qids, ranked.scores, ranked.doc_ids).tolist():
        qid, doc_id = qids[row], doc_ids[row]
        docs = seen.setdefault(qid, set())
        if doc_id in docs:
            locate_duplicate(ranked.source, "run")
            raise UDCGInputError(
                f"duplicate document {doc_id!r} for query {qid!r}",
                path=run,
                line=run_line(ranked, qid, doc_id),
                field="doc_id",
            )
        docs.add(doc_id)
        if qid not in grades or len(docs) > k:
            continue
        if len(docs) == 1:
            if qid not in correct:
                raise UDCGInputError(
                    f"query {qid!r} has no outcome in {outcomes}",
                    path=run,
                    line=run_line(ranked, qid, doc_id),
                    field="outcomes",
                )
            contexts.append(
                Context(qid, [], run=Path(run).name, outcomes={judge: {"correct": correct[qid]}})
            )
        if (qid, doc_id) not in probs:
            raise UDCGInputError(
                f"document {doc_id!r} of query {qid!r} has no {utility_field} in {utilities}",
                path=run,
                line=run_line(ranked, qid, doc_id),
                field="utilities",
            )
        contexts[-1].passages.append(
            Passage(
                doc_id=doc_id,
                score=scores[row],
                relevant=grades[qid].get(doc_id, 0) >= 1,
                **{utility_field: {judge: probs[qid, doc_id]}},
            )
        )
    skipped = sum(qid not in grades for qid in seen)
    if not contexts:
        raise UDCGInputError(f"no query of the run {run} has qrels here", path=qrels, field="qrels")
    unranked = sum(qid not in seen for qid in grades)
    notes = []
    if skipped:
        notes.append(
            f"{skipped} of {len(seen)} run queries have no qrels and were skipped (as trec_eval)"
        )
    if unranked:
        notes.append(
            f"{unranked} of {len(grades)} judged queries are not in the run and were left out "
            "(as trec_eval without -c): runs scored here compare only on the same queries"
        )
    return contexts, notes
