"""The precomputed judge: lookups, file errors, unsupported operations."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from udcg.errors import UDCGInputError
from udcg.judge import load_judge


def test_lookups_from_prob_and_logprob(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(
        '{"question": "q", "passage": "a", "abstain_prob": 0.25}\n\n'
        f'{{"question": "q", "passage": "b", "abstain_logprob": {math.log(0.5)}}}\n'
    )
    judge = load_judge(f"precomputed:{path}")
    np.testing.assert_allclose(judge.abstain_prob(["q", "q"], ["b", "a"]), [0.5, 0.25])
    with pytest.raises(UDCGInputError, match="no precomputed abstain_prob"):
        judge.abstain_prob(["q"], ["c"])
    with pytest.raises(UDCGInputError, match="only provides stored probabilities"):
        judge.generate([[{"role": "user", "content": "hi"}]])


def test_answer_prob_lookups_are_separate_from_abstention(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(
        '{"question": "q", "passage": "a", "abstain_prob": 0.25, "answer_prob": 0.75}\n'
        f'{{"question": "q", "passage": "b", "answer_logprob": {math.log(0.125)}}}\n'
    )
    judge = load_judge(f"precomputed:{path}")
    np.testing.assert_allclose(
        judge.answer_prob(["q", "q"], ["b", "a"], [["x"], ["y"]]), [0.125, 0.75]
    )
    with pytest.raises(UDCGInputError, match="no precomputed abstain_prob"):
        judge.abstain_prob(["q"], ["b"])  # only its answer likelihood is stored
    with pytest.raises(UDCGInputError, match=r"answers\[0\].*no answers"):
        judge.answer_prob(["q"], ["a"], [[]])


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ('{"question": "q", "passage": "a", "abstain_prob": 1.5}', "not a probability"),
        ('{"question": "q", "passage": "a", "abstain_prob": NaN}', "not a finite number"),
        ('{"question": "q", "abstain_prob": 0.1}', "field 'passage'"),
        ('{"question": "q", "passage": "a"', "malformed JSON"),
        ('{"question": "q", "passage": "a", "answer_logprob": 0.5}', "not a probability"),
        ('{"question": "q", "passage": "a"}', "needs abstain_prob"),
    ],
)
def test_bad_lines_are_located(tmp_path: Path, line: str, fragment: str) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"question": "q", "passage": "z", "abstain_prob": 0.1}\n' + line + "\n")
    with pytest.raises(UDCGInputError, match=fragment) as err:
        load_judge(f"precomputed:{path}")
    assert f"{path}:2" in str(err.value)


@pytest.mark.parametrize("in_memory", [True, False])
def test_two_pairs_of_one_prompt_are_one_pair(tmp_path: Path, monkeypatch, in_memory) -> None:
    """The judge cache keys a pair by its prompt: two pairs rendering one prompt with other
    values are refused at the second line (dict and SQLite index alike); the same value given
    as a probability on one line and as a log-probability on another is one value."""
    import json

    from udcg.judge.precomputed import PrecomputedJudge

    if not in_memory:
        monkeypatch.setattr(PrecomputedJudge, "in_memory_bytes", 0)
    monkeypatch.setenv("UDCG_CACHE_DIR", str(tmp_path / "cache"))
    one = {"question": "Who?", "passage": "Doc\nQuestion: When?", "abstain_prob": 0.1}
    other = {"question": "When?\nQuestion: Who?", "passage": "Doc", "abstain_prob": 0.9}
    path = tmp_path / "pre.jsonl"
    path.write_text(f"{json.dumps(one)}\n{json.dumps(other)}\n")
    with pytest.raises(UDCGInputError, match=r"pre.jsonl:2: .*0.9 for a \(question, passage\)"):
        PrecomputedJudge(path)
    as_prob = {"question": "Q?", "passage": "P.", "abstain_prob": 0.01}
    as_log = {"question": "Q?", "passage": "P.", "abstain_logprob": math.log(0.01)}
    path.write_text("".join(json.dumps(row) + "\n" for row in (one, as_prob, as_log)))
    judge = PrecomputedJudge(path)
    np.testing.assert_allclose(
        judge.abstain_prob(["Q?", "Who?"], ["P.", one["passage"]]), [0.01, 0.1]
    )
