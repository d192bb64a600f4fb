"""Strict parsing of judge replies: Yes/No words, decomposition JSON, and the label CLI's
input checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from udcg.cli.qcare import main
from udcg.qcare import parse_yes_no
from udcg.qcare.labels.decompose import MAX_ITEMS, claims_value, subqueries_value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Yes", True),
        (" yes.", True),
        ("**No**", False),
        ("No, because", False),
        ("Yesterday", None),
        ("I think yes", None),
        ("", None),
        ("Maybe", None),
    ],
)
def test_parse_yes_no_reads_only_the_first_word(text: str, expected: bool | None) -> None:
    assert parse_yes_no(text) is expected


def test_decomposition_validators() -> None:
    assert subqueries_value({"subqueries": ["A?", " a? ", "B  c?"]}) == ["A?", "B c?"]
    assert claims_value(["x"]) == ["x"]
    for bad in ({"subqueries": []}, {"other": ["a"]}, {"subqueries": [{"q": "a"}]}, "a", [""]):
        with pytest.raises(ValueError):
            subqueries_value(bad)
    with pytest.raises(ValueError, match="at most"):
        claims_value([f"c{i}" for i in range(MAX_ITEMS + 1)])


def test_label_cli_checks_inputs_before_loading_the_judge(tmp_path: Path, capsys) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(
        json.dumps({"qid": "q", "question": "a?", "passages": [{"text": "t"}]})
        + "\n"
        + json.dumps({"qid": "q2", "passages": [{"text": "t"}]})
        + "\n"
    )
    args = ["label", str(path), str(tmp_path / "out.jsonl"), "--judge", "precomputed:/nowhere"]
    assert main(args) == 2
    assert "in.jsonl:2: field 'question': missing or empty" in capsys.readouterr().err
    path.write_text(json.dumps({"qid": "q", "question": "a?", "passages": [{"text": "t"}]}))
    assert main([*args, "--answers-from", "gen"]) == 2
    assert "field 'outcomes.gen.answer': missing" in capsys.readouterr().err


def test_label_refuses_an_output_another_process_writes(
    tmp_path: Path, capsys, another_writer
) -> None:
    """Two labelling runs into one file: the second is refused before it reads or asks
    anything, instead of replacing the first's labels when it ends."""
    path, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    path.write_text(json.dumps({"qid": "q", "question": "a?", "passages": [{"text": "t"}]}))
    with another_writer(out):
        assert main(["label", str(path), "-o", str(out), "--judge", "smollm2-135m"]) == 2
    err = capsys.readouterr().err
    assert "another process is writing this qcare label output" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()
