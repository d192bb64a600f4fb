"""udcg weights show: the card of a weights folder or file, with the SHA-256 verified (or
refused without one), card strings escaped."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from udcg.cli.main import main as udcg_main
from udcg.cli.weights import main
from udcg.io.weights.files import card_digest
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
    model.save_pretrained(tmp_path / "theta", card={**card, "utility": "abstention"})
    assert udcg_main(["weights", "show", str(tmp_path / "theta")]) == 0
    out = capsys.readouterr().out
    for text in (
        "k:               3",
        "judge:           sim",
        "utility source:  abstention",
        "abstention mode: first_token",
        f"prompt SHA-256:  {prompt_record()['sha256']}",
        "(verified)",
        "(verified: its entries as udcg wrote them)",
        "UDCG-theta    +0.410  [+0.300, +0.520]",
    ):
        assert text in out
    assert out.splitlines()[-3].split() == ["1", "1.25", "-1"]
    # a single-file export records the same; an edited card is refused, naming the card
    model.save(tmp_path / "one.safetensors", card={"judge_model": "sim"})
    assert main(["show", str(tmp_path / "one.safetensors")]) == 0
    shown = capsys.readouterr().out
    assert f"prompt SHA-256:  {prompt_record()['sha256']}" in shown
    assert "utility source:  unknown" in shown  # fitted without a record of its source
    card = tmp_path / "one.json"
    card.write_text(card.read_text().replace('"utility": null', '"utility": "abstention"'))
    assert main(["show", str(tmp_path / "one.safetensors")]) == 2
    assert f"{card}: the card's entries were changed" in capsys.readouterr().err


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


def _drop_hash(folder: Path) -> None:
    """Remove ``weights_sha256`` from the folder's config.json (its own digest made again)."""
    config = json.loads((folder / "config.json").read_text())
    del config["weights_sha256"]
    config["card_sha256"] = card_digest(config)
    (folder / "config.json").write_text(json.dumps(config))


def test_show_refuses_a_card_without_a_hash_in_one_line(
    tmp_path: Path, model: UDCGTheta, capsys
) -> None:
    model.save_pretrained(tmp_path / "theta")
    _drop_hash(tmp_path / "theta")
    assert main(["show", str(tmp_path / "theta")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("udcg weights: error: ") and "records no weights_sha256" in line
    assert "--allow-unverified" in line


def test_show_never_claims_verification_without_a_hash(
    tmp_path: Path, model: UDCGTheta, capsys
) -> None:
    model.save_pretrained(tmp_path / "theta")
    _drop_hash(tmp_path / "theta")
    assert main(["show", "--allow-unverified", str(tmp_path / "theta")]) == 0
    captured = capsys.readouterr()
    assert "weights SHA-256: not recorded (unverified)" in captured.out
    assert "verified)" not in captured.out.replace("(unverified)", "")
    (warning,) = captured.err.strip().splitlines()
    assert warning.startswith("udcg weights: warning: ") and "unverified weights" in warning


def test_show_escapes_control_characters_of_the_card(
    tmp_path: Path, model: UDCGTheta, capsys
) -> None:
    title, clear = "\x1b]0;title\x07", "\x1b[2J"
    heldout = [{"metric": f"m{clear}", "spearman": 0.4, "ci95": [0.3, 0.5]}]
    card = {
        "judge_model": title,
        "license": clear,
        "generator": "gen\u202eevil\x9b\x7f",
        "training_data_fingerprint": "a\nb",
        "heldout": heldout,
    }
    model.save_pretrained(tmp_path / "theta", card=card)
    assert main(["show", str(tmp_path / "theta")]) == 0
    out = capsys.readouterr().out
    assert not any(ch in out for ch in "\x1b\x07\x7f\x9b\u202e")
    assert r"judge:           \x1b]0;title\x07" in out
    assert r"license:         \x1b[2J" in out
    assert r"generator:       gen\u202eevil\x9b\x7f" in out
    assert r"training data:   a\nb" in out
    assert r"m\x1b[2J" in out
    readme = (tmp_path / "theta" / "README.md").read_text()
    assert not any(ch in readme for ch in "\x1b\x07\x7f\x9b\u202e")
    assert r"| judge | \x1b]0;title\x07 |" in readme


def test_show_refuses_a_bad_calibration_naming_the_card_before_printing(
    tmp_path: Path, model: UDCGTheta, capsys
) -> None:
    model.save_pretrained(tmp_path / "theta")
    config = json.loads((tmp_path / "theta" / "config.json").read_text())
    config["calibration"] = {"method": "temperature", "parameters": {"temperature": 0}}
    config["card_sha256"] = card_digest(config)
    (tmp_path / "theta" / "config.json").write_text(json.dumps(config))
    assert main(["show", str(tmp_path / "theta")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"udcg weights: error: {tmp_path / 'theta' / 'config.json'}: field "
        "'calibration.temperature': expected a finite positive number, got 0\n"
    )
