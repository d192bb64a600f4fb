"""The embedded demo set's source and the contexts built from it (``udcg demo`` annotates them).

The source (``demo_source.json`` beside this module, written for this project) has factoid
questions with acceptable answers and seven passages each: two relevant, two hard distractors
(same topic, a plausible wrong answer) and three weak ones. From it this module builds
retrieved contexts of k = 1, 3, 5 and 10 passages in several orderings ("runs"), which
``udcg demo`` annotates with the embedded judge through :mod:`udcg.labels.annotate` (steps
:data:`STEPS`): abstention probabilities, answer likelihoods (the ``answer_likelihood``
utility source), relevance by answer match, and the judge's own end-to-end answers graded by
sub-span match.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage
from udcg.io.files import read_bytes
from udcg.validation import nonnegative_int

SOURCE = Path(__file__).with_name("demo_source.json")
OUTPUT = Path(__file__).with_name("demo.jsonl.gz")
# list size -> number of orderings per question
ORDERINGS = {1: 7, 3: 3, 5: 6, 10: 1}
#: The annotation steps of the shipped demo set.
STEPS = ("abstain", "answer_likelihood", "relevance", "outcomes")


#: Passage kinds of a source question, and how many each question needs at least.
KINDS = {"relevant": 2, "hard": 0, "weak": 0}
#: Passages each question needs besides its relevant ones (a k=5 list of none relevant).
MIN_OTHERS = 5


def load_source(path: Path) -> list[dict]:
    """The questions of the source file, checked (:func:`check_source`)."""
    try:
        data = json.loads(read_bytes(path).decode("utf-8"))
    except FileNotFoundError:
        raise UDCGInputError("no such file", path=path) from None
    except (ValueError, RecursionError) as exc:
        raise UDCGInputError(f"not a demo source file ({exc})", path=path) from None
    check_source(data, path)
    return data["questions"]


def check_source(data: object, path: Path | None = None) -> None:
    """``{"questions": [...]}`` with at least two questions, each with a ``qid``, a
    ``question``, a list of non-empty ``answers`` and passages (``doc_id``, ``text``, ``kind``
    in :data:`KINDS`): two relevant and :data:`MIN_OTHERS` others at least; the questions
    together hold three weak passages besides any one question's (the k=10 lists)."""

    def fail(message: str, field: str | None = None) -> UDCGInputError:
        return UDCGInputError(message, path=path, field=field)

    questions = data.get("questions") if isinstance(data, dict) else None
    if not isinstance(questions, list) or len(questions) < 2:
        raise fail("must be a list of two questions or more", "questions")
    weak = []
    for i, q in enumerate(questions):
        at = f"questions[{i}]"
        if not isinstance(q, dict):
            raise fail("must be an object", at)
        for name in ("qid", "question"):
            if not isinstance(q.get(name), str) or not q[name].strip():
                raise fail("missing or not a non-empty string", f"{at}.{name}")
        answers = q.get("answers")
        if (
            not isinstance(answers, list)
            or not answers
            or not all(isinstance(a, str) and a.strip() for a in answers)
        ):
            raise fail("must be a non-empty list of strings", f"{at}.answers")
        passages = q.get("passages")
        if not isinstance(passages, list):
            raise fail("must be a list", f"{at}.passages")
        for j, passage in enumerate(passages):
            for name in ("doc_id", "text"):
                value = passage.get(name) if isinstance(passage, dict) else None
                if not isinstance(value, str) or not value.strip():
                    raise fail("missing or not a non-empty string", f"{at}.passages[{j}].{name}")
            if passage.get("kind") not in KINDS:
                raise fail(f"must be one of {', '.join(KINDS)}", f"{at}.passages[{j}].kind")
        kinds = [p["kind"] for p in passages]
        if (
            kinds.count("relevant") < KINDS["relevant"]
            or len(kinds) - kinds.count("relevant") < MIN_OTHERS
        ):
            raise fail(
                f"needs {KINDS['relevant']} relevant passages and {MIN_OTHERS} others at least, "
                f"has {kinds.count('relevant')} and {len(kinds) - kinds.count('relevant')}",
                f"{at}.passages",
            )
        weak.append(kinds.count("weak"))
    if any(sum(weak) - w < 3 for w in weak):
        raise fail("the other questions of each question need three weak passages in all")


def _passage(p: dict) -> Passage:
    return Passage(doc_id=p["doc_id"], text=p["text"], extra={"kind": p["kind"]})


def build_contexts(questions: list[dict], seed: int = 0) -> list[Context]:
    """Contexts of every list size in :data:`ORDERINGS`, deterministic for a seed.

    k=1: each passage alone; k=3 and k=5: random draws with 0, 1 or 2 relevant passages in
    random positions; k=10: the question's seven passages and three weak passages of other
    questions, shuffled.
    """
    rng = np.random.default_rng(nonnegative_int(seed, "seed"))
    contexts: list[Context] = []
    for qi, q in enumerate(questions):
        own = [_passage(p) for p in q["passages"]]
        relevant = [p for p in own if p.extra["kind"] == "relevant"]
        others = [p for p in own if p.extra["kind"] != "relevant"]
        base = {"question": q["question"], "answers": list(q["answers"])}
        lists: list[tuple[str, list[Passage]]] = [(f"single-{i}", [p]) for i, p in enumerate(own)]
        for k in (3, 5):
            for r in range(ORDERINGS[k]):
                n_rel = r % 3
                picked = list(rng.choice(len(relevant), n_rel, replace=False)) if n_rel else []
                chosen = [relevant[i] for i in picked]
                chosen += [others[i] for i in rng.choice(len(others), k - n_rel, replace=False)]
                lists.append((f"mix{k}-{r}", [chosen[i] for i in rng.permutation(k)]))
        foreign = [
            _passage(p)
            for j, other in enumerate(questions)
            if j != qi
            for p in other["passages"]
            if p["kind"] == "weak"
        ]
        extra = [foreign[i] for i in rng.choice(len(foreign), 3, replace=False)]
        full = own + extra
        lists.append(("all-10", [full[i] for i in rng.permutation(len(full))]))
        contexts.extend(Context(q["qid"], passages, run=run, **base) for run, passages in lists)
    return contexts
