"""Utilities per (query, document) from dicts, TSV and JSONL files: what a value means, and
located errors for every malformed input."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from udcg.errors import UDCGInputError
from udcg.io.joins.utilities import (
    Utilities,
    as_utilities,
    read_utility_file,
    source_of,
    utilities_from_dict,
)


def _pairs(u: Utilities) -> dict[tuple[str, str], float]:
    return dict(
        zip(
            zip(u.qids.to_pylist(), u.doc_ids.to_pylist(), strict=True),
            u.values.tolist(),
            strict=True,
        )
    )


def test_tsv_holds_abstain_probabilities_by_default(tmp_path: Path) -> None:
    path = tmp_path / "u.tsv.gz"
    with gzip.open(path, "wt") as f:
        f.write("q1\td1\t0.25\n\nq1 d2   1\nq2\td1\t0\n")
    u = read_utility_file(path)
    assert u.field == "abstain_prob" and u.source == str(path)
    assert _pairs(u) == {("q1", "d1"): 0.75, ("q1", "d2"): 0.0, ("q2", "d1"): 1.0}
    assert _pairs(read_utility_file(path, "utility")) == {
        ("q1", "d1"): 0.25,
        ("q1", "d2"): 1.0,
        ("q2", "d1"): 0.0,
    }
    assert read_utility_file(path, "answer_prob").field == "answer_prob"


def test_jsonl_lines_say_what_they_hold(tmp_path: Path) -> None:
    path = tmp_path / "u.jsonl"
    path.write_text(
        '{"qid": "q1", "doc_id": "d1", "answer_prob": 0.2}\n\n'
        '{"qid": 7, "doc_id": "d2", "answer_prob": 1}\n'
    )
    u = read_utility_file(path)
    assert u.field == "answer_prob"
    assert _pairs(u) == {("q1", "d1"): 0.2, ("7", "d2"): 1.0}
    # with utility_field, every line must hold that key (others are ignored)
    both = tmp_path / "both.jsonl"
    both.write_text('{"qid": "q", "doc_id": "d", "abstain_prob": 0.1, "answer_prob": 0.3}\n')
    assert _pairs(read_utility_file(both, "abstain_prob")) == {("q", "d"): 0.9}
    with pytest.raises(UDCGInputError, match="exactly one of"):
        read_utility_file(both)
    with pytest.raises(UDCGInputError, match="field 'utility': missing"):
        read_utility_file(path, "utility")


def test_dicts_and_ready_objects() -> None:
    u = utilities_from_dict({"q": {"a": 0.1, "b": 1}}, "abstain_prob")
    assert u.field == "abstain_prob" and u.source is None
    np.testing.assert_allclose(u.values, [0.9, 0.0])
    assert as_utilities(u) is u and as_utilities(u, "abstain_prob") is u
    with pytest.raises(UDCGInputError, match="hold abstain_prob, not utility"):
        as_utilities(u, "utility")
    assert source_of("abstain_prob").name == "abstention"
    assert source_of("answer_prob").name == "answer_likelihood"
    assert source_of("utility") is None


@pytest.mark.parametrize(
    ("content", "line", "fragment"),
    [
        ("q1 d1 0.5\nq1 d2 1.5\n", 2, "'1.5' is not a probability in [0, 1]"),
        ("q1 d1 0.5\nq1 d2 nan\n", 2, "'nan' is not a probability"),
        ("q1 d1 0.5\nq1 d2 high\n", 2, "field 'p': 'high' is not a number"),
        ("q1 d1 0.5\nq1 d2\n", 2, "expected 3 columns"),
        ("q1 d1 0.5\nq2 d1 0.5\nq1 d1 0.2\n", 3, "duplicate document 'd1' for query 'q1'"),
        ('{"qid": "q", "doc_id": "d", "utility": 0.5}\n{"qid": "q"\n', 2, "malformed JSON"),
        ('{"qid": "q", "doc_id": "d", "utility": 2}\n', 1, "field 'utility': must be a prob"),
        ('{"qid": "q", "doc_id": "d", "utility": 0.5}\n[1]\n', 2, "expected a JSON object"),
        ('{"qid": "", "doc_id": "d", "utility": 0.5}\n', 1, "field 'qid'"),
        ('{"qid": "q", "utility": 0.5}\n', 1, "field 'doc_id'"),
        (
            '{"qid": "q", "doc_id": "d", "utility": 0.5}\n{"qid": "q", "doc_id": "e", '
            '"abstain_prob": 0.5}\n',
            2,
            "earlier lines hold utility",
        ),
        (
            '{"qid": "q", "doc_id": "d", "utility": 0.5}\n{"qid": "q", "doc_id": "d", '
            '"utility": 0.1}\n',
            2,
            "duplicate document 'd' for query 'q'",
        ),
    ],
)
def test_malformed_files_are_located(
    tmp_path: Path, content: str, line: int, fragment: str
) -> None:
    path = tmp_path / "u.txt"
    path.write_text(content)
    with pytest.raises(UDCGInputError) as err:
        read_utility_file(path)
    assert str(err.value).startswith(f"{path}:{line}: "), str(err.value)
    assert fragment in str(err.value)


def test_empty_or_missing_files_and_bad_fields(tmp_path: Path) -> None:
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n \n")
    with pytest.raises(UDCGInputError, match="empty file"):
        read_utility_file(empty)
    with pytest.raises(UDCGInputError, match="no such file"):
        read_utility_file(tmp_path / "nope.tsv")
    with pytest.raises(UDCGInputError, match="field 'utility_field': expected one of"):
        read_utility_file(empty, "abstain")
    with pytest.raises(UDCGInputError, match="not a number"):
        utilities_from_dict({"q": {"d": "0.5"}}, "abstain_prob")
