"""udcg.labels.annotate: what each step writes (deterministic stand-in judge), and its errors."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from udcg.cli.annotate import main
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage, read_contexts, write_contexts
from udcg.judge.base import Judge
from udcg.labels.annotate import annotate, parse_grade


class RuleJudge(Judge):
    """Abstains unless the passage mentions 'Paris'; answers with the first passage's first word."""

    name = "rule"
    fingerprint = "rule-v1"

    def __init__(self, grade_reply: str = "CORRECT") -> None:
        self.calls: list[int] = []
        self.grade_reply = grade_reply

    def abstain_prob(self, questions, passages, mode="first_token") -> np.ndarray:
        self.calls.append(len(passages))
        return np.array([0.1 if "Paris" in p else 0.9 for p in passages])

    def answer_prob(self, questions, passages, answers) -> np.ndarray:
        self.calls.append(len(passages))
        # an answer found in the passage: 0.6 plus 0.1 per acceptable answer listed
        return np.array(
            [
                0.6 + 0.1 * len(a) if any(x in p for x in a) else 0.05
                for p, a in zip(passages, answers, strict=True)
            ]
        )

    def yes_prob(self, prompts) -> np.ndarray:
        return np.array(
            [0.8 if "Paris" in m[-1]["content"].split("Document:")[1] else 0.2 for m in prompts]
        )

    def generate(self, prompts: Sequence, max_new_tokens: int = 64) -> list[str]:
        if max_new_tokens == 4:
            return [self.grade_reply for _ in prompts]
        return [m[-1]["content"].split("]: ")[1].split()[0] for m in prompts]


def _contexts() -> list[Context]:
    paris = Passage(doc_id="a", text="Paris is the capital of France.")
    lyon = Passage(doc_id="b", text="Lyon is a large French city.")
    return [
        Context("q1", [paris, lyon], question="Capital of France?", answers=["Paris"]),
        Context("q1", [lyon, paris], run="r2", question="Capital of France?", answers=["Paris"]),
    ]


def test_all_steps() -> None:
    judge = RuleJudge()
    out, report = annotate(_contexts(), judge, relevance="llm")
    assert report.pairs == 2 and judge.calls == [2]  # each distinct pair scored once
    first, second = out
    assert [p.abstain_prob["rule"] for p in first.passages] == [0.1, 0.9]
    assert [p.relevant for p in first.passages] == [True, False]
    assert first.passages[0].extra["relevance_prob"]["rule"] == pytest.approx(0.8)
    assert first.outcomes["rule"] == {
        "answer": "Paris",
        "grader": "span",
        "max_new_tokens": 32,
        "grade": "CORRECT",
        "correct": True,
    }
    assert second.outcomes["rule"]["correct"] is False
    assert report.grades == {"CORRECT": 1, "INCORRECT": 1}


def test_string_relevance_needs_no_llm_and_inputs_are_untouched() -> None:
    contexts = _contexts()
    out, _ = annotate(contexts, RuleJudge(), steps=["relevance"])
    assert [p.relevant for p in out[1].passages] == [False, True]
    assert contexts[0].passages[0].relevant is None


def test_unparsable_llm_grade_is_counted_not_zero() -> None:
    out, report = annotate(_contexts(), RuleJudge("maybe?"), steps=["outcomes"], grader="llm")
    assert report.failures["unparsable grade"] == 2
    assert out[0].outcomes["rule"]["grade"] == "FAILED" and "correct" not in out[0].outcomes["rule"]


@pytest.mark.parametrize(
    ("text", "grade"),
    [("CORRECT.", "CORRECT"), ("abstained", "ABSTAINED"), ("It is correct", None), ("", None)],
)
def test_parse_grade_is_strict(text: str, grade: str | None) -> None:
    assert parse_grade(text) == grade


def test_answer_likelihood_step_stores_its_own_field() -> None:
    judge = RuleJudge()
    contexts = _contexts()
    contexts.append(
        Context(
            "q1",
            [contexts[0].passages[0]],
            run="r3",
            question="Capital of France?",
            answers=["Paris", "paris"],
        )
    )
    out, report = annotate(contexts, judge, steps=["answer_likelihood"])
    # distinct (question, answers, passage): the third context's answer list is another key
    assert report.answer_pairs == 3 and judge.calls == [3] and report.pairs == 0
    assert [p.answer_prob["rule"] for p in out[0].passages] == [0.7, 0.05]
    assert [p.answer_prob["rule"] for p in out[1].passages] == [0.05, 0.7]
    assert out[2].passages[0].answer_prob == {"rule": pytest.approx(0.8)}
    assert all(p.abstain_prob == {} for c in out for p in c.passages)  # only this step ran
    assert all(p.answer_prob == {} for c in contexts for p in c.passages)  # inputs untouched
    # both steps: both fields, each naming its source
    both, _ = annotate(_contexts(), RuleJudge(), steps=["abstain", "answer_likelihood"])
    assert both[0].passages[0].to_json()["abstain_prob"] == {"rule": 0.1}
    assert both[0].passages[0].to_json()["answer_prob"] == {"rule": 0.7}


def test_answer_likelihood_without_answers_is_an_error_not_zero(tmp_path: Path, capsys) -> None:
    path = tmp_path / "in.jsonl"
    write_contexts(
        path, [*_contexts(), Context("q2", [Passage(doc_id="z", text="x")], question="Q?")]
    )
    judge = RuleJudge()
    with pytest.raises(UDCGInputError, match="answer_likelihood needs acceptable answers") as err:
        annotate(list(read_contexts(path)), judge, steps=["answer_likelihood"])
    assert (err.value.line, err.value.field) == (3, "answers") and judge.calls == []
    args = [str(path), str(tmp_path / "o.jsonl"), "--judge", "precomputed:/nonexistent"]
    assert main([*args, "--steps", "answer_likelihood"]) == 2
    msg = capsys.readouterr().err
    assert f"{path}:3: field 'answers'" in msg and "Traceback" not in msg
    assert not (tmp_path / "o.jsonl").exists()
    blank = [Context("q", [Passage(doc_id="a", text="t")], question="Q?", answers=["x", " "])]
    with pytest.raises(UDCGInputError, match=r"answers\[1\]"):
        annotate(blank, judge, steps=["answer_likelihood"])


def test_cli_answer_likelihood_with_precomputed_judge(tmp_path: Path, capsys) -> None:
    path, probs, out = tmp_path / "in.jsonl", tmp_path / "p.jsonl", tmp_path / "out.jsonl"
    write_contexts(path, _contexts())
    rows = [("Paris is the capital of France.", 0.6), ("Lyon is a large French city.", 0.01)]
    probs.write_text(
        "".join(
            json.dumps({"question": "Capital of France?", "passage": t, "answer_prob": p}) + "\n"
            for t, p in rows
        )
    )
    args = [str(path), str(out), "--judge", f"precomputed:{probs}"]
    cache = ["--cache", str(tmp_path / "cache.sqlite")]
    assert main([*args, "--steps", "answer_likelihood", *cache]) == 0
    assert "2 answer-likelihood pairs" in capsys.readouterr().out
    annotated = list(read_contexts(out))
    assert [p.answer_prob["p"] for p in annotated[1].passages] == [0.01, 0.6]
    # the abstention step of the same judge asks for what the file does not hold: an error
    assert main([*args, "--steps", "abstain", *cache]) == 2
    assert "no precomputed abstain_prob" in capsys.readouterr().err
    # answers need a model: refused before the first step asks anything, nothing written
    fresh = [str(path), str(tmp_path / "o2.jsonl"), *args[2:]]
    assert main([*fresh, "--steps", "answer_likelihood,outcomes", *cache]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "udcg annotate: error: field 'steps': the judge 'p' computes abstain_prob, answer_prob "
        "only; step outcomes needs generate: choose other --steps or a model judge"
    )
    assert not list(tmp_path.glob("o2.jsonl*"))


def test_missing_fields_fail_before_any_call(tmp_path: Path) -> None:
    bad = [Context("q", [Passage(doc_id="a", text="  ")], question="Q?", answers=["x"])]
    with pytest.raises(UDCGInputError, match=r"passages\[0\].text"):
        annotate(bad, RuleJudge())
    no_answers = [Context("q", [Passage(doc_id="a", text="t")], question="Q?")]
    with pytest.raises(UDCGInputError, match="answers"):
        annotate(no_answers, RuleJudge(), steps=["outcomes"])


def test_cli_reports_file_and_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "in.jsonl"
    write_contexts(path, [*_contexts(), Context("q2", [Passage(doc_id="z", text="x")])])
    assert (
        main([str(path), str(tmp_path / "out.jsonl"), "--judge", "precomputed:/nonexistent"]) == 2
    )
    err = capsys.readouterr().err
    assert f"{path}:3: field 'question'" in err and "Traceback" not in err
    assert not (tmp_path / "out.jsonl").exists()


def test_cli_with_precomputed_judge(tmp_path: Path, capsys) -> None:
    path, probs, out = tmp_path / "in.jsonl", tmp_path / "p.jsonl", tmp_path / "out.jsonl.gz"
    write_contexts(path, _contexts())
    rows = [("Paris is the capital of France.", 0.2), ("Lyon is a large French city.", 0.7)]
    probs.write_text(
        "".join(
            json.dumps({"question": "Capital of France?", "passage": t, "abstain_prob": p}) + "\n"
            for t, p in rows
        )
    )
    args = [
        str(path),
        str(out),
        "--judge",
        f"precomputed:{probs}",
        "--steps",
        "abstain",
        "relevance",
    ]
    assert main([*args, "--cache", str(tmp_path / "cache.sqlite")]) == 0
    annotated = list(read_contexts(out))
    assert [p.abstain_prob["p"] for p in annotated[1].passages] == [0.7, 0.2]
    assert "cache hits 0, misses 2" in capsys.readouterr().out
    assert main([*args, "--cache", str(tmp_path / "cache.sqlite")]) == 0
    assert "cache hits 2, misses 0" in capsys.readouterr().out


def _given(*labels: bool | None) -> list[Context]:
    """One context whose passages carry ``labels`` as given ``relevant`` (None: no label);
    string matching would call the first passage relevant, the others not."""
    texts = ["Paris is the capital of France."] + [f"Lyon, part {i}." for i in range(1, 9)]
    passages = [
        Passage(doc_id=f"d{i}", text=texts[i], relevant=label) for i, label in enumerate(labels)
    ]
    return [Context("q1", passages, question="Capital of France?", answers=["Paris"])]


def test_relevance_keeps_given_labels_and_fills_missing_ones() -> None:
    contexts = _given(False, True, None, None)  # the given labels contradict string matching
    for relevance in ("string", "llm"):
        out, report = annotate(contexts, RuleJudge(), ["relevance"], relevance=relevance)
        assert [p.relevant for p in out[0].passages] == [False, True, False, False]
        assert (report.relevance_kept, report.relevance_computed) == (2, 2)
        kept = out[0].passages[:2]
        assert kept == contexts[0].passages[:2] and not any(p.extra for p in kept)
    _, report = annotate(contexts, RuleJudge(), ["relevance"], relevance="llm")
    assert report.relevance_checks == 2  # the judge is asked about the unlabelled ones only
    again, report = annotate(contexts, RuleJudge(), ["relevance"], relabel_relevance=True)
    assert [p.relevant for p in again[0].passages] == [True, False, False, False]
    assert (report.relevance_kept, report.relevance_computed) == (0, 4)


def test_given_labels_need_no_answers() -> None:
    labelled = [replace(c, answers=None) for c in _given(True, False)]
    out, report = annotate(labelled, RuleJudge(), ["relevance"], relevance="llm")
    assert [p.relevant for p in out[0].passages] == [True, False] and report.relevance_kept == 2
    with pytest.raises(UDCGInputError, match="step relevance needs acceptable answers"):
        annotate([replace(c, answers=None) for c in _given(True, None)], RuleJudge(), ["relevance"])


def test_cli_default_steps_keep_qrels_labels(tmp_path: Path, capsys, monkeypatch) -> None:
    import udcg.cli.annotate as cli

    judge = RuleJudge()
    judge.cache = type("Counts", (), {"hits": 0, "misses": 0})()
    monkeypatch.setattr(cli, "open_cli_judge", lambda args: judge)
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_contexts(src, _given(False, True, True))  # as udcg contexts --qrels writes them
    assert main([str(src), "-o", str(out)]) == 0  # default steps: abstain relevance outcomes
    assert [p.relevant for p in next(read_contexts(out)).passages] == [False, True, True]
    assert "relevance: kept 3 given labels, computed 0\n" in capsys.readouterr().out
    assert json.loads((tmp_path / "out.jsonl.manifest.json").read_text())["steps"] == [
        "abstain",
        "relevance",
        "outcomes",
    ]
    assert main([str(src), "-o", str(out), "--relabel-relevance"]) == 0
    assert [p.relevant for p in next(read_contexts(out)).passages] == [True, False, False]
    assert "relevance: kept 0 given labels, computed 3\n" in capsys.readouterr().out


class FlatJudge(RuleJudge):
    """Almost never abstains (as the embedded 135M judge): u is about 1 for every passage."""

    name = "flat"

    def abstain_prob(self, questions, passages, mode="first_token") -> np.ndarray:
        return np.array([1e-5 * (1 - 0.1 * ("Paris" in p)) for p in passages])


def _cli_judge(monkeypatch, judge: RuleJudge) -> RuleJudge:
    import udcg.cli.annotate as cli

    judge.cache = type("Counts", (), {"hits": 0, "misses": 0})()
    monkeypatch.setattr(cli, "open_cli_judge", lambda args: judge)
    return judge


def _warnings(stderr: str) -> list[str]:
    """The warning lines of ``udcg annotate``'s stderr (progress lines aside)."""
    return [line for line in stderr.splitlines() if line.startswith("udcg annotate: warning:")]


def _many(n: int = 6) -> list[Context]:
    """``n`` contexts of two passages, one naming Paris (relevant, by string match)."""
    return [replace(c, qid=f"q{i}", run=f"r{i}") for i in range(n) for c in _contexts()[:1]]


def test_cli_warns_once_when_a_utility_source_carries_no_signal(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_contexts(src, _many())
    steps = ["--steps", "abstain", "answer_likelihood", "relevance"]
    _cli_judge(monkeypatch, FlatJudge())
    assert main([str(src), "-o", str(out), *steps]) == 0
    warnings = _warnings(capsys.readouterr().err)
    assert len(warnings) == 1, warnings
    warning = warnings[0]
    assert warning.startswith(
        "udcg annotate: warning: abstention utilities of flat carry almost no information: "
        "90% of its 12 values lie within 1e-06"
    )
    assert (
        "AUROC relevant vs irrelevant 1.000" in warning and "(6 relevant, 6 irrelevant)" in warning
    )
    assert "try --steps answer_likelihood or a larger judge" in (warning)
    _cli_judge(monkeypatch, RuleJudge())  # u 0.1 or 0.9: spread, separating
    out.unlink()
    assert main([str(src), "-o", str(out), *steps]) == 0
    assert _warnings(capsys.readouterr().err) == []


class Interrupted(Exception):
    """Stands for a kill between two chunks."""


def test_cli_summary_and_signal_after_a_resume_count_the_whole_output(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    import udcg.cli.annotate as cli

    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_contexts(src, _many())
    _cli_judge(monkeypatch, FlatJudge())
    chunks = []

    def first_chunk_only(contexts, **options):
        chunks.append(len(contexts))
        if len(chunks) > 2:
            raise Interrupted
        return annotate(contexts, **options)

    monkeypatch.setattr(cli, "annotate", first_chunk_only)
    with pytest.raises(Interrupted):
        main([str(src), "-o", str(out), "--chunk", "2"])
    capsys.readouterr()
    monkeypatch.setattr(cli, "annotate", annotate)
    assert main([str(src), str(out), "--chunk", "2"]) == 0  # abstain relevance outcomes
    printed = capsys.readouterr()
    whole = f"annotated 6 contexts (4 resumed from {out}.partial, 2 now) with flat; judge calls"
    assert whole in printed.out
    assert "relevance: kept 0 given labels, computed 12\n" in printed.out
    assert "grades: CORRECT 6\n" in printed.out  # the judge answers "Paris"
    (warning,) = _warnings(printed.err)
    assert "90% of its 12 values" in warning
