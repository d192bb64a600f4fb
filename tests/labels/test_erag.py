"""udcg.labels.erag: eRAG's per-passage labels from a stand-in judge, their metrics by hand and
against the ``erag`` package, and the judge cache under the step."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage
from udcg.judge.base import Judge
from udcg.judge.cached import CachedJudge
from udcg.labels.annotate import annotate, check_inputs
from udcg.labels.erag import ERAG, ERAG_ANSWER, erag_labels, has_erag
from udcg.pipeline.metric_table import ERAG_METRICS, erag_metrics

PARIS = "Paris is the capital of France."
PARIS_2 = "Paris hosts the Louvre."
LYON = "Lyon is a large French city."
NOTHING = "NO-RESPONSE is all this passage says."
GARBLED = "Garbled words."


class AnswerJudge(Judge):
    """Answers with the first word of the first document; grades (4 new tokens) CORRECT when
    the answer is Paris, ``??`` (unparsable) for Garbled, else INCORRECT."""

    name = "answerer"
    fingerprint = "answerer-v1"

    def __init__(self) -> None:
        self.prompts: list[int] = []
        self.grades: list[int] = []

    def generate(self, prompts: Sequence, max_new_tokens: int = 64) -> list[str]:
        if max_new_tokens == 4:
            self.grades.append(len(prompts))
            answers = [m[-1]["content"].split("Model answer: ")[1].split("\n")[0] for m in prompts]
            return [
                "??" if a == "Garbled" else "CORRECT" if a == "Paris" else "INCORRECT"
                for a in answers
            ]
        self.prompts.append(len(prompts))
        return [" " + m[-1]["content"].split("]: ")[1].split()[0] + " " for m in prompts]


def _contexts() -> list[Context]:
    def ctx(qid: str, texts: list[str]) -> Context:
        passages = [Passage(f"d{i}", text=t) for i, t in enumerate(texts)]
        return Context(qid, passages, question="Capital of France?", answers=["Paris"])

    return [
        ctx("q1", [LYON, PARIS, PARIS_2]),
        ctx("q2", [LYON, NOTHING, LYON]),
        ctx("q3", [PARIS, LYON, PARIS_2]),
    ]


def _dcg(labels: Sequence[int]) -> float:
    return sum(g / math.log2(i + 2) for i, g in enumerate(labels))


def test_labels_and_metrics_by_hand() -> None:
    judge = AnswerJudge()
    out, report = annotate(_contexts(), judge, steps=["erag"])
    # one generation per distinct (question, passage): Lyon, Paris, Paris 2, NO-RESPONSE
    assert report.erag_answers == 4 and sum(judge.prompts) == 4
    labels = [[p.extra[ERAG]["answerer"] for p in c.passages] for c in out]
    assert labels == [[0, 1, 1], [0, 0, 0], [1, 0, 1]]
    assert [p.extra[ERAG_ANSWER]["answerer"] for p in out[1].passages] == [
        "Lyon",
        "NO-RESPONSE",
        "Lyon",
    ]
    assert report.erag_grades == {"CORRECT": 4, "INCORRECT": 4, "ABSTAINED": 1}
    assert not out[0].outcomes  # only the eRAG step ran

    scores = erag_metrics(erag_labels(out, "answerer"))
    ideal = _dcg([1, 1, 0])
    expected = {
        "eRAG-nDCG": [_dcg([0, 1, 1]) / ideal, 0.0, _dcg([1, 0, 1]) / ideal],
        "eRAG-MAP": [(1 / 2 + 2 / 3) / 2, 0.0, (1 + 2 / 3) / 2],
        "eRAG-MRR": [1 / 2, 0.0, 1.0],
        "eRAG-Precision": [2 / 3, 0.0, 2 / 3],
        "eRAG-Hits": [1.0, 0.0, 1.0],
    }
    assert list(scores) == list(ERAG_METRICS)
    for name, values in expected.items():
        np.testing.assert_allclose(scores[name], values, rtol=0, atol=1e-12, err_msg=name)


def test_llm_grader_leaves_unparsable_grades_unset() -> None:
    contexts = [
        Context(
            "q1",
            [Passage("a", text=PARIS), Passage("b", text=GARBLED)],
            question="Capital of France?",
            answers=["Paris"],
        )
    ]
    judge = AnswerJudge()
    (out,), report = annotate(contexts, judge, steps=["erag"], grader="llm")
    assert sum(judge.grades) == 2  # one grade per distinct (question, answers, answer)
    assert out.passages[0].extra[ERAG] == {"answerer": 1}
    assert ERAG not in out.passages[1].extra  # never a silent 0
    assert out.passages[1].extra[ERAG_ANSWER] == {"answerer": "Garbled"}
    assert report.failures == {"unparsable eRAG grade": 1}
    assert not has_erag([out], "answerer")
    assert np.isnan(erag_labels([out], "answerer")[0][1])


def test_reruns_are_answered_by_the_judge_cache(tmp_path: Path) -> None:
    cache = tmp_path / "judge.sqlite"
    first = AnswerJudge()
    labelled, _ = annotate(_contexts(), CachedJudge(first, cache=cache), ["erag"], grader="llm")
    assert sum(first.prompts) == 4 and sum(first.grades) > 0
    second = AnswerJudge()
    again, report = annotate(_contexts(), CachedJudge(second, cache=cache), ["erag"], grader="llm")
    assert second.prompts == [] and second.grades == []  # no model call at all
    assert again == labelled and report.erag_answers == 4


def test_the_step_needs_questions_and_answers() -> None:
    ctx = Context("q1", [Passage("a", text=PARIS)], question="Capital of France?")
    with pytest.raises(UDCGInputError, match="field 'answers': missing: step erag"):
        check_inputs([ctx], ["erag"], "string")
    with pytest.raises(UDCGInputError, match="field 'question'"):
        annotate(
            [Context("q1", [Passage("a", text=PARIS)], answers=["Paris"])], AnswerJudge(), ["erag"]
        )


def test_a_malformed_label_read_back_is_located() -> None:
    bad = Context("q7", [Passage("a"), Passage("b", extra={"erag": {"m": 0.5}})])
    with pytest.raises(UDCGInputError, match=r"field 'passages\[1\]\.erag\.m': must be 0 or 1"):
        erag_labels([bad], "m")
    with pytest.raises(UDCGInputError, match=r"field 'passages\[0\]\.erag'"):
        erag_labels([Context("q7", [Passage("a", extra={"erag": [1]})])], "m")


def test_metrics_equal_the_erag_package_on_the_same_labels() -> None:
    """eRAG 0.0.1 (``pip install --no-deps erag``; its pytrec_eval is pytrec-eval-terrier)
    aggregates the per-passage labels with pytrec_eval, each list being its own qrels."""
    erag = pytest.importorskip("erag")
    rng = np.random.default_rng(7)
    k = 5
    labels = rng.integers(0, 2, size=(60, k))
    labels[:5] = 0  # lists without any useful passage
    labels[5:8] = 1
    docs = {
        f"q{i}": [f"q{i}-{j}-{int(g)}" for j, g in enumerate(row)] for i, row in enumerate(labels)
    }
    result = erag.eval(
        retrieval_results=docs,
        expected_outputs={q: ["unused"] for q in docs},
        text_generator=lambda inputs: {q: d[0] for q, d in inputs.items()},
        downstream_metric=lambda outputs, _: {q: int(d[-1]) for q, d in outputs.items()},
        retrieval_metrics={f"P_{k}", "map", f"ndcg_cut_{k}", "recip_rank", f"success_{k}"},
    )["per_input"]
    ours = erag_metrics(labels)
    names = {
        "eRAG-Precision": f"P_{k}",
        "eRAG-MAP": "map",
        "eRAG-nDCG": f"ndcg_cut_{k}",
        "eRAG-MRR": "recip_rank",
        "eRAG-Hits": f"success_{k}",
    }
    for name, measure in names.items():
        reference = [result[f"q{i}"][measure] for i in range(len(labels))]
        np.testing.assert_allclose(ours[name], reference, rtol=0, atol=1e-9, err_msg=name)


def test_cli_summary_counts_erag_answers_and_grades(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from udcg.cli.annotate import main
    from udcg.io.contexts.jsonl import write_contexts

    monkeypatch.setattr("udcg.judge.load_judge", lambda spec, **options: AnswerJudge())
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_contexts(src, _contexts())
    argv = [str(src), "-o", str(out), "--steps", "erag", "--judge", "openai:m@http://h/v1"]
    assert main([*argv, "--cache", str(tmp_path / "judge.sqlite")]) == 0
    printed = capsys.readouterr().out
    assert "0 answers, 4 eRAG answers; cache hits" in printed
    assert "eRAG grades: ABSTAINED 1, CORRECT 4, INCORRECT 4\n" in printed


class _Stopped(Exception):
    """A run stopped after its first chunk."""


def test_cli_summary_after_a_resume_counts_the_resumed_erag_labels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a resume the eRAG line gives this run's grades and the resumed passages' labels
    (their grades are not kept): together every passage of the output, no more, no less."""
    import udcg.cli.annotate as cli
    from udcg.io.contexts.jsonl import write_contexts

    monkeypatch.setattr("udcg.judge.load_judge", lambda spec, **options: AnswerJudge())
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_contexts(src, _contexts())
    argv = [str(src), "-o", str(out), "--steps", "erag", "--judge", "openai:m@http://h/v1"]
    argv += ["--cache", str(tmp_path / "judge.sqlite"), "--chunk", "1"]
    calls = []

    def first_chunk_only(contexts, **options):
        calls.append(1)
        if len(calls) > 1:
            raise _Stopped
        return annotate(contexts, **options)

    monkeypatch.setattr(cli, "annotate", first_chunk_only)
    with pytest.raises(_Stopped):
        cli.main(argv)
    monkeypatch.setattr(cli, "annotate", annotate)
    capsys.readouterr()
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    # q1 (resumed): Lyon, Paris, Paris; q2, q3 now: the grades the whole run gives, less q1's
    assert (
        "eRAG grades: ABSTAINED 1, CORRECT 2, INCORRECT 3 (passages labelled now); resumed "
        "passages: correct 2, not correct 1\n"
    ) in printed
