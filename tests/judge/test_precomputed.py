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
