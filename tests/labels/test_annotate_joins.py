"""Joins of the annotate steps: relevance another judge's LLM computed is not a given label, a
string relabel leaves no stale LLM probability, a run that fails before writing anything leaves
nothing to resume, and an empty step list is a usage error."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from udcg.cli.annotate import main as annotate_main
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import read_contexts, write_contexts
from udcg.io.contexts.model import Context, Passage
from udcg.judge import Judge
from udcg.labels.annotate import annotate


class Sure(Judge):
    """P(Yes) = 0.9 for every relevance check."""

    def __init__(self, name: str) -> None:
        self.name = self.fingerprint = name

    def yes_prob(self, prompts):
        return np.full(len(prompts), 0.9)


CTX = Context("q1", [Passage("d1", text="Rome is in Italy.")], question="Q?", answers=["Paris"])


def test_relevance_an_other_judges_llm_computed_is_not_kept_as_given() -> None:
    (by_a,), _ = annotate([CTX], Sure("a"), steps=["relevance"], relevance="llm")
    assert by_a.passages[0].relevant is True
    with pytest.raises(UDCGInputError, match=r"passages\[0\].relevant.*computed by the LLM of a"):
        annotate([by_a], Sure("b"), steps=["relevance"], relevance="llm")
    _, report = annotate([by_a], Sure("a"), steps=["relevance"], relevance="llm")
    assert report.relevance_kept == 1  # its own label: kept
    (by_b,), _ = annotate(
        [by_a], Sure("b"), steps=["relevance"], relevance="llm", relabel_relevance=True
    )
    assert by_b.passages[0].extra["relevance_prob"] == {"a": 0.9, "b": 0.9}
    (by_string,), _ = annotate([by_a], Sure("b"), steps=["relevance"], relabel_relevance=True)
    assert by_string.passages[0].relevant is False  # no "Paris" in the passage
    assert "relevance_prob" not in by_string.passages[0].extra


def test_a_run_that_fails_before_writing_leaves_nothing_to_resume(tmp_path, capsys) -> None:
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_contexts(inp, [CTX])
    pre = tmp_path / "pre.jsonl"
    pre.write_text('{"question": "Other?", "passage": "x", "abstain_prob": 0.5}\n')
    argv = [str(inp), "-o", str(out), "--judge", f"precomputed:{pre}", "--steps", "abstain"]
    assert annotate_main(argv) == 2  # no value for the pair
    assert "no precomputed abstain_prob" in capsys.readouterr().err
    assert not list(tmp_path.glob("out.jsonl*"))  # no partial file, manifest or output
    pre.write_text('{"question": "Q?", "passage": "Rome is in Italy.", "abstain_prob": 0.5}\n')
    assert annotate_main(argv) == 0  # the corrected command is not refused
    assert next(iter(read_contexts(out))).passages[0].abstain_prob == {"pre": 0.5}


@pytest.mark.parametrize("steps", ["", ",", " "])
def test_an_empty_step_list_is_a_usage_error(tmp_path, capsys, steps) -> None:
    with pytest.raises(SystemExit) as exit_:
        annotate_main(["in.jsonl", "-o", str(tmp_path / "o.jsonl"), "--steps", steps])
    assert exit_.value.code == 2
    assert "argument --steps: expected an item" in capsys.readouterr().err


def test_a_judge_value_that_is_not_a_probability_is_one_error_naming_the_context() -> None:
    from udcg.errors import UDCGServiceError

    class Broken(Judge):
        name = fingerprint = "broken"

        def abstain_prob(self, questions, passages, mode="first_token"):
            return np.full(len(questions), np.nan)

    with pytest.raises(UDCGServiceError, match="judge 'broken' gave abstain_prob nan, not a"):
        annotate([CTX], Broken(), steps=["abstain"])


def test_relevance_a_label_its_own_value_disagrees_with_is_not_kept() -> None:
    """b labels No, a relabels Yes, b runs again: the label is a's although b's value is there."""

    class Doubtful(Sure):
        def yes_prob(self, prompts):
            return np.full(len(prompts), 0.1)

    (by_b,), _ = annotate([CTX], Doubtful("b"), steps=["relevance"], relevance="llm")
    (by_a,), _ = annotate(
        [by_b], Sure("a"), steps=["relevance"], relevance="llm", relabel_relevance=True
    )
    assert by_a.passages[0].relevant is True
    with pytest.raises(UDCGInputError, match=r"computed by the LLM of a.*disagrees with b: 0.1"):
        annotate([by_a], Doubtful("b"), steps=["relevance"], relevance="llm")
    _, report = annotate([by_a], Sure("a"), steps=["relevance"], relevance="llm")
    assert report.relevance_kept == 1  # a's own label, which its value agrees with


def test_a_manifest_records_the_judge_of_values_a_run_keeps(tmp_path) -> None:
    """Judge key ``vals`` with file b (abstain), then with file a (answer likelihood only) on
    its output: the second manifest says the abstention values are b's (``kept``), so the
    utilities read from it carry b's fingerprint, not a's."""
    import json

    from udcg.cli.annotate import main as annotate_main
    from udcg.io.joins.utilities import read_utility_file
    from udcg.io.manifests import manifest_path
    from udcg.judge import load_judge

    ctx = {
        "qid": "q1",
        "question": "Q?",
        "answers": ["x"],
        "passages": [{"doc_id": "d", "text": "P."}],
    }
    (tmp_path / "in.jsonl").write_text(json.dumps(ctx) + "\n")
    for name, p in (("a", 0.1), ("b", 0.6)):
        (tmp_path / name).mkdir()
        row = {"question": "Q?", "passage": "P.", "abstain_prob": p, "answer_prob": 0.5}
        (tmp_path / name / "vals.jsonl").write_text(json.dumps(row) + "\n")

    def run(src: str, out: str, judge: str, step: str) -> None:
        args = [str(tmp_path / src), "-o", str(tmp_path / out), "--steps", step]
        judge_args = ["--judge", f"precomputed:{tmp_path / judge / 'vals.jsonl'}"]
        assert annotate_main([*args, *judge_args, "--cache", str(tmp_path / "c.sqlite")]) == 0

    run("in.jsonl", "b1.jsonl", "b", "abstain")
    run("b1.jsonl", "b2.jsonl", "a", "answer_likelihood")
    fingerprint = {
        n: load_judge(f"precomputed:{tmp_path / n / 'vals.jsonl'}").fingerprint for n in "ab"
    }
    manifest = json.loads(manifest_path(tmp_path / "b2.jsonl").read_text())
    assert manifest["judge_fingerprint"] == fingerprint["a"]
    made = {"abstain": fingerprint["b"], "answer_likelihood": fingerprint["a"]}
    assert manifest["judges"] == {"vals": made}
    # a run of another key in between carries it on
    (tmp_path / "c").mkdir()
    row = {"question": "Q?", "passage": "P.", "abstain_prob": 0.3}
    (tmp_path / "c" / "other.jsonl").write_text(json.dumps(row) + "\n")
    args = [str(tmp_path / "b1.jsonl"), "-o", str(tmp_path / "c1.jsonl"), "--steps", "abstain"]
    other = ["--judge", f"precomputed:{tmp_path / 'c' / 'other.jsonl'}"]
    assert annotate_main([*args, *other, "--cache", str(tmp_path / "c.sqlite")]) == 0
    run("c1.jsonl", "c2.jsonl", "a", "answer_likelihood")
    assert (
        read_utility_file(tmp_path / "c2.jsonl", "abstain_prob", "vals").fingerprint
        == (fingerprint["b"])
    )
    utilities = read_utility_file(tmp_path / "b2.jsonl", "abstain_prob", "vals")
    assert utilities.fingerprint == fingerprint["b"]
    assert (
        read_utility_file(tmp_path / "b2.jsonl", "answer_prob", "vals").fingerprint
        == fingerprint["a"]
    )


def test_a_kept_label_s_own_value_must_be_a_probability() -> None:
    passage = Passage("d1", text="Rome.", relevant=True, extra={"relevance_prob": {"b": "0.9"}})
    with pytest.raises(UDCGInputError, match=r"relevance_prob.b': expected a probability"):
        annotate(
            [replace(CTX, passages=[passage])], Sure("b"), steps=["relevance"], relevance="llm"
        )


def test_a_manifest_without_judges_reads_as_its_run_made_it(tmp_path) -> None:
    """A manifest from before ``judges`` names the steps of its run, string relevance aside
    (its labels are no LLM's), as ``made_by`` counts them for a run now."""
    import json

    from udcg.io.manifests import file_sha256, manifest_path, recorded_judges

    out = tmp_path / "out.jsonl"
    out.write_text("{}\n")
    run = {"judge": "m", "judge_fingerprint": "fp", "steps": ["abstain", "relevance"]}
    for relevance, steps in (("string", {"abstain"}), ("llm", {"abstain", "relevance"})):
        manifest = {**run, "relevance": relevance, "output_sha256": file_sha256(out)}
        manifest_path(out).write_text(json.dumps(manifest))
        assert set(recorded_judges(out)["m"]) == steps
