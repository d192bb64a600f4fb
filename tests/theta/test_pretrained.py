"""Weights folders: save_pretrained / from_pretrained, the model card, old exports, tampering,
and which sources are Hugging Face Hub models (fetched with only the folder's three files)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from udcg import __version__
from udcg.errors import UDCGInputError
from udcg.io.weights.files import ThetaWeights, write_weights
from udcg.judge.prompts import ABSTAIN_SYSTEM, ABSTAIN_USER, prompt_record
from udcg.pipeline.settings import TrainSettings
from udcg.pipeline.training import train
from udcg.theta import UDCGTheta
from udcg.theta.simulate import simulate_contexts as simulate


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory):
    """``train`` at k=5 on simulated contexts, exported: (report, model, contexts)."""
    out = tmp_path_factory.mktemp("train")
    contexts = simulate(80, 5)
    model = UDCGTheta(5, val_fraction=0.0)
    settings = TrainSettings(k=5, judge="sim", n_bootstrap=50)
    report = train(contexts, model, settings, export_dir=out)
    return report, model, contexts


def _data(n: int = 40, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    return rng.random((n, k)) < 0.4, rng.random((n, k))


def test_train_writes_a_folder_that_round_trips_byte_identically(trained) -> None:
    report, model, _ = trained
    folder = report.model_dir
    names = {p.name for p in folder.iterdir()}
    assert {"model.safetensors", "config.json", "README.md", "weights.png"} <= names
    loaded = UDCGTheta.from_pretrained(folder)
    rel, u = _data()
    assert loaded.predict_proba(rel, u).tobytes() == model.predict_proba(rel, u).tobytes()
    assert loaded.alpha_.tobytes() == model.alpha_.tobytes()
    # the single-file export beside it still loads, with the same weights
    old = UDCGTheta.from_pretrained(report.weights_path)
    assert old.predict_proba(rel, u).tobytes() == model.predict_proba(rel, u).tobytes()


def test_config_records_what_decides_compatibility(trained) -> None:
    report, _, _ = trained
    config = json.loads((report.model_dir / "config.json").read_text())
    assert config["format"] == "udcg-theta" and config["k"] == 5
    assert config["judge_model"] == "sim" and config["utility"] == "abstention"
    assert config["udcg_version"] == __version__
    assert config["prompt"] == {
        "system": ABSTAIN_SYSTEM,
        "user": ABSTAIN_USER,
        "sha256": prompt_record()["sha256"],
    }
    for key in ("abstention_mode", "judge_serving", "generator", "license"):
        assert key in config  # null where training does not know it
    assert config["gamma"] == report.gamma
    assert config["training_data_fingerprint"] == report.fingerprint
    assert "k=5 passages" in config["training_data_description"]
    assert config["heldout"][0]["metric"] == "UDCG-theta"
    assert len(config["weights_sha256"]) == 64


def test_readme_front_matter_parses(trained) -> None:
    report, _, _ = trained
    text = (report.model_dir / "README.md").read_text()
    assert text.startswith("---\n")
    front = yaml.safe_load(text.split("---\n")[1])
    assert front["library_name"] == "udcg"
    assert front["license"] == "other"
    assert "udcg-theta" in front["tags"]
    assert front["base_model"] == "sim"
    results = front["model-index"][0]["results"]
    theta = report.rows[0]
    metrics = [m for r in results for m in r["metrics"]]
    assert metrics[0]["name"] == "UDCG-theta held-out correlation"
    assert metrics[0]["value"] == pytest.approx(theta.result.estimate)
    assert "![alpha and beta by position](weights.png)" in text
    assert "| 5 |" in text and prompt_record()["sha256"] in text


def test_prompt_hash_changes_with_one_character() -> None:
    assert prompt_record(ABSTAIN_SYSTEM + " ")["sha256"] != prompt_record()["sha256"]
    assert (
        prompt_record(user=ABSTAIN_USER.replace("Answer", "answer"))["sha256"]
        != (prompt_record()["sha256"])
    )


def test_save_pretrained_overrides_and_old_exports_load(tmp_path: Path) -> None:
    model = UDCGTheta(3, bias=True)
    model.alpha_, model.beta_, model.intercept_ = np.array([1.0, 0.5, 0.2]), -np.ones(3), 0.25
    model.save_pretrained(tmp_path / "m", card={"license": "mit", "abstention_mode": "sequence"})
    loaded = UDCGTheta.from_pretrained(str(tmp_path / "m"), k=3)
    assert loaded.card_["license"] == "mit" and loaded.card_["abstention_mode"] == "sequence"
    assert loaded.intercept_ == 0.25 and loaded.bias is True
    # an export written before cards recorded the prompt and their own digest
    weights = ThetaWeights(model.alpha_, model.beta_, 0.25, True, 0.0)
    write_weights(tmp_path / "old.safetensors", weights, {"judge_model": "j"})
    card = json.loads((tmp_path / "old.json").read_text())
    del card["card_sha256"]
    card["format_version"] = 1
    (tmp_path / "old.json").write_text(json.dumps(card))
    old = UDCGTheta.from_pretrained(tmp_path / "old.safetensors")
    assert old.card_["judge_model"] == "j" and "prompt" not in old.card_
    # save() records what save_pretrained() does, the card it loaded with carried forward
    old.save(tmp_path / "new.safetensors")
    new = UDCGTheta.load(tmp_path / "new.safetensors").card_
    assert new["judge_model"] == "j" and new["prompt"]["sha256"] == prompt_record()["sha256"]
    with pytest.raises(UDCGInputError, match="weights are for k=3, data has k=4"):
        UDCGTheta.from_pretrained(tmp_path / "m", k=4)


def test_tampered_weights_fail_the_sha256_check(trained, tmp_path: Path) -> None:
    report, _, _ = trained
    folder = tmp_path / "copy"
    folder.mkdir()
    for name in ("model.safetensors", "config.json", "README.md"):
        (folder / name).write_bytes((report.model_dir / name).read_bytes())
    blob = bytearray((folder / "model.safetensors").read_bytes())
    blob[-3] ^= 0x01  # one byte of a tensor
    (folder / "model.safetensors").write_bytes(bytes(blob))
    with pytest.raises(UDCGInputError) as info:
        UDCGTheta.from_pretrained(folder)
    message = str(info.value)
    assert "\n" not in message
    assert str(folder / "model.safetensors") in message and "SHA-256" in message


def test_hub_id_offline_fails_at_once_in_one_line(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UDCGInputError) as info:
        UDCGTheta.from_pretrained("some-org/udcg-theta-k5")
    message = str(info.value)
    assert "HF_HUB_OFFLINE" in message and "some-org/udcg-theta-k5" in message
    assert "\n" not in message
    # a path that does not exist and is not a hub id: no such file
    with pytest.raises(UDCGInputError, match="no such weights file"):
        UDCGTheta.from_pretrained("missing/dir/w.safetensors")


@pytest.fixture
def hub(monkeypatch, tmp_path: Path) -> list[dict]:
    """A fake Hugging Face Hub (no network): every ``snapshot_download`` or
    ``hf_hub_download`` call is recorded and gets a weights folder of k=3; the working
    directory is an empty folder with a local folder ``weights/`` in it."""
    import huggingface_hub

    model = UDCGTheta(3)
    model.alpha_, model.beta_, model.intercept_ = np.array([1.0, 0.5, 0.2]), -np.ones(3), 0.0
    snapshot = model.save_pretrained(tmp_path / "snapshot")
    calls: list[dict] = []

    def download(*args, **kwargs) -> str:
        calls.append({"args": args, **kwargs})
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # what would reach the network
    work = tmp_path / "work"
    (work / "weights").mkdir(parents=True)
    monkeypatch.chdir(work)
    return calls


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("weights/typo", "weights/typo: no such weights folder"),
        ("./owner/name", "owner/name: no such weights folder"),
        ("../owner/name", "../owner/name: no such weights folder"),
        ("owner/w.safetensors", "owner/w.safetensors: no such weights file"),
    ],
)
def test_a_mistyped_local_path_is_never_fetched_from_the_hub(
    hub: list[dict], source: str, message: str
) -> None:
    with pytest.raises(UDCGInputError) as info:
        UDCGTheta.from_pretrained(source)
    assert str(info.value) == message
    assert hub == []


def test_a_mistyped_local_path_is_one_line_from_the_command_line(hub: list[dict], capsys) -> None:
    from udcg.cli.main import main
    from udcg.io.contexts.jsonl import write_contexts

    write_contexts("c.jsonl", simulate(2, 3))
    assert main(["score", "c.jsonl", "--judge", "sim", "--weights", "weights/typo"]) == 2
    err = capsys.readouterr().err
    assert err == "udcg score: error: weights/typo: no such weights folder\n"
    assert hub == []


@pytest.mark.parametrize(
    ("source", "repo", "revision"),
    [
        ("hf://owner/udcg-theta-k3@0123abc", "owner/udcg-theta-k3", "0123abc"),
        ("hf://weights/typo", "weights/typo", None),  # the prefix says Hub, whatever is local
        ("owner/udcg-theta-k3", "owner/udcg-theta-k3", None),  # no local owner/
        ("owner/udcg-theta-k3@v1.0", "owner/udcg-theta-k3", "v1.0"),
    ],
)
def test_a_hub_model_fetches_only_the_three_files(
    hub: list[dict], source: str, repo: str, revision: str | None
) -> None:
    model = UDCGTheta.from_pretrained(source, k=3)
    assert model.alpha_.tolist() == [1.0, 0.5, 0.2]
    (call,) = hub
    assert call["args"] == (repo,) and call["revision"] == revision
    assert sorted(call["allow_patterns"]) == ["README.md", "config.json", "model.safetensors"]


def test_every_reader_of_weights_fetches_a_hub_id(hub: list[dict], capsys) -> None:
    import udcg
    from udcg.cli.main import main

    Path("qrels.txt").write_text("q1 0 d1 1\nq1 0 d2 0\nq1 0 d3 1\n")
    Path("run.trec").write_text("q1 Q0 d1 1 3 s\nq1 Q0 d2 2 2 s\nq1 Q0 d3 3 1 s\n")
    Path("u.tsv").write_text("q1\td1\t0.1\nq1\td2\t0.5\nq1\td3\t0.2\n")
    source = "hf://owner/udcg-theta-k3@v1"
    assert main(["weights", "show", source]) == 0
    assert "weights:" in capsys.readouterr().out
    trec = ["trec", "qrels.txt", "run.trec", "-m", "UDCGtheta@3", "--utilities", "u.tsv"]
    assert main([*trec, "--weights", source]) == 0
    assert "UDCGtheta@3" in capsys.readouterr().out
    result = udcg.evaluate(
        "qrels.txt", "run.trec", ["UDCGtheta@3"], utilities="u.tsv", weights=source
    )
    assert 0 < result["q1"]["UDCGtheta@3"] < 1
    assert [(c["args"], c["revision"]) for c in hub] == [(("owner/udcg-theta-k3",), "v1")] * 3


def test_a_malformed_hub_model_is_one_line(hub: list[dict]) -> None:
    with pytest.raises(UDCGInputError, match=r"expected hf://owner/name or hf://owner/name@"):
        UDCGTheta.from_pretrained("hf://just-a-name")
    assert hub == []


def test_check_compatible_in_python(trained) -> None:
    report, _, _ = trained
    model = UDCGTheta.from_pretrained(report.model_dir)
    sha = prompt_record()["sha256"]
    assert model.check_compatible(k=5, judge="sim", utility="abstention", prompt=sha) == []
    other = prompt_record(ABSTAIN_SYSTEM[:-1])["sha256"]
    with pytest.raises(UDCGInputError) as info:
        model.check_compatible(prompt=other)
    assert str(info.value) == (
        f"field 'prompt': the weights were fitted with prompt SHA-256 {sha!r}, not {other!r} "
        "(allow_mismatch=['prompt'] to use them anyway)"
    )
    with pytest.raises(UDCGInputError, match="fitted with k 5, not 3"):
        model.check_compatible(k=3)
    (note,) = model.check_compatible(["judge"], judge="other")
    assert note == (
        "field 'judge': the weights were fitted with judge 'sim', not 'other' (allowed on purpose)"
    )
    with pytest.raises(UDCGInputError, match="unknown field 'judges'"):
        model.check_compatible(["judges"], judge="other")
    # a calibration fitted on other data: checked when the calibration is applied
    on = {"calibration_fitted_on": {"utility": "answer_likelihood"}}
    model.card_ = {**model.card_, "calibration": {"method": "platt"}, **on}
    assert model.check_compatible(utility="abstention") == []
    with pytest.raises(UDCGInputError, match="calibration was fitted with utility"):
        model.check_compatible(utility="abstention", calibrated=True)


def test_fit_theta_records_its_source_and_judge_through_every_save(tmp_path: Path) -> None:
    """``fit_theta``'s weights say what they were fitted on, in memory and after save(),
    save_pretrained() and a load-and-save round trip; evaluate() takes the object itself."""
    import udcg

    contexts = udcg.demo_contexts()
    model = udcg.fit_theta(contexts, 5, utility="answer_likelihood", l2=0.01)
    assert model.card_ == {
        "judge_model": "smollm2-135m",
        "judge_fingerprint": None,  # contexts in memory: who made their values is not known
        "relevance_fingerprint": None,
        "abstention_mode": None,
        "utility": "answer_likelihood",
    }
    with pytest.raises(UDCGInputError, match="utility source 'answer_likelihood'"):
        model.check_compatible(utility="abstention")
    model.save_pretrained(tmp_path / "al5")
    model.save(tmp_path / "al5.safetensors")
    again = UDCGTheta.from_pretrained(tmp_path / "al5")
    again.save_pretrained(tmp_path / "copy")
    for source in ("al5", "al5.safetensors", "copy"):
        card = UDCGTheta.from_pretrained(tmp_path / source).card_
        assert (card["utility"], card["judge_model"]) == ("answer_likelihood", "smollm2-135m")
    qrels = {"q": {"a": 1, "b": 0}}
    run = {"q": {"a": 2.0, "b": 1.0, "c": 0.5, "d": 0.2, "e": 0.1}}
    answer = {"q": dict.fromkeys("abcde", 0.4)}
    by_object, by_path = (
        udcg.evaluate(
            qrels, run, ["UDCGtheta@5"], utilities=answer, utility_field="answer_prob", weights=w
        )
        for w in (model, tmp_path / "al5")
    )
    assert by_object == by_path
    with pytest.raises(UDCGInputError, match="utility source 'answer_likelihood'"):
        udcg.evaluate(qrels, run, ["UDCGtheta@5"], utilities=answer, utility_field="abstain_prob",
                      weights=model)  # fmt: skip


def test_val_fraction_is_checked_before_any_work() -> None:
    with pytest.raises(UDCGInputError, match="field 'val_fraction': must be in"):
        UDCGTheta(3, val_fraction=1)._check_params()


def test_a_refit_drops_the_card_of_the_old_weights(tmp_path: Path) -> None:
    """Refitted weights no longer carry the loaded card or the one ``fit_theta`` recorded."""
    import udcg
    from udcg.theta.simulate import simulate_arrays

    rel, u, correct = simulate_arrays(300, 3, seed=0)[:3]
    card = {"judge_model": "a", "gamma": 0.5, "training_data_fingerprint": "fp-a"}
    UDCGTheta(3).fit(rel, u, correct).save_pretrained(tmp_path / "a", card=card)
    refits = [UDCGTheta.from_pretrained(tmp_path / "a"), udcg.fit_theta(udcg.demo_contexts(), 3)]
    for n, model in enumerate(refits):
        assert model.card_
        model.fit(*simulate_arrays(300, 3, seed=7)[:3]).save_pretrained(tmp_path / f"b{n}")
        config = json.loads((tmp_path / f"b{n}" / "config.json").read_text())
        assert model.card_ == {} and config["judge_model"] is None
        assert config["gamma"] is None and config["training_data_fingerprint"] is None
        assert config["utility"] is None and config["heldout"] == []
