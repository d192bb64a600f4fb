"""eRAG labels (Salemi and Zamani, "Evaluating Retrieval Quality in Retrieval-Augmented
Generation", SIGIR 2024): each passage's own downstream outcome used as its relevance label.

The judge answers the question from that one passage alone, with the prompt of the end-to-end
outcome (:func:`udcg.judge.prompts.answer_messages` with a single document, so the label of a
passage is the outcome of the one-passage context holding it), and the answer is graded as the
``outcomes`` step grades: normalised sub-span match (``span``) or the judge's
CORRECT / INCORRECT / ABSTAINED (``llm``). ``passages[].erag[JUDGE]`` is 1 when the grade is
CORRECT, else 0; ``passages[].erag_answer[JUDGE]`` keeps the answer, and
``passages[].erag_made[JUDGE]`` how it was made (``grader``, ``max_new_tokens``). An
unparsable ``llm`` grade leaves the label unset (counted, never a silent 0).

One generation per distinct (question, passage text), one ``llm`` grade per distinct
(question, answers, generated answer); every call goes through the judge, so a judge behind
the on-disk cache answers a rerun without a model call. The per-list aggregation (eRAG's
Precision, MAP, MRR, nDCG, Hits over these labels) is
:func:`udcg.pipeline.metric_table.erag_metrics`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage
from udcg.judge.base import Judge
from udcg.judge.prompts import answer_messages
from udcg.labels.batches import judge_call

#: Passage key of the eRAG labels: ``{"JUDGE": 0 | 1}``.
ERAG = "erag"
#: Passage key of the answers the labels grade: ``{"JUDGE": "answer text"}``.
ERAG_ANSWER = "erag_answer"
#: Passage key of how they were made: ``{"JUDGE": {"grader": ..., "max_new_tokens": ...}}``.
ERAG_MADE = "erag_made"

#: ``grade(items)``: one grade (CORRECT, INCORRECT, ABSTAINED) or None (unparsable) per
#: ``(question, acceptable answers, generated answer)`` item.
Grader = Callable[[Sequence[tuple[str, tuple[str, ...], str]]], list[str | None]]


def made_as(record: Mapping[str, Any], asked: Mapping[str, Any] | None) -> bool:
    """Whether a record of how an answer was made (an outcome, an :data:`ERAG_MADE` entry)
    agrees with ``asked`` (``{"grader": ..., "max_new_tokens": ...}``) on every field it
    records; a field it does not record (given outcomes, older files) is not checked.

    Examples:
        >>> made_as({"grader": "span", "max_new_tokens": 32}, {"max_new_tokens": 16})
        False
        >>> made_as({"correct": True}, {"grader": "llm", "max_new_tokens": 16})
        True
    """
    return all(record.get(field, value) == value for field, value in (asked or {}).items())


def with_erag(
    passage: Passage,
    name: str,
    label: int | None,
    answer: str,
    made: Mapping[str, Any] | None = None,
) -> Passage:
    """``passage`` with its eRAG answer, and its label when there is one (a missing label
    removes a stale one), under judge ``name``; ``made``: how (:data:`ERAG_MADE`).

    Examples:
        >>> p = with_erag(Passage("d1"), "llama3", 1, "Austen")
        >>> p.extra
        {'erag': {'llama3': 1}, 'erag_answer': {'llama3': 'Austen'}}
        >>> with_erag(p, "llama3", None, "hm").extra
        {'erag_answer': {'llama3': 'hm'}}
    """
    labels = {k: v for k, v in passage.extra.get(ERAG, {}).items() if k != name}
    if label is not None:
        labels[name] = int(label)
    answers = {**passage.extra.get(ERAG_ANSWER, {}), name: answer}
    makers = {k: v for k, v in passage.extra.get(ERAG_MADE, {}).items() if k != name}
    if made:
        makers[name] = dict(made)
    extra = {k: v for k, v in passage.extra.items() if k not in (ERAG, ERAG_ANSWER, ERAG_MADE)}
    extra |= {ERAG: labels} if labels else {}
    return replace(
        passage, extra=extra | {ERAG_ANSWER: answers} | ({ERAG_MADE: makers} if makers else {})
    )


def label_erag(
    contexts: Sequence[Context],
    judge: Judge,
    grade: Grader,
    max_new_tokens: int = 32,
    batch: int = 64,
    made: Mapping[str, Any] | None = None,
) -> tuple[list[Context], int, Counter]:
    """``(contexts, answers, grades)``: the contexts with every passage's eRAG label and answer
    of ``judge`` (see the module docstring; ``grade`` grades the answers), the number of
    distinct (question, passage) answers generated and the count of each grade (``FAILED``:
    unparsable); ``made`` (the grader's name and ``max_new_tokens``) is recorded with each
    label. Contexts need ``question``, ``answers`` and passage texts (checked by the
    caller, :func:`udcg.labels.annotate.check_inputs`).

    Examples:
        A stand-in judge that answers with the passage's first word, graded by span match:

        >>> from udcg.labels.answers import grade_span
        >>> class FirstWord(Judge):
        ...     name = fingerprint = "first-word"
        ...     def generate(self, prompts, max_new_tokens=64):
        ...         return [m[1]["content"].split(": ")[1].split()[0] for m in prompts]
        >>> passages = [Passage("d1", text="Lyon is big."), Passage("d2", text="Paris it is.")]
        >>> ctx = Context("q1", passages, question="Capital of France?", answers=["Paris"])
        >>> grade = lambda items: [grade_span(a, answers) for _, answers, a in items]
        >>> (out,), answers, grades = label_erag([ctx], FirstWord(), grade)
        >>> [p.extra["erag"]["first-word"] for p in out.passages], answers, dict(grades)
        ([0, 1], 2, {'INCORRECT': 1, 'CORRECT': 1})
    """
    name = judge.name
    pairs = sorted({(c.question or "", p.text or "") for c in contexts for p in c.passages})
    prompts = [answer_messages(q, [t]) for q, t in pairs]
    generated, _ = judge_call(
        judge,
        prompts,
        lambda chunk, **kw: judge.generate(list(chunk), max_new_tokens, **kw),
        "eRAG answers",
        batch,
    )
    answer_of = {pair: text.strip() for pair, text in zip(pairs, generated, strict=True)}
    items = sorted(
        {
            (c.question or "", tuple(c.answers or ()), answer_of[(c.question or "", p.text or "")])
            for c in contexts
            for p in c.passages
        }
    )
    grade_of = dict(zip(items, grade(items), strict=True))
    grades: Counter = Counter()
    out = []
    for ctx in contexts:
        passages = []
        for p in ctx.passages:
            answer = answer_of[(ctx.question or "", p.text or "")]
            found = grade_of[(ctx.question or "", tuple(ctx.answers or ()), answer)]
            grades[found or "FAILED"] += 1
            label = None if found is None else int(found == "CORRECT")
            passages.append(with_erag(p, name, label, answer, made))
        out.append(replace(ctx, passages=passages))
    return out, len(pairs), grades


def _label(ctx: Context, i: int, passage: Passage, judge: str) -> float:
    """The eRAG label of ``passage`` (position ``i`` of ``ctx``) as 0.0 / 1.0, NaN when
    missing; a value other than 0, 1 or a boolean is an error naming the field."""
    labels = passage.extra.get(ERAG)
    if labels is None:
        return np.nan
    where = f"passages[{i}].{ERAG}"
    if not isinstance(labels, dict):
        raise UDCGInputError("must map a judge to 0 or 1", field=where, **ctx.location())
    value = labels.get(judge)
    if value is None:
        return np.nan
    if isinstance(value, bool) or value in (0, 1):
        return float(value)
    raise UDCGInputError(
        f"must be 0 or 1, got {value!r}", field=f"{where}.{judge}", **ctx.location()
    )


def erag_labels(contexts: Sequence[Context], judge: str) -> list[np.ndarray]:
    """Per context, a float64 array of the passages' eRAG labels of ``judge`` (NaN where a
    passage has none); a malformed label is an error naming ``passages[i].erag.JUDGE``.

    Examples:
        >>> p1 = Passage("d1", extra={"erag": {"m": 1}})
        >>> p2 = Passage("d2", extra={"erag": {"m": 0}})
        >>> [row.tolist() for row in erag_labels([Context("q1", [p1, p2, Passage("d3")])], "m")]
        [[1.0, 0.0, nan]]
    """
    return [
        np.array([_label(c, i, p, judge) for i, p in enumerate(c.passages)], dtype=np.float64)
        for c in contexts
    ]


def has_erag(
    contexts: Sequence[Context], judge: str, asked: Mapping[str, Any] | None = None
) -> bool:
    """Every passage of every context has an eRAG label of ``judge``, made as ``asked`` says
    (``{"grader": ..., "max_new_tokens": ...}``) where the passage records it (:data:`ERAG_MADE`).

    Examples:
        >>> has_erag([Context("q1", [Passage("d1", extra={"erag": {"m": 1}})])], "m")
        True
        >>> has_erag([Context("q1", [Passage("d1")])], "m")
        False
        >>> made = {"erag": {"m": 1}, "erag_made": {"m": {"max_new_tokens": 1}}}
        >>> has_erag([Context("q1", [Passage("d1", extra=made)])], "m", {"max_new_tokens": 16})
        False
    """
    return all(not np.isnan(row).any() for row in erag_labels(contexts, judge)) and all(
        made_as(p.extra.get(ERAG_MADE, {}).get(judge, {}), asked)
        for c in contexts
        for p in c.passages
    )


def erag_qrels(contexts: Sequence[Context], judge: str) -> dict[str, dict[str, int]]:
    """The eRAG labels of ``judge`` as qrels ``{qid: {doc_id: label}}``, so that
    ``udcg.evaluate(erag_qrels(cs, judge), run, ["nDCG@10", "AP", "P@10", "RR"])`` gives eRAG's
    scores of ``run`` (each list is its own qrels, as in the eRAG package); passages without a
    doc id or a label are left out.

    Examples:
        >>> p1 = Passage("d1", extra={"erag": {"m": 1}})
        >>> erag_qrels([Context("q1", [p1, Passage("d2", extra={"erag": {"m": 0}})])], "m")
        {'q1': {'d1': 1, 'd2': 0}}
    """
    qrels: dict[str, dict[str, int]] = {}
    for ctx, row in zip(contexts, erag_labels(contexts, judge), strict=True):
        judged = qrels.setdefault(str(ctx.qid), {})
        for passage, label in zip(ctx.passages, row, strict=True):
            if passage.doc_id is not None and not np.isnan(label):
                judged[str(passage.doc_id)] = int(label)
    return qrels
