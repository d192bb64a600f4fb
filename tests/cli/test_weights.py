"""udcg weights show: the card of a weights folder or file, with the SHA-256 verified."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from udcg.cli.main import main as udcg_main
from udcg.cli.weights import main
from udcg.judge.prompts import prompt_record
from udcg.theta import UDCGTheta


@pytest.fixture
def model() -> UDCGTheta:
    model = UDCGTheta(3)
    model.alpha_, model.beta_, model.intercept_ = np.array([1.25, 0.5, 0.2]), -np.ones(3), 0.0
    return model


def test_show_prints_the_card_and_verifies(tmp_path: Path, model: UDCGTheta, capsys) -> None:
    heldout = [{"metric": "UDCG-theta", "spearman": 0.41, "ci95": [0.3, 0.52]}]
    card = {"judge_model": "sim", "abstention_mode": "first_token", "heldout": heldout}
    model.save_pretrained(tmp_path / "theta", card=card)
    assert udcg_main(["weights", "show", str(tmp_path / "theta")]) == 0
    out = capsys.readouterr().out
    for text in (
        "k:               3",
        "judge:           sim",
        "utility source:  abstention",
        "abstention mode: first_token",
        f"prompt SHA-256:  {prompt_record()['sha256']}",
        "(verified)",
        "UDCG-theta    +0.410  [+0.300, +0.520]",
    ):
        assert text in out
    assert out.splitlines()[-3].split() == ["1", "1.25", "-1"]
    # an old single-file export shows too (fields it does not record: unknown)
    model.save(tmp_path / "old.safetensors", card={"judge_model": "sim"})
    assert main(["show", str(tmp_path / "old.safetensors")]) == 0
    assert "prompt SHA-256:  unknown" in capsys.readouterr().out


def test_show_fails_on_tampered_weights(tmp_path: Path, model: UDCGTheta, capsys) -> None:
    model.save_pretrained(tmp_path / "theta")
    path = tmp_path / "theta" / "model.safetensors"
    blob = bytearray(path.read_bytes())
    blob[-2] ^= 0x01
    path.write_bytes(bytes(blob))
    assert main(["show", str(tmp_path / "theta")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.strip().splitlines()
    assert line.startswith(f"udcg weights: error: {path}: ") and "SHA-256 differs" in line
