"""Prompts of every judge call, as chat messages. The abstention prompt is the reference one;
the answer-likelihood prompt is the same conversation with an acceptable answer as the
assistant's reply (teacher-forced)."""

from __future__ import annotations

import hashlib
import json

Messages = list[dict[str, str]]

ABSTAIN_MARKER = "NO-RESPONSE"

ABSTAIN_SYSTEM = (
    "You are given a question and you must respond based on the provided documents. "
    "Respond directly without providing any premise or explanation. "
    f"If none of the documents contain the answer, please respond with {ABSTAIN_MARKER}. "
    "Do not try to respond based on your own knowledge."
)

#: the user turn of the abstention prompt (``str.format`` fields ``passage`` and ``question``)
ABSTAIN_USER = "Document: {passage}\nQuestion: {question}\nAnswer:"


def abstain_messages(question: str, passage: str) -> Messages:
    """The reference abstention prompt for one question and one passage.

    Examples:
        >>> messages = abstain_messages("Who wrote Emma?", "Austen did.")
        >>> [m["role"] for m in messages], messages[1]["content"].splitlines()
        (['system', 'user'], ['Document: Austen did.', 'Question: Who wrote Emma?', 'Answer:'])
    """
    return [
        {"role": "system", "content": ABSTAIN_SYSTEM},
        {"role": "user", "content": ABSTAIN_USER.format(passage=passage, question=question)},
    ]


def prompt_record(system: str = ABSTAIN_SYSTEM, user: str = ABSTAIN_USER) -> dict[str, str]:
    """The abstention prompt as weights record it: ``system`` and ``user`` templates and
    ``sha256``, the SHA-256 of the JSON list ``[system, user]`` (UTF-8): one character changed
    in either template changes the hash.

    Examples:
        >>> record = prompt_record()
        >>> record["sha256"][:12], prompt_record(user=record["user"] + " ")["sha256"][:12]
        ('61e80efb99ce', '3fc6c4cdeb62')
    """
    blob = json.dumps([system, user], ensure_ascii=False).encode("utf-8")
    return {"system": system, "user": user, "sha256": hashlib.sha256(blob).hexdigest()}


def answer_likelihood_messages(question: str, passage: str, answer: str) -> Messages:
    """The abstention prompt for one question and passage, answered by ``answer``: the
    conversation whose assistant turn :meth:`~udcg.judge.base.Judge.answer_prob` scores.

    Examples:
        >>> messages = answer_likelihood_messages("Who wrote Emma?", "Austen did.", "Jane Austen")
        >>> [m["role"] for m in messages], messages[-1]["content"]
        (['system', 'user', 'assistant'], 'Jane Austen')
    """
    return [*abstain_messages(question, passage), {"role": "assistant", "content": answer}]


def answer_messages(question: str, passages: list[str]) -> Messages:
    """The same instructions with the whole retrieved context, for end-to-end answers.

    Examples:
        >>> messages = answer_messages("Who wrote Emma?", ["Austen did.", "Emma is a novel."])
        >>> messages[1]["content"].splitlines()[:2]
        ['Document [1]: Austen did.', 'Document [2]: Emma is a novel.']
    """
    documents = "".join(f"Document [{i}]: {p}\n" for i, p in enumerate(passages, start=1))
    return [
        {"role": "system", "content": ABSTAIN_SYSTEM},
        {"role": "user", "content": f"{documents}Question: {question}\nAnswer:"},
    ]
