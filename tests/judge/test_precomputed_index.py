"""The precomputed judge's on-disk index for large files: same lookups as the dict, built once."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest

from udcg.errors import UDCGInputError
from udcg.judge.precomputed import PrecomputedIndex, PrecomputedJudge

LINES = [
    '{"question": "q", "passage": "a", "abstain_prob": 0.25, "answer_prob": 0.5}',
    f'{{"question": "q", "passage": "b", "abstain_logprob": {math.log(0.125)}}}',
    '{"question": "q2", "passage": "a", "answer_prob": 0.75}',
    '{"question": "q", "passage": "a", "abstain_prob": 0.25}',  # the same value again: fine
]


@pytest.fixture
def indexed(monkeypatch, tmp_path: Path) -> Path:
    """Every file goes to the index; the index lives under ``tmp_path``."""
    monkeypatch.setattr(PrecomputedJudge, "in_memory_bytes", 0)
    monkeypatch.setenv("UDCG_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "precomputed"


def test_index_lookups_match_the_file(tmp_path: Path, indexed: Path, monkeypatch) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(LINES) + "\n\n")
    judge = PrecomputedJudge(path)
    digest = hashlib.sha256("".join(line + "\n" for line in LINES).encode()).hexdigest()
    assert judge.fingerprint == f"precomputed:{digest}"
    assert [p.name for p in indexed.iterdir()] == [f"{digest}.v3.sqlite"]
    np.testing.assert_array_equal(
        judge.abstain_prob(["q", "q"], ["b", "a"]), [math.exp(math.log(0.125)), 0.25]
    )
    np.testing.assert_array_equal(
        judge.answer_prob(["q2", "q"], ["a", "a"], [["x"], ["y"]]), [0.75, 0.5]
    )
    with pytest.raises(UDCGInputError, match="no precomputed abstain_prob for question 'q2'"):
        judge.abstain_prob(["q2"], ["a"])
    # built once: the next judge on the same content opens the index as it is
    monkeypatch.setattr(PrecomputedIndex, "_build", staticmethod(lambda *a: 1 / 0))
    again = PrecomputedJudge(path)
    np.testing.assert_array_equal(again.abstain_prob(["q"], ["a"]), [0.25])
    assert again.fingerprint == judge.fingerprint


def test_index_and_dict_agree_on_many_pairs(tmp_path: Path, indexed: Path, monkeypatch) -> None:
    rng = np.random.default_rng(0)
    values = rng.random(2000)
    path = tmp_path / "p.jsonl"
    path.write_text(
        "".join(
            f'{{"question": "q{i % 7}", "passage": "p{i}", "abstain_prob": {float(v)!r}}}\n'
            for i, v in enumerate(values)
        )
    )
    questions, passages = [f"q{i % 7}" for i in range(2000)], [f"p{i}" for i in range(2000)]
    order = rng.permutation(2000)
    got = PrecomputedJudge(path).abstain_prob(
        [questions[i] for i in order], [passages[i] for i in order]
    )
    np.testing.assert_array_equal(got, values[order])
    monkeypatch.setattr(PrecomputedJudge, "in_memory_bytes", 1 << 30)
    in_memory = PrecomputedJudge(path)
    assert in_memory._index is None
    np.testing.assert_array_equal(in_memory.abstain_prob(questions, passages), values)


def test_bad_lines_are_located_and_leave_no_index(tmp_path: Path, indexed: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(LINES[0] + "\n" + '{"question": "q", "passage": "z", "abstain_prob": 2}\n')
    with pytest.raises(UDCGInputError, match="not a probability") as err:
        PrecomputedJudge(path)
    assert err.value.line == 2
    assert not any(indexed.iterdir())  # the temporary file is removed


@pytest.mark.parametrize("in_memory", [True, False])
def test_two_values_for_one_pair_are_refused(tmp_path: Path, monkeypatch, in_memory) -> None:
    """A pair given two values (two lines, or a probability and a log-probability that
    disagree) is refused at its line, in memory and in the index; nothing is indexed."""
    monkeypatch.setenv("UDCG_CACHE_DIR", str(tmp_path / "cache"))
    if not in_memory:
        monkeypatch.setattr(PrecomputedJudge, "in_memory_bytes", 0)
    path = tmp_path / "p.jsonl"
    path.write_text(LINES[0] + '\n{"question": "q", "passage": "a", "abstain_prob": 0.7}\n')
    earlier = "line 1" if in_memory else "an earlier line"
    with pytest.raises(UDCGInputError, match=rf"p.jsonl:2: field 'abstain_prob': 0.7 .*{earlier}"):
        PrecomputedJudge(path)
    path.write_text('{"question": "q", "passage": "a", "abstain_prob": 0.9, "abstain_logprob": -3}')
    with pytest.raises(UDCGInputError, match=r"p.jsonl:1: field 'abstain_prob': 0.9 disagrees"):
        PrecomputedJudge(path)
    assert not list((tmp_path / "cache").rglob("*.sqlite"))


def test_a_piped_file_is_read_once_and_damage_is_located(tmp_path: Path, monkeypatch) -> None:
    import gzip
    import os
    import threading

    monkeypatch.setenv("UDCG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(PrecomputedJudge, "in_memory_bytes", 0)  # two passes over the lines
    fifo = tmp_path / "judge.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text("\n".join(LINES) + "\n"))
    writer.start()
    judge = PrecomputedJudge(fifo)
    writer.join()
    np.testing.assert_array_equal(judge.abstain_prob(["q"], ["a"]), [0.25])
    for name, data, message in (
        ("big.jsonl", b'{"question": "q", "passage": "a", "abstain_prob": 1' + b"0" * 400 + b"}",
         "not a finite number"),
        ("bytes.jsonl", LINES[0].encode() + b"\n\xff\xfe\n", "2: not valid UTF-8"),
        ("cut.jsonl.gz", gzip.compress(("\n".join(LINES) + "\n").encode())[:-12], "cannot read"),
    ):  # fmt: skip
        (tmp_path / name).write_bytes(data)
        with pytest.raises(UDCGInputError, match=message):
            PrecomputedJudge(tmp_path / name)
