"""Build the embedded demo set: ``python -m udcg.demo`` (about 20 minutes on 2 CPU cores).

The source (``data/demo/source.json``, written for this project) has factoid questions with
acceptable answers and seven passages each: two relevant, two hard distractors (same topic, a
plausible wrong answer) and three weak ones. From it this module builds retrieved contexts of
k = 1, 3, 5 and 10 passages in several orderings ("runs"), then annotates them with the
embedded judge through :mod:`udcg.annotate` (steps :data:`STEPS`): abstention probabilities,
answer likelihoods (the ``answer_likelihood`` utility source), relevance by answer match, and the
judge's own end-to-end answers graded by sub-span match.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from udcg.cli import run_cli
from udcg.errors import UDCGInputError
from udcg.io.contexts import Context, Passage, write_contexts

SOURCE = Path(__file__).resolve().parents[1] / "data" / "demo" / "source.json"
OUTPUT = Path(__file__).with_name("data") / "demo.jsonl.gz"
# list size -> number of orderings per question
ORDERINGS = {1: 7, 3: 3, 5: 6, 10: 1}
#: The annotation steps of the shipped demo set.
STEPS = ("abstain", "answer_likelihood", "relevance", "outcomes")


def load_source(path: Path) -> list[dict]:
    """The questions of the source file."""
    try:
        questions = json.loads(Path(path).read_text(encoding="utf-8"))["questions"]
    except FileNotFoundError:
        raise UDCGInputError("no such file", path=path) from None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise UDCGInputError(f"not a demo source file ({exc})", path=path) from None
    return questions


def _passage(p: dict) -> Passage:
    return Passage(doc_id=p["doc_id"], text=p["text"], extra={"kind": p["kind"]})


def build_contexts(questions: list[dict], seed: int = 0) -> list[Context]:
    """Contexts of every list size in :data:`ORDERINGS`, deterministic for a seed.

    k=1: each passage alone; k=3 and k=5: random draws with 0, 1 or 2 relevant passages in
    random positions; k=10: the question's seven passages and three weak passages of other
    questions, shuffled.
    """
    rng = np.random.default_rng(seed)
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m udcg.demo", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--out", type=Path, default=OUTPUT)
    parser.add_argument("--judge", default="smollm2-135m")
    parser.add_argument("--cache", help="judge cache (SQLite); default ~/.cache/udcg/judge.sqlite")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Build, annotate and write the demo set."""
    args = _parser().parse_args(argv)

    def work() -> None:
        from udcg.annotate import annotate
        from udcg.judge import load_judge
        from udcg.judge.cached import CachedJudge

        contexts = build_contexts(load_source(args.source), args.seed)
        judge = CachedJudge(load_judge(args.judge), args.cache)
        annotated, report = annotate(contexts, judge, steps=STEPS)
        write_contexts(args.out, annotated)
        print(
            f"wrote {len(annotated)} contexts to {args.out}: {report.pairs} passage pairs, "
            f"{report.answer_pairs} answer-likelihood pairs, "
            f"grades {dict(report.grades)}; "
            f"cache hits {judge.cache.hits}, misses {judge.cache.misses}"
        )

    return run_cli("udcg.demo", work)


if __name__ == "__main__":
    sys.exit(main())
