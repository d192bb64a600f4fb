"""UDCG-theta: equivalence with logistic regression, recovery, determinism, splits, persistence."""

from __future__ import annotations

import inspect
import itertools
import json
import warnings

import numpy as np
import pytest
import torch
from scipy.special import expit
from sklearn.linear_model import LogisticRegression
from torch.nn import functional as F

from udcg.errors import UDCGInputError
from udcg.io.weights.files import card_digest
from udcg.metrics.udcg import udcg_terms
from udcg.theta import UDCGTheta, UDCGThetaConvergenceWarning, card_path, split_by_query
from udcg.theta.lightning import bce_with_logits
from udcg.theta.simulate import simulate_arrays

# U-shaped helpful weights (first and last positions count most), negative distracting weights
ALPHA = np.array([3.0, 1.5, 0.8, 1.5, 3.0])
BETA = np.array([-1.5, -1.0, -0.8, -1.0, -1.5])


def simulate(n, k=5, alpha=None, beta=None, intercept=0.0, seed=0, per_query=4):
    """Contexts drawn from a known UDCG-theta model: (relevant, utility, correct, groups)."""
    rng = np.random.default_rng(seed)
    alpha = ALPHA if alpha is None else alpha
    beta = BETA if beta is None else beta
    rel = (rng.random((n, k)) < 0.4).astype(np.float64)
    u = rng.random((n, k))
    logits = intercept + (rel * u) @ alpha + ((1 - rel) * u) @ beta
    correct = (rng.random(n) < expit(logits)).astype(np.float64)
    groups = np.arange(n) // per_query
    return rel, u, correct, groups


def features(rel, u):
    helpful, distracting = udcg_terms(rel, u)
    return np.concatenate([helpful, distracting], axis=1)


def sklearn_logreg(bias, C=None):
    """Unpenalised (``C=None``) or L2 logistic regression, whichever spelling sklearn wants."""
    params = inspect.signature(LogisticRegression).parameters
    kwargs = {"fit_intercept": bias, "tol": 1e-12, "max_iter": 100_000}
    if C is not None:
        kwargs["C"] = C
    elif params["penalty"].default == "deprecated":  # scikit-learn >= 1.8
        kwargs["C"] = np.inf
    else:
        kwargs["penalty"] = None
    return LogisticRegression(**kwargs)


@pytest.fixture(scope="module")
def small():
    alpha = np.array([2.0, 1.0, 0.5, 1.0, 2.0])
    return simulate(3000, alpha=alpha, intercept=-0.4, seed=11)


@pytest.fixture(scope="module")
def fitted(small):
    rel, u, correct, groups = small
    return UDCGTheta(5, bias=True).fit(rel, u, correct, groups=groups)


# --------------------------------------------------------------------------------------------
# the optimum is logistic regression's


@pytest.mark.parametrize("bias", [False, True])
def test_unpenalised_fit_equals_sklearn_logistic_regression(small, bias):
    # the defaults (L-BFGS, no validation split) give the optimum on the data passed to fit
    rel, u, correct, groups = small
    model = UDCGTheta(5, bias=bias, l2=0).fit(rel, u, correct, groups=groups)
    assert model.split_[1].size == 0 and not model.early_stopped_
    ref = sklearn_logreg(bias).fit(features(rel, u), correct)
    np.testing.assert_allclose(model.alpha_, ref.coef_[0, :5], atol=1e-3, rtol=0)
    np.testing.assert_allclose(model.beta_, ref.coef_[0, 5:], atol=1e-3, rtol=0)
    assert model.intercept_ == pytest.approx(float(ref.intercept_[0]) if bias else 0.0, abs=1e-3)
    if not bias:
        assert model.intercept_ == 0.0
    assert model.converged_ and model.n_iter_ > 0
    np.testing.assert_allclose(
        model.predict_proba(rel, u), ref.predict_proba(features(rel, u))[:, 1], atol=1e-5
    )


def test_l2_penalty_equals_sklearn_with_matching_C(small):
    rel, u, correct, _ = small
    l2 = 0.01
    model = UDCGTheta(5, bias=True, l2=l2, val_fraction=0.0).fit(rel, u, correct)
    ref = sklearn_logreg(True, C=1.0 / (l2 * len(correct))).fit(features(rel, u), correct)
    weights = np.concatenate([model.alpha_, model.beta_])
    np.testing.assert_allclose(weights, ref.coef_[0], atol=1e-3, rtol=0)
    assert model.intercept_ == pytest.approx(float(ref.intercept_[0]), abs=1e-3)
    unpenalised = UDCGTheta(5, bias=True, val_fraction=0.0).fit(rel, u, correct)
    shrunk = np.linalg.norm(weights)
    assert shrunk < np.linalg.norm(np.concatenate([unpenalised.alpha_, unpenalised.beta_]))


def test_bce_with_logits_matches_torch():
    z = torch.linspace(-80, 80, 2001, dtype=torch.float64)
    for y in (torch.zeros_like(z), torch.ones_like(z), torch.full_like(z, 0.3)):
        ref = F.binary_cross_entropy_with_logits(z, y, reduction="none")
        torch.testing.assert_close(bce_with_logits(z, y), ref, atol=1e-14, rtol=1e-12)


def test_recovers_generating_weights_and_u_shape():
    rel, u, correct, groups = simulate(20_000, seed=0)
    model = UDCGTheta(5, val_fraction=0.2).fit(rel, u, correct, groups=groups)
    assert np.abs(model.alpha_ - ALPHA).max() < 0.25
    assert np.abs(model.beta_ - BETA).max() < 0.25
    middle = model.alpha_[2]
    assert model.alpha_[0] > middle + 1 and model.alpha_[-1] > middle + 1
    assert (model.beta_ < 0).all()
    # the held-out queries were used for early stopping and are recorded
    train_idx, val_idx = model.split_
    assert len(val_idx) == 1000 * 4 and len(train_idx) == 4000 * 4
    assert len(model.history_["val_loss"]) == len(model.history_["train_loss"]) >= 1


def test_adam_reaches_the_lbfgs_optimum(small):
    rel, u, correct, _ = small
    lbfgs = UDCGTheta(5, bias=True, val_fraction=0.0).fit(rel, u, correct)
    adam = UDCGTheta(5, bias=True, val_fraction=0.0, optimizer="adam").fit(rel, u, correct)
    assert adam.converged_ and adam.n_iter_ > lbfgs.n_iter_
    np.testing.assert_allclose(adam.alpha_, lbfgs.alpha_, atol=1e-3)
    np.testing.assert_allclose(adam.beta_, lbfgs.beta_, atol=1e-3)


def mean_bce(model, rel, u, correct):
    p = model.predict_proba(rel, u)
    return float(-np.mean(correct * np.log(p) + (1 - correct) * np.log1p(-p)))


def test_early_stopping_keeps_the_best_validation_weights(small):
    rel, u, correct, groups = small
    model = UDCGTheta(5, bias=True, optimizer="adam", patience=3)
    model.fit(rel, u, correct, groups=groups)
    assert model.early_stopped_
    assert model.split_[1].size > 0  # Adam holds out 20% of the queries by default
    val_loss = model.history_["val_loss"]
    assert np.argmin(val_loss) < len(val_loss) - 1  # it did get worse before stopping
    _, val_idx = model.split_
    kept = mean_bce(model, rel[val_idx], u[val_idx], correct[val_idx])
    assert kept == pytest.approx(min(val_loss), abs=1e-6)


def test_history_and_fitted_attributes(fitted, small):
    rel, u, _, _ = small
    assert fitted.alpha_.shape == (5,) and fitted.beta_.shape == (5,)
    assert fitted.alpha_.dtype == np.float64
    assert isinstance(fitted.intercept_, float)
    assert set(fitted.history_) == {"train_loss", "val_loss"}
    train = fitted.history_["train_loss"]
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(train))
    scores = fitted.predict_proba(rel, u)
    assert scores.shape == (len(rel),) and ((scores > 0) & (scores < 1)).all()
    logits = fitted.decision_function(rel, u)
    np.testing.assert_allclose(scores, expit(logits))
    by_hand = fitted.intercept_ + (rel * u) @ fitted.alpha_ + ((1 - rel) * u) @ fitted.beta_
    np.testing.assert_allclose(logits, by_hand, rtol=1e-12, atol=1e-12)


def test_fit_restores_torch_determinism_flags(small):
    rel, u, correct, _ = small
    before = torch.are_deterministic_algorithms_enabled()
    UDCGTheta(5, val_fraction=0.0).fit(rel, u, correct)
    assert torch.are_deterministic_algorithms_enabled() == before


def test_convergence_warning_when_max_epochs_is_reached(small):
    rel, u, correct, _ = small
    with pytest.warns(UDCGThetaConvergenceWarning, match="max_epochs=1"):
        model = UDCGTheta(5, val_fraction=0.0, max_epochs=1).fit(rel, u, correct)
    assert not model.converged_
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = UDCGTheta(5, val_fraction=0.0, max_epochs=20).fit(rel, u, correct)
    assert model.converged_


# --------------------------------------------------------------------------------------------
# determinism and the split by query


def test_same_seed_gives_byte_identical_weights(small, tmp_path):
    rel, u, correct, groups = small
    paths = []
    for i in range(2):
        model = UDCGTheta(5, bias=True, seed=7, val_fraction=0.2).fit(
            rel, u, correct, groups=groups
        )
        paths.append(tmp_path / f"run{i}.safetensors")
        model.save(paths[-1])
    assert paths[0].read_bytes() == paths[1].read_bytes()
    other = UDCGTheta(5, bias=True, seed=8, val_fraction=0.2).fit(rel, u, correct, groups=groups)
    assert not np.array_equal(other.split_[1], model.split_[1])


def test_split_by_query_never_puts_a_query_on_both_sides():
    rng = np.random.default_rng(5)
    groups = np.repeat([f"q{i}" for i in range(200)], rng.integers(1, 6, size=200))
    rng.shuffle(groups)
    train_idx, val_idx = split_by_query(groups, val_fraction=0.25, seed=3)
    assert not set(groups[train_idx]) & set(groups[val_idx])
    assert sorted(np.concatenate([train_idx, val_idx]).tolist()) == list(range(len(groups)))
    assert len(set(groups[val_idx])) == 50
    again = split_by_query(groups, val_fraction=0.25, seed=3)
    np.testing.assert_array_equal(again[1], val_idx)
    # the draw depends on the query ids, not on the order of the contexts
    order = rng.permutation(len(groups))
    _, val_perm = split_by_query(groups[order], val_fraction=0.25, seed=3)
    assert set(groups[order][val_perm]) == set(groups[val_idx])
    assert set(groups[split_by_query(groups, 0.25, seed=4)[1]]) != set(groups[val_idx])


def test_split_by_query_edge_cases():
    train_idx, val_idx = split_by_query(["a", "a", "b"], val_fraction=0.0)
    assert train_idx.tolist() == [0, 1, 2] and val_idx.size == 0
    train_idx, val_idx = split_by_query(["a", "a", "b"], val_fraction=0.01)  # at least 1 query
    assert len(set(np.array(["a", "a", "b"])[val_idx])) == 1 and train_idx.size > 0
    with pytest.raises(UDCGInputError, match="one query"):
        split_by_query(["a", "a"], val_fraction=0.2)
    with pytest.raises(UDCGInputError, match="val_fraction"):
        split_by_query(["a", "b"], val_fraction=1.0)


def test_fit_splits_by_query(small):
    rel, u, correct, groups = small
    model = UDCGTheta(5, val_fraction=0.3).fit(rel, u, correct, groups=groups)
    train_idx, val_idx = model.split_
    assert not set(groups[train_idx]) & set(groups[val_idx])
    assert len(train_idx) + len(val_idx) == len(groups) and len(val_idx) > 0


# --------------------------------------------------------------------------------------------
# persistence


def test_save_load_round_trip(fitted, small, tmp_path):
    rel, u, _, _ = small
    path = tmp_path / "models" / "theta-k5.safetensors"
    card_file = fitted.save(path, card={"judge": "smollm2-135m", "gamma": 0.3})
    assert card_file == tmp_path / "models" / "theta-k5.json" == card_path(path)
    card = json.loads(card_file.read_text())
    assert card["k"] == 5 and card["bias"] is True and card["l2"] == 0.0
    assert card["format_version"] == 2 and card["judge"] == "smollm2-135m"
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temp files
    loaded = UDCGTheta.load(path, k=5)
    np.testing.assert_array_equal(loaded.alpha_, fitted.alpha_)
    np.testing.assert_array_equal(loaded.beta_, fitted.beta_)
    assert loaded.intercept_ == fitted.intercept_
    np.testing.assert_array_equal(loaded.predict_proba(rel, u), fitted.predict_proba(rel, u))
    assert loaded.card_["gamma"] == 0.3 and loaded.k == 5 and loaded.bias is True


def test_load_with_another_k_is_a_clear_error(fitted, tmp_path):
    path = tmp_path / "w.safetensors"
    fitted.save(path)
    with pytest.raises(UDCGInputError, match="weights are for k=5, data has k=3"):
        UDCGTheta.load(path, k=3)
    loaded = UDCGTheta.load(path)
    rng = np.random.default_rng(0)
    with pytest.raises(UDCGInputError, match="weights are for k=5, data has k=3"):
        loaded.predict_proba(rng.random((4, 3)) < 0.5, rng.random((4, 3)))


def test_load_rejects_corrupted_or_mismatched_files(fitted, tmp_path):
    path = tmp_path / "w.safetensors"
    fitted.save(path)
    good_blob, good_card = path.read_bytes(), card_path(path).read_text()

    corrupted = bytearray(good_blob)
    corrupted[-3] ^= 0xFF
    path.write_bytes(bytes(corrupted))
    with pytest.raises(UDCGInputError, match="corrupted"):
        UDCGTheta.load(path)

    path.write_bytes(good_blob[:20])
    with pytest.raises(UDCGInputError, match="SHA-256"):
        UDCGTheta.load(path)

    card = json.loads(good_card)
    del card["weights_sha256"]  # no checksum: refused, and the parser objects when allowed
    card_path(path).write_text(json.dumps({**card, "card_sha256": card_digest(card)}))
    with pytest.raises(UDCGInputError, match="records no weights_sha256"):
        UDCGTheta.load(path)
    with pytest.raises(UDCGInputError, match="not a valid safetensors file"):
        UDCGTheta.load(path, allow_unverified=True)

    path.write_bytes(good_blob)
    card = {**json.loads(good_card), "k": 3}
    card_path(path).write_text(json.dumps({**card, "card_sha256": card_digest(card)}))
    with pytest.raises(UDCGInputError, match=r"shape \[5\] but the card says k=3"):
        UDCGTheta.load(path)

    card_path(path).write_text("{not json")
    with pytest.raises(UDCGInputError, match="not valid JSON"):
        UDCGTheta.load(path)

    card_path(path).write_text(json.dumps({**json.loads(good_card), "format": "other"}))
    with pytest.raises(UDCGInputError, match="not a UDCG-theta card"):
        UDCGTheta.load(path)

    card_path(path).unlink()
    with pytest.raises(UDCGInputError, match="no model card"):
        UDCGTheta.load(path)
    with pytest.raises(UDCGInputError, match="no such weights file"):
        UDCGTheta.load(tmp_path / "missing.safetensors")


def test_save_rejects_bad_cards(fitted, tmp_path):
    with pytest.raises(UDCGInputError, match="reserved"):
        fitted.save(tmp_path / "w.safetensors", card={"k": 7})
    with pytest.raises(UDCGInputError, match="JSON"):
        fitted.save(tmp_path / "w.safetensors", card={"when": object()})
    with pytest.raises(UDCGInputError, match="not fitted"):
        UDCGTheta(5).save(tmp_path / "w.safetensors")


def test_saved_files_hold_no_pickle(fitted, tmp_path):
    path = tmp_path / "w.safetensors"
    fitted.save(path)
    blob = path.read_bytes()
    header_len = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8 : 8 + header_len])
    assert set(header) == {"__metadata__", "alpha", "beta", "intercept"}
    assert header["alpha"]["dtype"] == "F64" and header["intercept"]["shape"] == []
    assert len(blob) == 8 + header_len + 8 * (5 + 5 + 1)


# --------------------------------------------------------------------------------------------
# input validation


def test_fit_input_errors(small):
    rel, u, correct, groups = small
    with pytest.raises(UDCGInputError, match="set up for k=4, data has k=5"):
        UDCGTheta(4).fit(rel, u, correct)
    with pytest.raises(UDCGInputError, match="ragged"):
        UDCGTheta(2).fit([[1, 0], [1]], [[0.5, 0.5], [0.5]], [1, 0])
    with pytest.raises(UDCGInputError, match="not 0/1"):
        UDCGTheta(5).fit(rel, u, np.where(correct == 1, 2.0, 0.0))
    with pytest.raises(UDCGInputError, match="length mismatch"):
        UDCGTheta(5).fit(rel, u, correct[:-1])
    with pytest.raises(UDCGInputError, match="both outcomes"):
        UDCGTheta(5, val_fraction=0.0).fit(rel, u, np.ones(len(rel)))
    with pytest.raises(UDCGInputError, match="groups"):
        UDCGTheta(5).fit(rel, u, correct, groups=groups[:-1])
    with pytest.raises(UDCGInputError, match="outside"):
        UDCGTheta(5).fit(rel, u * 2, correct)
    with pytest.raises(UDCGInputError, match="optimizer"):
        UDCGTheta(5, optimizer="sgd").fit(rel, u, correct)
    with pytest.raises(UDCGInputError, match="field 'k': must be a positive integer, got 0"):
        UDCGTheta(0).fit(rel, u, correct)
    with pytest.raises(UDCGInputError, match="not fitted"):
        UDCGTheta(5).predict_proba(rel, u)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"seed": "a", "val_fraction": 0.2}, "field 'seed': must be an integer, got 'a'"),
        ({"seed": -1}, "field 'seed': must be a non-negative integer, got -1"),
        ({"accelerator": "gpu0"}, "field 'accelerator': must be one of auto, gpu, .*got 'gpu0'"),
        ({"max_epochs": 0}, "field 'max_epochs': expected a positive integer, got 0"),
        ({"patience": 2.0}, "field 'patience': must be an integer, got 2.0"),
    ],
)
def test_params_are_refused_in_one_line_naming_them(small, params, message):
    rel, u, correct, groups = small
    with pytest.raises(UDCGInputError, match=message) as info:
        UDCGTheta(5, **params).fit(rel, u, correct, groups=groups)
    assert "\n" not in str(info.value)


def test_numpy_integers_are_accepted_as_counts_and_seed(small):
    rel, u, correct, groups = small
    numpy = UDCGTheta(5, max_epochs=np.int64(3), patience=np.int64(2), seed=np.int64(1))
    plain = UDCGTheta(5, max_epochs=3, patience=2, seed=1)
    for model in (numpy, plain):
        model.fit(rel, u, correct, groups=groups)
    np.testing.assert_array_equal(numpy.alpha_, plain.alpha_)


def test_the_card_records_the_settings_the_weights_were_fitted_with(small, tmp_path):
    rel, u, correct, groups = small
    model = UDCGTheta(5).fit(rel, u, correct, groups=groups)
    model.set_params(l2=3.0, bias=True)  # the next fit's settings, not these weights'
    model.save(tmp_path / "w.safetensors")
    card = json.loads(card_path(tmp_path / "w.safetensors").read_text())
    assert (card["l2"], card["bias"]) == (0.0, False) == (model.l2_, model.bias_)
    loaded = UDCGTheta.load(tmp_path / "w.safetensors").set_params(l2=1.0)
    assert (loaded.l2_, loaded.bias_) == (0.0, False)
    loaded.save(tmp_path / "again.safetensors")
    assert json.loads(card_path(tmp_path / "again.safetensors").read_text())["l2"] == 0.0


def test_params_follow_scikit_learn_conventions():
    model = UDCGTheta(5, l2=0.1)
    assert model.get_params()["l2"] == 0.1 and model.get_params()["k"] == 5
    assert model.set_params(bias=True) is model and model.bias is True
    assert repr(model) == "UDCGTheta(k=5, bias=True, l2=0.1)"
    with pytest.raises(UDCGInputError, match="unknown parameter"):
        model.set_params(gamma=1)


@pytest.mark.parametrize("optimizer", ["lbfgs", "adam"])
def test_a_fit_leaves_torchs_global_generator_as_it_was(optimizer: str) -> None:
    """A library call changes no process-wide state: a user's torch draws after a fit are
    those they would have been without it (nn.Linear's random init drew from the generator)."""
    rel, u, correct = simulate_arrays(200, 3, seed=1)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    UDCGTheta(3, optimizer=optimizer, max_epochs=3).fit(rel, u, correct)
    assert torch.equal(torch.rand(3), expected)


def test_fit_leaves_the_callers_grad_mode_and_ignores_it() -> None:
    """Under the caller's ``no_grad()`` or ``inference_mode()`` the fit gives the same weights,
    and grad mode is as the caller left it."""
    rel, u, correct = simulate_arrays(200, 3, seed=1)
    free = UDCGTheta(3, max_epochs=50).fit(rel, u, correct)
    for mode in (torch.no_grad, torch.inference_mode):
        with mode():
            fitted = UDCGTheta(3, max_epochs=50).fit(rel, u, correct)
            assert not torch.is_grad_enabled()
        np.testing.assert_array_equal(fitted.alpha_, free.alpha_)
    torch.set_grad_enabled(False)
    try:
        UDCGTheta(3, max_epochs=5).fit(rel, u, correct)
        assert not torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(True)


def test_digests_name_the_file_read_until_the_weights_change(tmp_path) -> None:
    """``digests()`` of loaded weights names their file and card; a new calibration leaves the
    card's digest unknown, and a new fit both."""
    rel, u, correct = simulate_arrays(200, 3, seed=1)
    path = tmp_path / "w.safetensors"
    UDCGTheta(3, max_epochs=20).fit(rel, u, correct).save(path, card={"utility": "abstention"})
    card = json.loads(card_path(path).read_text())
    loaded = UDCGTheta.load(path)
    assert loaded.digests() == {k: card[k] for k in ("weights_sha256", "card_sha256")}
    loaded.calibrate(rel, u, correct)
    assert loaded.digests() == {"weights_sha256": card["weights_sha256"], "card_sha256": None}
    loaded.fit(rel, u, correct)
    assert loaded.digests() == {"weights_sha256": None, "card_sha256": None}
