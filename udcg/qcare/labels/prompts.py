"""Prompts of the Q-CARE judge calls, as chat messages (our wording; the task split follows
Choi et al.: two decompositions and four Yes/No checks).

Yes/No prompts end with a one-word instruction so that the first answer token carries the
decision (read as P(Yes) / (P(Yes) + P(No)) where the backend gives log-probs).

A conversational query (:mod:`udcg.qcare.conversation`) passes its earlier turns as
``history``: the two decompositions then show them and ask for sub-queries (claims) that are
self-contained without them. Without history the prompts are exactly the single-turn ones,
so the judge-cache keys of single-turn queries do not change.
"""

from __future__ import annotations

from collections.abc import Sequence

from udcg.judge.prompts import Messages

_YES_NO = "Reply with one word: Yes or No."
_CHECKER = "You check statements and documents carefully and reply only Yes or No."


def _ask(system: str, user: str) -> Messages:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


#: Earlier turns of a conversation: ``(role, content)`` pairs, oldest first.
History = Sequence[tuple[str, str]]


def _transcript(history: History) -> str:
    """The earlier turns as ``USER: ...`` / ``ASSISTANT: ...`` lines."""
    return "".join(f"{role.upper()}: {' '.join(content.split())}\n" for role, content in history)


def query_decomposition(question: str, history: History = ()) -> Messages:
    """Split a query into minimal self-contained sub-queries (JSON list of strings); with
    ``history``, the query is the latest user turn of that conversation.

    Examples:
        >>> turns = [("user", "Who wrote Emma?"), ("assistant", "Jane Austen.")]
        >>> user = query_decomposition("When was it published?", turns)[1]["content"]
        >>> print(user[user.index("CONVERSATION:") :])
        CONVERSATION:
        USER: Who wrote Emma?
        ASSISTANT: Jane Austen.
        <BLANKLINE>
        QUERY: When was it published?
    """
    if history:
        return _ask(
            "You split the latest turn of a conversation into the minimal set of "
            "self-contained search sub-queries.",
            "The QUERY is the user's latest turn in the CONVERSATION below. Split the QUERY "
            "into sub-queries.\n"
            "- Resolve every reference to earlier turns ('it', 'they', 'that one', 'what "
            "about ...') with what the CONVERSATION says, so that each sub-query is "
            "understandable without the CONVERSATION.\n"
            "- Ask only what the QUERY asks; earlier questions are not asked again.\n"
            "- A single-focus query gets one sub-query: the QUERY rewritten as a standalone "
            "question.\n"
            "- A multi-aspect query gets one sub-query per independent aspect.\n"
            "- A multi-step query gets one sub-query per reasoning step.\n"
            "Each sub-query must ask something no other sub-query asks, and together they "
            "must ask everything the QUERY asks, nothing more.\n"
            'Reply with JSON only: {"subqueries": ["...", "..."]}\n\n'
            f"CONVERSATION:\n{_transcript(history)}\nQUERY: {question}",
        )
    return _ask(
        "You split search queries into the minimal set of self-contained sub-queries.",
        "Split the QUERY into sub-queries.\n"
        "- A single-focus query (one question) stays as it is: return it unchanged, alone.\n"
        "- A multi-aspect query gets one sub-query per independent aspect.\n"
        "- A multi-step query gets one sub-query per reasoning step.\n"
        "Each sub-query must be understandable on its own (no 'it', 'this', 'the above'), ask "
        "something no other sub-query asks, and together they must ask everything the QUERY "
        "asks, nothing more.\n"
        'Reply with JSON only: {"subqueries": ["...", "..."]}\n\n'
        f"QUERY: {question}",
    )


def answer_decomposition(question: str, answer: str, history: History = ()) -> Messages:
    """Split an answer into atomic, self-contained claims (JSON list of strings); with
    ``history``, the question is the latest user turn of that conversation."""
    if history:
        return _ask(
            "You split answers into atomic claims.",
            "List the atomic claims the ANSWER makes. The ANSWER replies to the QUESTION, the "
            "latest turn of the CONVERSATION below. A claim states one piece of information, "
            "can be checked on its own and is understandable without the question or the "
            "CONVERSATION (resolve 'it', 'they' with what the CONVERSATION says). Use only "
            "what the ANSWER says; add no knowledge of your own. Give at least one claim.\n"
            'Reply with JSON only: {"claims": ["...", "..."]}\n\n'
            f"CONVERSATION:\n{_transcript(history)}\nQUESTION: {question}\nANSWER: {answer}",
        )
    return _ask(
        "You split answers into atomic claims.",
        "List the atomic claims the ANSWER makes. A claim states one piece of information, "
        "can be checked on its own and is understandable without the question (write 'Paris "
        "is the capital of France', not 'Paris'). Use only what the ANSWER says; add no "
        "knowledge of your own. Give at least one claim.\n"
        'Reply with JSON only: {"claims": ["...", "..."]}\n\n'
        f"QUESTION: {question}\nANSWER: {answer}",
    )


def chunk_coverage(subquery: str, chunk: str) -> Messages:
    """Does the chunk fully answer the sub-query?"""
    return _ask(
        _CHECKER,
        f"DOCUMENT: {chunk}\n\nQUESTION: {subquery}\n\n"
        "Does the DOCUMENT alone give a complete, specific answer to the QUESTION? "
        "Answer No if details are missing or the text is cut off. " + _YES_NO,
    )


def claim_relevance(subquery: str, claim: str) -> Messages:
    """Is the claim needed to answer the sub-query?"""
    return _ask(
        _CHECKER,
        f"QUESTION: {subquery}\n\nCLAIM: {claim}\n\n"
        "Does the CLAIM give information needed to answer the QUESTION? " + _YES_NO,
    )


def claims_cover(subquery: str, claims: Sequence[str]) -> Messages:
    """Do these claims together answer the sub-query?"""
    listed = "".join(f"- {c}\n" for c in claims)
    return _ask(
        _CHECKER,
        f"CLAIMS:\n{listed}\nQUESTION: {subquery}\n\n"
        "Do the CLAIMS together give a complete, specific answer to the QUESTION? " + _YES_NO,
    )


def claim_support(claim: str, chunk: str) -> Messages:
    """Is the claim supported by the chunk?"""
    return _ask(
        _CHECKER,
        f"DOCUMENT: {chunk}\n\nCLAIM: {claim}\n\n"
        "Does the DOCUMENT support the CLAIM (state it or directly imply it)? " + _YES_NO,
    )


#: Sent after an unusable Yes/No reply, in text mode.
YES_NO_RETRY = "Your reply was not Yes or No. " + _YES_NO
