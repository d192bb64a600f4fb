"""``udcg weights calibrate`` as a user runs it: contexts of another size are counted as left
out, a bad label is named by file, line and field, and the calibrated card records what the
calibration was fitted on (where its contexts differ from the card, the contexts' digest, this
run's allowed mismatches only), so that ``udcg score`` checks them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from udcg.cli.main import main
from udcg.io.contexts.jsonl import write_contexts
from udcg.io.manifests import file_sha256
from udcg.theta import UDCGTheta
from udcg.theta.simulate import simulate_contexts


def _weights(folder: Path, **card: str) -> Path:
    model = UDCGTheta(k=3, bias=True)
    model.alpha_, model.beta_ = np.array([2.5, -0.5, 1.5]), np.array([-1.0, 0.8, -2.0])
    model.intercept_ = -0.3
    model.save_pretrained(folder, card=card)
    return folder


def _card(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def test_contexts_of_another_size_are_counted_as_left_out(tmp_path: Path, capsys) -> None:
    data = tmp_path / "c.jsonl"
    contexts = simulate_contexts(40, 3, per_query=1, seed=1)
    write_contexts(data, [*contexts, *simulate_contexts(7, 5, per_query=1, seed=2)])
    weights = _weights(tmp_path / "w", judge_model="sim")
    assert main(["weights", "calibrate", str(weights), str(data), "-o", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert "udcg weights: 7 of 47 contexts do not have k=3 passages and are left out" in err
    assert _card(tmp_path / "o")["calibration"]["n_contexts"] == 40


def test_a_label_outside_0_1_is_named_by_file_line_and_field(tmp_path: Path, capsys) -> None:
    data = tmp_path / "c.jsonl"
    write_contexts(data, simulate_contexts(10, 3, per_query=1, seed=1))
    lines = data.read_text().splitlines()
    row = json.loads(lines[6])
    row["passages"][1]["relevant"] = 3
    lines[6] = json.dumps(row)
    data.write_text("\n".join(lines) + "\n")
    weights = _weights(tmp_path / "w", judge_model="sim")
    assert main(["weights", "calibrate", str(weights), str(data), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"udcg weights: error: {data}:7: field 'passages[1].relevant': grade 3.0" in err


def test_the_card_records_what_the_calibration_was_fitted_on(tmp_path: Path, capsys) -> None:
    abst, likely = tmp_path / "abst.jsonl", tmp_path / "al.jsonl"
    write_contexts(abst, simulate_contexts(60, 3, per_query=1, seed=1))
    with abst.open() as given, likely.open("w") as out:  # the same judge's answer likelihoods
        for line in given:
            row = json.loads(line)
            for p in row["passages"]:
                p["answer_prob"] = {"sim": round(1 - p.pop("abstain_prob")["sim"] ** 0.3, 6)}
            out.write(json.dumps(row) + "\n")
    weights = _weights(tmp_path / "w", judge_model="sim", utility=None)
    calibrated = tmp_path / "wc"
    argv = ["weights", "calibrate", str(weights), str(likely), "-o", str(calibrated)]
    assert main([*argv, "--utility", "answer_likelihood"]) == 0
    card = _card(calibrated)
    assert card["utility"] is None  # the weights' own entry, as fitted
    assert card["calibration_fitted_on"]["utility"] == "answer_likelihood"
    assert card["calibration_input_sha256"] == file_sha256(likely)
    capsys.readouterr()
    # the recalibrated column is not made on abstention utilities without a word
    assert main(["score", str(abst), "--judge", "sim", "--weights", str(calibrated)]) == 2
    said = "their calibration was fitted with utility source 'answer_likelihood', not 'abstention'"
    assert said in capsys.readouterr().err
    # calibrated again on abstention utilities: the earlier calibration's record goes with it
    again = tmp_path / "again"
    argv = ["weights", "calibrate", str(calibrated), str(abst), "-o", str(again)]
    assert main([*argv, "--utility", "abstention"]) == 0
    assert _card(again)["calibration_fitted_on"]["utility"] == "abstention"
    assert main(["score", str(abst), "--judge", "sim", "--weights", str(again)]) == 0
    # order never applies the calibration: what it was fitted on is not its business
    ordered = tmp_path / "ordered.jsonl"
    assert main(["order", str(likely), "--weights", str(calibrated), "-o", str(ordered),
                 "--utility", "answer_likelihood"]) == 0  # fmt: skip


def test_an_earlier_calibrations_allowed_mismatch_does_not_stay(tmp_path: Path, capsys) -> None:
    data = tmp_path / "c.jsonl"
    write_contexts(data, simulate_contexts(40, 3, per_query=1, seed=1))
    other = _weights(tmp_path / "w", judge_model="other")
    first, second = tmp_path / "first", tmp_path / "second"
    argv = ["weights", "calibrate", str(other), str(data), "--judge-key", "sim"]
    assert main([*argv, "-o", str(first), "--allow-mismatch", "judge"]) == 0
    assert "judge 'other', not 'sim'" in _card(first)["weights_overrides"][0]
    theirs = tmp_path / "theirs.jsonl"  # the weights' own judge: nothing to allow this time
    theirs.write_text(data.read_text().replace('"sim"', '"other"'))
    assert main(["weights", "calibrate", str(first), str(theirs), "-o", str(second)]) == 0
    assert "weights_overrides" not in _card(second)


def test_contexts_from_standard_input_have_their_digest_recorded(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    data = tmp_path / "c.jsonl"
    write_contexts(data, simulate_contexts(40, 3, per_query=1, seed=1))
    weights = _weights(tmp_path / "w", judge_model="sim")
    argv = [sys.executable, "-m", "udcg", "weights", "calibrate", str(weights), "-", "-o"]
    with data.open("rb") as stdin:
        done = subprocess.run(
            [*argv, str(tmp_path / "o")], stdin=stdin, capture_output=True, text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _card(tmp_path / "o")["calibration_input_sha256"] == file_sha256(data)


def test_a_calibration_on_other_utilities_is_checked_where_applied(tmp_path: Path, capsys) -> None:
    """Abstention weights calibrated on answer likelihoods (a mismatch allowed then) keep the
    weights' utility in the card and record the calibration's: applying them to abstention
    utilities is refused unless allowed, and `weights show` says so."""
    abst, likely = tmp_path / "abst.jsonl", tmp_path / "al.jsonl"
    write_contexts(abst, simulate_contexts(60, 3, per_query=1, seed=1))
    with abst.open() as given, likely.open("w") as out:
        for line in given:
            row = json.loads(line)
            for p in row["passages"]:
                p["answer_prob"] = {"sim": round(1 - p.pop("abstain_prob")["sim"] ** 0.3, 6)}
            out.write(json.dumps(row) + "\n")
    weights = _weights(tmp_path / "w", judge_model="sim", utility="abstention")
    calibrated = tmp_path / "wc"
    argv = ["weights", "calibrate", str(weights), str(likely), "-o", str(calibrated)]
    assert main([*argv, "--utility", "answer_likelihood", "--allow-mismatch", "utility"]) == 0
    card = _card(calibrated)
    assert card["utility"] == "abstention"
    assert card["calibration_fitted_on"] == {"utility": "answer_likelihood"}
    capsys.readouterr()
    score = ["score", str(abst), "--judge", "sim", "--weights", str(calibrated)]
    assert main(score) == 2
    assert (
        "field 'utility': their calibration was fitted with utility source 'answer_likelihood', "
        "not 'abstention' (--allow-mismatch utility to use them anyway)"
    ) in capsys.readouterr().err
    assert main([*score, "--allow-mismatch", "utility"]) == 0
    assert main(["weights", "show", str(calibrated)]) == 0
    shown = capsys.readouterr().out
    assert "  fitted on:     utility answer_likelihood (other than the weights')" in shown
    # calibrated again on the weights' own utility: the earlier calibration's record goes
    again = tmp_path / "again"
    assert main(["weights", "calibrate", str(calibrated), str(abst), "-o", str(again)]) == 0
    assert "calibration_fitted_on" not in _card(again) and main([*score[:-1], str(again)]) == 0


def test_a_figure_of_the_folder_read_is_not_named_in_a_folder_without_it(
    tmp_path: Path, capsys
) -> None:
    data = tmp_path / "c.jsonl"
    write_contexts(data, simulate_contexts(40, 3, per_query=1, seed=1))
    weights = _weights(tmp_path / "w", judge_model="sim", figure="weights.png")
    (weights / "weights.png").write_bytes(b"\x89PNG")  # as train.py writes it
    assert main(["weights", "calibrate", str(weights), str(data), "-o", str(tmp_path / "o")]) == 0
    UDCGTheta.from_pretrained(weights).save_pretrained(tmp_path / "again")
    for folder in (tmp_path / "o", tmp_path / "again"):
        assert "figure" not in _card(folder) and not (folder / "weights.png").exists()
        assert ".png" not in (folder / "README.md").read_text()
