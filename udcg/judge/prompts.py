"""Prompts of every judge call, as chat messages."""

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

ABSTAIN_USER = "Document: {passage}\nQuestion: {question}\nAnswer:"


def abstain_messages(question: str, passage: str) -> Messages:
    """The reference abstention prompt for one question and one passage.

    >>> abstain_messages("Who wrote Emma?", "Austen did.")[1]["content"].splitlines()
    ['Document: Austen did.', 'Question: Who wrote Emma?', 'Answer:']
    """
    return [
        {"role": "system", "content": ABSTAIN_SYSTEM},
        {"role": "user", "content": ABSTAIN_USER.format(passage=passage, question=question)},
    ]


def prompt_record(system: str = ABSTAIN_SYSTEM, user: str = ABSTAIN_USER) -> dict[str, str]:
    """The abstention prompt as weights record it: the templates and ``sha256`` of the UTF-8
    JSON list ``[system, user]``.

    >>> prompt_record()["sha256"][:12]
    '61e80efb99ce'
    """
    blob = json.dumps([system, user], ensure_ascii=False).encode("utf-8")
    return {"system": system, "user": user, "sha256": hashlib.sha256(blob).hexdigest()}


def answer_likelihood_messages(question: str, passage: str, answer: str) -> Messages:
    """The abstention prompt answered by ``answer`` (what ``answer_prob`` scores).

    >>> answer_likelihood_messages("Who wrote Emma?", "Austen did.", "Jane Austen")[-1]
    {'role': 'assistant', 'content': 'Jane Austen'}
    """
    return [*abstain_messages(question, passage), {"role": "assistant", "content": answer}]


def answer_messages(question: str, passages: list[str]) -> Messages:
    """The same instructions with the whole retrieved context, for end-to-end answers.

    >>> answer_messages("Who wrote Emma?", ["Austen did.", "Emma."])[1]["content"].splitlines()
    ['Document [1]: Austen did.', 'Document [2]: Emma.', 'Question: Who wrote Emma?', 'Answer:']
    """
    documents = "".join(f"Document [{i}]: {p}\n" for i, p in enumerate(passages, start=1))
    return [
        {"role": "system", "content": ABSTAIN_SYSTEM},
        {"role": "user", "content": f"{documents}Question: {question}\nAnswer:"},
    ]
