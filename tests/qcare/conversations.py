"""A small hand-built conversational set in the style of MTRAG (written for these tests) and
a rule-following judge for it.

Four queries: three are the latest turn of a conversation whose earlier turns say what "there"
and "it" mean; the fourth is a single-turn query. Two conversations end with the same turn,
"How many people live there, and which river flows through it?", about Paris and about Lyon:
only the history tells their sub-queries apart.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import numpy as np

from udcg.io.contexts.jsonl import Context, Passage
from udcg.judge.base import Judge
from udcg.qcare.conversation import conversation_context

SAME_TURN = "How many people live there, and which river flows through it?"
CONVERSATIONS = {
    "paris::2": ["Which city is the capital of France?", "Paris is the capital of France."],
    "lyon::2": ["Tell me about Lyon.", "Lyon is a large city in south-eastern France."],
    "emma::2": ["Who wrote Emma?", "Jane Austen wrote Emma."],
    "mona::1": [],
}
LAST_TURN = {
    "paris::2": SAME_TURN,
    "lyon::2": SAME_TURN,
    "emma::2": "When was it published?",
    "mona::1": "Who painted the Mona Lisa?",
}
DOCS = {
    "paris-pop": "Paris has about 2.1 million inhabitants.",
    "paris-seine": "The Seine flows through Paris.",
    "lyon-pop": "Lyon has about 520,000 inhabitants.",
    "lyon-rivers": "The Rhône and the Saône flow through Lyon.",
    "emma-1815": "Emma was published in December 1815.",
    "mona": "Leonardo da Vinci painted the Mona Lisa.",
}
RETRIEVED = {
    "paris::2": ["paris-pop", "lyon-pop", "paris-seine"],
    "lyon::2": ["paris-pop", "lyon-rivers", "lyon-pop"],
    "emma::2": ["emma-1815", "mona"],
    "mona::1": ["mona"],
}
ANSWERS = {
    "paris::2": "Paris has about 2.1 million inhabitants. The Seine flows through Paris.",
    "lyon::2": "Lyon has about 520,000 inhabitants. The Loire flows through Lyon.",
    "emma::2": "It was published in 1815.",
    "mona::1": "Leonardo da Vinci painted the Mona Lisa.",
}
#: the judge's decompositions: (entity named in the history or None, latest turn) -> reply
SUBQUERIES = {
    ("Paris", SAME_TURN): ["How many people live in Paris?", "Which river flows through Paris?"],
    ("Lyon", SAME_TURN): ["How many people live in Lyon?", "Which rivers flow through Lyon?"],
    ("Emma", "When was it published?"): ["When was Emma published?"],
    (None, "Who painted the Mona Lisa?"): ["Who painted the Mona Lisa?"],
    (None, "When was it published?"): ["When was it published?"],  # no history: no rewrite
}
#: words a text must hold to answer each sub-query
KEYS = {
    "How many people live in Paris?": {"paris", "inhabitants"},
    "Which river flows through Paris?": {"paris", "seine"},
    "How many people live in Lyon?": {"lyon", "inhabitants"},
    "Which rivers flow through Lyon?": {"lyon", "rhône"},
    "When was Emma published?": {"emma", "1815"},
    "Who painted the Mona Lisa?": {"mona", "leonardo"},
    "When was it published?": {"it", "published"},  # what "it" is, no document says
}


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def contexts(run: str = "bm25") -> list[Context]:
    out = []
    for qid, history in CONVERSATIONS.items():
        passages = [Passage(d, text=DOCS[d]) for d in RETRIEVED[qid]]
        outcomes = {"gen": {"answer": ANSWERS[qid]}}
        if history:
            ctx = conversation_context(
                qid, [*history, LAST_TURN[qid]], passages, run=run, outcomes=outcomes
            )
        else:
            ctx = Context(qid, passages, run=run, question=LAST_TURN[qid], outcomes=outcomes)
        out.append(ctx)
    return out


def _field(text: str, name: str, end: str = "\n\n") -> str:
    return text.split(f"{name}:", 1)[1].split(end, 1)[0].strip()


class ConversationJudge(Judge):
    """Decomposes by table (the entity comes from the history the prompt shows), splits
    answers into sentences (with history, "It" becomes the history's entity), and answers
    the Yes/No checks by word rules; records every prompt it is sent."""

    name = "conv"
    fingerprint = "conv-v1"

    def __init__(self) -> None:
        self.prompts: list[list[dict[str, str]]] = []

    def generate(self, prompts: Sequence, max_new_tokens: int = 64) -> list[str]:
        out = []
        for messages in prompts:
            self.prompts.append(messages)
            user = messages[1]["content"]
            history = user.split("CONVERSATION:", 1)[1] if "CONVERSATION:" in user else ""
            entity = next((e for e in ("Paris", "Lyon", "Emma") if e in history), None)
            if "Split the QUERY" in user:
                turn = user.rsplit("QUERY: ", 1)[1]
                out.append(json.dumps({"subqueries": SUBQUERIES[(entity, turn)]}))
            else:
                answer = user.rsplit("ANSWER: ", 1)[1]
                claims = [s.strip() for s in re.split(r"(?<=\.) ", answer)]
                if entity:
                    claims = [re.sub(r"^It\b", entity, c) for c in claims]
                out.append(json.dumps({"claims": claims}))
        return out

    def yes_prob(self, prompts: Sequence) -> np.ndarray:
        out = []
        for messages in prompts:
            self.prompts.append(messages)
            user = messages[1]["content"]
            if "Does the DOCUMENT alone" in user:
                yes = KEYS[_field(user, "QUESTION")] <= words(_field(user, "DOCUMENT"))
            elif "Does the CLAIM give" in user:
                yes = KEYS[_field(user, "QUESTION")] <= words(_field(user, "CLAIM"))
            elif "Do the CLAIMS together" in user:
                yes = KEYS[_field(user, "QUESTION")] <= words(_field(user, "CLAIMS"))
            else:  # support: every word of the claim is in the document
                yes = words(_field(user, "CLAIM")) <= words(_field(user, "DOCUMENT"))
            out.append(0.9 if yes else 0.1)
        return np.array(out)

    def abstain_prob(self, questions, passages, mode="first_token") -> np.ndarray:
        raise NotImplementedError


def mtrag_task(qid: str, turns: list[str], passages: list[str], answer: str) -> dict:
    """One task line in MTRAG's task format (hand-made: ids, metadata and NaN cells as the
    release has them; the content is ours)."""
    speakers = ["user", "agent"]
    return {
        "conversation_id": qid.split("::")[0],
        "task_id": qid,
        "task_type": "rag",
        "turn": len(turns) // 2 + 1,
        "collection": "test-collection",
        "contexts": [
            {
                "document_id": d,
                "source": "",
                "score": 10.0 - i,
                "text": DOCS[d],
                "title": d.split("-")[0].title(),
                "feedback": {"relevant": {"ann1": {"value": "yes", "timestamp": 1}}},
            }
            for i, d in enumerate(passages)
        ],
        "input": [
            {
                "speaker": speakers[i % 2],
                "text": text,
                "metadata": {"author_type": "human", "created_at": 1},
            }
            for i, text in enumerate(turns)
        ],
        "targets": [{"speaker": "agent", "text": answer, "metadata": {}}],
        "Question Type": ["Factoid"],
        "answerability": ["ANSWERABLE"],
        "Multi-Turn": ["Follow-up"] if len(turns) > 1 else float("nan"),
        "predictions": [{"text": answer}],
    }
