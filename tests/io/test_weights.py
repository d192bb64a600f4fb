"""UDCG-theta weight files in the data layer: written and read without the estimator, read
the same by ``UDCGTheta.load``, with the card's checks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from udcg.errors import UDCGInputError, UDCGWarning
from udcg.io.weights.card import render
from udcg.io.weights.files import (
    ThetaWeights,
    card_digest,
    card_path,
    read_weights,
    write_weights,
)
from udcg.theta import UDCGTheta


def _weights() -> ThetaWeights:
    return ThetaWeights(np.array([0.5, -1.0, 2.0]), np.array([-0.25, 0.0, 1.5]), 0.75, bias=True)


def test_round_trip_and_card(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    assert write_weights(path, _weights(), {"judge": "j", "utility": "abstention"}) == card_path(
        path
    )
    loaded = read_weights(path, k=3)
    assert loaded.k == 3 and loaded.bias is True and loaded.intercept == 0.75
    assert loaded.path == path and loaded.card["judge"] == "j"
    np.testing.assert_array_equal(loaded.alpha, _weights().alpha)
    np.testing.assert_array_equal(loaded.beta, _weights().beta)
    card = json.loads(card_path(path).read_text())
    assert card["k"] == 3 and card["tensors"] == {"alpha": [3], "beta": [3], "intercept": []}


def test_the_estimator_reads_and_writes_the_same_files(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    write_weights(path, _weights())
    model = UDCGTheta.load(path, k=3)
    np.testing.assert_array_equal(model.alpha_, _weights().alpha)
    assert model.intercept_ == 0.75 and model.bias is True
    again = tmp_path / "again.safetensors"
    model.save(again)
    assert again.read_bytes() == path.read_bytes()


def test_checks(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    write_weights(path, _weights())
    with pytest.raises(UDCGInputError, match="weights are for k=3, data has k=5"):
        read_weights(path, k=5)
    with pytest.raises(UDCGInputError, match="reserved"):
        write_weights(path, _weights(), {"k": 2})
    card = {**json.loads(card_path(path).read_text()), "bias": False}
    card_path(path).write_text(json.dumps({**card, "card_sha256": card_digest(card)}))
    with pytest.raises(UDCGInputError, match=r"bias=false but the intercept is 0\.75"):
        read_weights(path)
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(UDCGInputError, match="SHA-256"):
        read_weights(path)


def test_a_card_without_a_hash_is_refused_unless_allowed(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    write_weights(path, _weights())
    assert read_weights(path).verified is True
    card = json.loads(card_path(path).read_text())
    del card["weights_sha256"], card["card_sha256"]
    card["format_version"] = 1  # written before cards carried a digest
    card_path(path).write_text(json.dumps(card))
    with pytest.raises(UDCGInputError, match=r"w\.json records no weights_sha256") as info:
        read_weights(path)
    assert "\n" not in str(info.value) and "allow_unverified=True" in str(info.value)
    with pytest.warns(UDCGWarning, match="unverified weights"):
        loaded = read_weights(path, allow_unverified=True)
    assert loaded.verified is False
    np.testing.assert_array_equal(loaded.alpha, _weights().alpha)
    # an older card may hold NaN (json.dump writes it): loaded unverified, digested as read
    card_path(path).write_text(json.dumps({**card, "heldout": [{"kendall": math.nan}]}))
    with pytest.warns(UDCGWarning, match="unverified weights"):
        assert UDCGTheta.load(path, allow_unverified=True).digests()["card_sha256"]
    # a hash that is there is checked, allowed or not
    card_path(path).write_text(json.dumps({**card, "weights_sha256": "0" * 64}))
    with pytest.raises(UDCGInputError, match="SHA-256 differs"):
        read_weights(path, allow_unverified=True)


@pytest.mark.parametrize(("tensor", "value"), [("alpha", np.nan), ("intercept", -np.inf)])
def test_non_finite_weights_are_never_written(tmp_path: Path, tensor: str, value: float) -> None:
    model = UDCGTheta(3, bias=True)
    model.alpha_, model.beta_, model.intercept_ = _weights().alpha.copy(), _weights().beta, 0.5
    if tensor == "alpha":
        model.alpha_[1] = value
    else:
        model.intercept_ = value
    writers = [
        lambda: write_weights(tmp_path / "w.safetensors", model.to_weights()),
        lambda: model.save(tmp_path / "w.safetensors"),
        lambda: model.save_pretrained(tmp_path / "w"),
    ]
    for write in writers:
        with pytest.raises(UDCGInputError, match=f"tensor '{tensor}' holds {value}"):
            write()
    assert not list(tmp_path.iterdir())


def _without_card_digest(path: Path, version: str | None) -> None:
    """Drop ``card_sha256`` from the card of ``path`` and record ``version`` as its writer."""
    card = json.loads(card_path(path).read_text())
    card.pop("card_sha256", None)
    older = {"udcg_version": version, "judge": None, "format_version": 1}
    card_path(path).write_text(json.dumps({**card, **older}))


def test_a_card_without_its_digest_is_refused_when_its_version_writes_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w.safetensors"
    write_weights(path, _weights(), {"judge": "j", "udcg_version": "0.3.0"})
    _without_card_digest(path, "0.3.0")
    with pytest.raises(UDCGInputError, match=r"w\.json records no card_sha256") as info:
        read_weights(path)
    assert "udcg 0.3.0 writes one" in str(info.value) and "\n" not in str(info.value)
    assert "allow_unverified=True" in str(info.value)
    with pytest.warns(UDCGWarning, match="records no card_sha256"):
        assert read_weights(path, allow_unverified=True).card["judge"] is None
    for older in ("0.2.0", None):  # written before cards carried a digest: read as before
        _without_card_digest(path, older)
        assert read_weights(path).card["judge"] is None
    # an entry only a digest-writing udcg writes: the version set back does not hide the edit
    write_weights(
        path, _weights(), {"judge": "j", "judge_fingerprint": "fp", "udcg_version": "0.3.0"}
    )
    for older in ("0.2.0", None):
        _without_card_digest(path, older)
        with pytest.raises(UDCGInputError, match="writes its 'judge_fingerprint' entry"):
            read_weights(path)


def _edit_card(path: Path, **entries: object) -> None:
    """Set ``entries`` in the card of ``path``, as an editor would (its digest left as is)."""
    card = json.loads(card_path(path).read_text())
    card_path(path).write_text(json.dumps({**card, **entries}))


@pytest.mark.parametrize("entry", [{"l2": 7.5}, {"bias": False}, {"tensors": {}}])
def test_the_card_digest_covers_the_entries_that_describe_the_tensors(
    tmp_path: Path, entry: dict
) -> None:
    path = tmp_path / "w.safetensors"
    write_weights(path, _weights(), {"judge": "j"})
    _edit_card(path, **entry)
    with pytest.raises(UDCGInputError, match=r"w\.json: the card's entries were changed"):
        read_weights(path)


def test_tensors_of_other_weights_with_their_sha256_pasted_are_refused(tmp_path: Path) -> None:
    path, other = tmp_path / "w.safetensors", tmp_path / "other.safetensors"
    write_weights(path, _weights(), {"judge": "j"})
    write_weights(other, ThetaWeights(-_weights().alpha, _weights().beta), {"judge": "other"})
    path.write_bytes(other.read_bytes())
    _edit_card(path, weights_sha256=json.loads(card_path(other).read_text())["weights_sha256"])
    with pytest.raises(UDCGInputError, match="card_sha256 differs"):
        read_weights(path)
    with pytest.raises(UDCGInputError, match="card_sha256 differs"):
        UDCGTheta.from_pretrained(path)


def test_a_format_1_card_is_checked_by_the_rule_it_was_written_with(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    write_weights(path, _weights(), {"judge": "j", "udcg_version": "0.3.0"})
    card = {**json.loads(card_path(path).read_text()), "format_version": 1}
    card_path(path).write_text(json.dumps({**card, "card_sha256": card_digest(card)}))
    loaded = UDCGTheta.load(path)  # its digest covers the free entries only
    assert loaded.digests()["card_sha256"] == card_digest(card) == loaded.card_["card_sha256"]
    _edit_card(path, judge="other")
    with pytest.raises(UDCGInputError, match="card_sha256 differs"):
        read_weights(path)
    # a card of format 2 without its digest: every such card is written with one
    write_weights(path, _weights(), {"judge": "j"})
    card = json.loads(card_path(path).read_text())
    del card["card_sha256"]
    card_path(path).write_text(json.dumps(card))
    with pytest.raises(UDCGInputError, match="every card of format_version 2"):
        read_weights(path)


def test_the_model_card_escapes_control_characters() -> None:
    card = {"k": 3, "judge_model": "j\x1b[2J", "name": "n\x1b]0;t\x07", "license": "\x9b"}
    card["training_data_description"] = "line one\x07\nline two\u202e"
    text = render(card, [1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    assert not any(ch in text for ch in "\x1b\x07\x9b\u202e")
    assert "# n\\x1b]0;t\\x07\n" in text and "| judge | j\\x1b[2J |" in text
    assert "line one\\x07\nline two\\u202e" in text


def test_a_weights_path_that_is_its_own_card_is_refused_before_writing(tmp_path: Path) -> None:
    model = UDCGTheta(3)
    model.alpha_, model.beta_, model.intercept_ = _weights().alpha, _weights().beta, 0.0
    with pytest.raises(UDCGInputError) as info:
        model.save(tmp_path / "theta.json")
    assert str(info.value) == (
        f"{tmp_path / 'theta.json'}: the card theta.json would replace the weights written "
        "there: name the weights file .safetensors"
    )
    assert not list(tmp_path.iterdir())
