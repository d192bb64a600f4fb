"""Inputs on which fuzzing the readers (``bench/fuzz_readers.py``) found a reader raising
something other than a located UDCGInputError, or misreading a line."""

from __future__ import annotations

import gzip
import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import read_contexts
from udcg.io.formats.reference import read_reference_json
from udcg.io.formats.trec import read_trec_qrels, read_trec_run, run_from_dict, write_trec_run
from udcg.io.joins.trec_contexts import read_trec_contexts
from udcg.io.weights.files import card_digest
from udcg.theta import UDCGTheta

RUN = b"q1 Q0 d1 1 2.5 t\nq1 Q0 d2 2 1.5 t\n" * 50
GZ = gzip.compress(RUN, mtime=0)


@pytest.mark.parametrize(
    ("read", "data", "message"),
    [
        (read_trec_run, GZ[:-30], r"f:\d+: cannot read the file: Compressed file ended"),
        (read_trec_run, GZ[:-8] + bytes(4) + GZ[-4:], r"f:\d+: cannot read the file: CRC check"),
        (read_reference_json, gzip.compress(b"[{}]")[:-5], r"f:1: cannot read the file"),
        (read_trec_run, b"q1 Q0  1 2.5 t\n", r"f:1: expected 6 columns .* found 5"),
        (read_trec_run, b"q1  Q0 d1 1 2.5\n", r"f:1: expected 6 columns .* found 5"),
        (read_trec_qrels, b"q1 0  1\n", r"f:1: expected 4 columns .* found 3"),
        (read_trec_run, b"\xef\xbb\xbf Q0 d1 1 2.5 t\n", r"f:1: expected 6 columns .* found 5"),
        (read_trec_run, b"q1\tQ0\td1\t1\t1_000\tt\n", r"f:1: field 'score': '1_000' is not a"),
        (read_trec_run, b"\x1f", r"f:1: expected 6 columns .* found 1"),
        (read_trec_qrels, b"q1\t0\td1\t18446744073709551616\n", r"f:1: field 'relevance'"),
        (lambda p: list(read_contexts(p)), b"[" * 100_000, r"f:1: malformed JSON: nested too"),
        (lambda p: list(read_contexts(p)), b'{"qid": ' + b"9" * 5000, r"f:1: .* more digits"),
        (read_reference_json, b"[\n" + b"[" * 100_000, r"f:2: malformed JSON: nested too deeply"),
    ],
)
def test_damaged_file_is_a_located_error(tmp_path: Path, read, data: bytes, message: str):
    path = tmp_path / "f"
    path.write_bytes(data)
    with pytest.raises(UDCGInputError, match=message):
        read(path)


def test_a_tab_separated_line_after_a_spaced_one_is_read_by_columns(tmp_path: Path):
    path = tmp_path / "run"
    path.write_bytes(b"q1 Q0 d1 1 2.5 t\nq2 \tQ0 \td2 \t1 \t1.5 \tt\n")
    assert read_trec_run(path).to_dict() == {"q1": {"d1": 2.5}, "q2": {"d2": 1.5}}


def test_a_run_row_after_a_lone_carriage_return_is_located(tmp_path: Path):
    files = {
        "run": b"q Q0 d1 1 2 t\rq Q0 d2 2 1 t\n",
        "qrels": b"q 0 d1 1\n",
        "utilities": b"q d1 0.5\n",
        "outcomes": b"q 1\n",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    paths = [tmp_path / name for name in files]
    with pytest.raises(UDCGInputError, match=r"run:1: field 'utilities': document 'd2'"):
        read_trec_contexts(*paths, judge="j", k=3)


def _saved_model(tmp_path: Path) -> tuple[Path, dict]:
    model = UDCGTheta(2)
    model.alpha_, model.beta_, model.intercept_ = np.ones(2), -np.ones(2), 0.0
    path = tmp_path / "m.safetensors"
    return path, json.loads(model.save(path).read_text())


def _replace_header(blob: bytes, old: bytes, new: bytes) -> bytes:
    (size,) = struct.unpack("<Q", blob[:8])
    header = blob[8 : 8 + size].replace(old, new)
    return struct.pack("<Q", len(header)) + header + blob[8 + size :]


def test_a_card_too_deep_or_with_a_huge_l2_is_a_located_error(tmp_path: Path):
    path, card = _saved_model(tmp_path)
    (tmp_path / "m.json").write_text("[" * 100_000)
    with pytest.raises(UDCGInputError, match=r"m\.json: model card is not valid JSON"):
        UDCGTheta.load(path, k=2)
    (tmp_path / "m.json").write_text(json.dumps({**card, "l2": 10**400}))
    with pytest.raises(UDCGInputError, match=r"m\.json: field 'l2': expected a finite number"):
        UDCGTheta.load(path, k=2)


def test_a_bfloat16_tensor_is_a_located_error(tmp_path: Path):
    path, card = _saved_model(tmp_path)
    blob = _replace_header(path.read_bytes(), b'"F64","shape":[]', b'"BF16","shape":[4]')
    path.write_bytes(blob)
    card["weights_sha256"] = hashlib.sha256(blob).hexdigest()
    card["card_sha256"] = card_digest(card)  # a card that verifies the tampered file
    (tmp_path / "m.json").write_text(json.dumps(card))
    with pytest.raises(UDCGInputError, match=r"m\.safetensors: a tensor has dtype BF16"):
        UDCGTheta.load(path, k=2)


def test_a_written_run_reads_back_the_same(tmp_path: Path) -> None:
    # numpy 2 scalars once wrote their repr (np.float64(11.1)) into the score column
    run = {"q1": {"d1": 11.1, "d2": 0.1 + 0.2, "d3": -3.0}, "q2": {"d9": 1e-300}}
    write_trec_run(tmp_path / "run.trec", run_from_dict(run))
    assert read_trec_run(tmp_path / "run.trec").to_dict() == run


@pytest.mark.parametrize("command", ["score", "order"])
def test_a_grade_above_one_is_located_where_udcg_needs_unit_relevance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    # found by the contexts_score fuzzer: the metric's range check named no file or line
    from udcg.cli import order, score

    line = {"qid": "q1", "passages": [{"doc_id": "d1", "relevant": 1, "abstain_prob": {"m": 0.5}}]}
    graded = {**line, "qid": "q2", "passages": [{**line["passages"][0], "relevant": 2}]}
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(line) + "\n" + json.dumps(graded) + "\n")
    if command == "score":
        status = score.main([str(path), "--judge", "m"])
    else:
        model = UDCGTheta(k=1)
        model.alpha_, model.beta_, model.intercept_ = np.ones(1), -np.ones(1), 0.0
        weights = model.save_pretrained(tmp_path / "w", card={"judge_model": "m"})
        status = order.main([str(path), str(tmp_path / "o.jsonl"), "--weights", str(weights)])
    assert status == 2
    err = capsys.readouterr().err
    assert f"{path}:2: field 'passages[0].relevant': grade 2.0 is above 1" in err
