"""UDCG-theta: learned positional weights for helpful and distracting passage utility.

For a context of k passages with relevance ``rel_i`` and utility ``u_i`` (see
:func:`udcg.metrics.udcg.utility`)::

    UDCG_theta = sigmoid( b + sum_i alpha_i * rel_i * u_i + sum_i beta_i * (1 - rel_i) * u_i )

One model per list size k. The features are :func:`udcg.metrics.udcg.udcg_terms`, the labels
are end-to-end correctness of the LLM given exactly that context, and training minimises binary
cross-entropy (+ ``l2 / 2 * ||[alpha, beta]||^2``): logistic regression, so without
regularisation its optimum is unique and matches any other logistic-regression solver.

Fitted weights are data: :meth:`UDCGTheta.save` writes a safetensors file (``alpha``, ``beta``,
``intercept``) and a JSON card beside it; :meth:`UDCGTheta.load` checks one against the other
(both through :mod:`udcg.io.weights.files`). :meth:`UDCGTheta.save_pretrained` writes a weights
folder (``model.safetensors``, ``config.json``, ``README.md`` model card) that records what
decides whether the weights apply (judge, prompt and its hash, abstention mode, utility source,
udcg version...); :meth:`UDCGTheta.from_pretrained` reads a folder, a single-file export or a
Hugging Face Hub model (:func:`hub_id`: ``hf://owner/name[@revision]``, or ``owner/name`` when
no local ``owner`` exists; only the folder's three files are fetched). Weights whose card
records no SHA-256 load only with ``allow_unverified=True``. Loading and scoring need numpy and
safetensors only; fitting needs torch and lightning.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import expit

from udcg.errors import UDCGInputError, UDCGWarning
from udcg.io.weights.files import (
    CALIBRATION_ENTRIES,
    FORMAT,
    FORMAT_VERSION,
    RESERVED,
    ThetaWeights,
    card_digest,
    card_path,
    check_compatible,
    read_weights,
    write_pretrained,
    write_weights,
)
from udcg.io.weights.hub import hub_id, weights_source
from udcg.metrics._arrays import as_fixed
from udcg.metrics._kernels import row_sums
from udcg.metrics.udcg import udcg_terms
from udcg.theta.calibration import METHODS, Calibration, fit_platt, fit_temperature
from udcg.theta.ordering import best_assignment
from udcg.validation import (
    binary_vector,
    integer,
    nonnegative_float,
    nonnegative_int,
    one_of,
    positive_int,
    query_codes,
    show,
)

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "UDCGTheta",
    "UDCGThetaConvergenceWarning",
    "card_path",
    "hub_id",
    "pretrained_config",
    "split_by_query",
]


def pretrained_config(card: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The free entries of a weights folder's ``config.json``: what is known here (the udcg
    version, the abstention prompt templates and their SHA-256 from
    :func:`udcg.judge.prompts.prompt_record`), ``None`` for what is not, then ``card``'s
    entries over them.

    Examples:
        >>> config = pretrained_config({"judge_model": "Qwen/Qwen3-8B", "gamma": 0.3})
        >>> config["judge_model"], config["gamma"], config["utility"]
        ('Qwen/Qwen3-8B', 0.3, None)
    """
    from udcg import __version__
    from udcg.judge.prompts import prompt_record

    return {
        "udcg_version": __version__,
        "judge_model": None,
        "judge_fingerprint": None,  # of the judge whose utilities the weights were fitted on
        "relevance_fingerprint": None,  # of the judge whose LLM labelled the relevance
        "utility": None,
        "abstention_mode": None,
        "prompt": prompt_record(),
        "judge_serving": None,  # dtype or quantisation, template tokenizer
        "generator": None,
        "gamma": None,
        "training_data_fingerprint": None,
        "training_data_description": None,
        "license": None,
        "heldout": [],
        **dict(card or {}),
    }


_OPTIMIZERS = ("lbfgs", "adam")
_DEFAULT_LR = {"lbfgs": 1.0, "adam": 0.05}
_DEFAULT_MAX_EPOCHS = {"lbfgs": 100, "adam": 200}
_DEFAULT_VAL_FRACTION = {"lbfgs": 0.0, "adam": 0.2}


class UDCGThetaConvergenceWarning(UDCGWarning):
    """Training stopped at ``max_epochs`` before the optimizer converged.

    Examples:
        >>> import warnings
        >>> from udcg.theta.simulate import simulate_arrays
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     _ = UDCGTheta(k=3, optimizer="adam", max_epochs=1).fit(*simulate_arrays(200, 3))
        >>> [w.category.__name__ for w in caught]
        ['UDCGThetaConvergenceWarning']
    """


# --------------------------------------------------------------------------------------------
# input checks


def _check_k(k: Any) -> int:
    return positive_int(k, "k")


def _features(relevant: Any, utility: Any, k: int, what: str) -> np.ndarray:
    """``[n, 2k]`` float64: helpful terms of positions 1..k, then distracting terms."""
    rel = as_fixed(relevant, "relevant")
    u = as_fixed(utility, "utility")
    if rel.shape[0] != u.shape[0]:
        raise UDCGInputError(
            f"relevant has {rel.shape[0]} contexts but utility has {u.shape[0]}", field="utility"
        )
    if rel.shape[0] == 0:
        raise UDCGInputError("no contexts", field="relevant")
    for name, arr in (("relevant", rel), ("utility", u)):
        if arr.shape[1] != k:
            raise UDCGInputError(f"{what} for k={k}, data has k={arr.shape[1]}", field=name)
    helpful, distracting = udcg_terms(rel, u)
    return np.concatenate([helpful, distracting], axis=1)


def _at_least_one(value: Any, name: str) -> int:
    """``value`` as an int >= 1 (numpy integers accepted), or a located error."""
    if integer(value, name) < 1:
        raise UDCGInputError(f"expected a positive integer, got {show(value)}", field=name)
    return int(value)


def _check_accelerator(accelerator: Any) -> None:
    """A located error unless ``accelerator`` is a Lightning accelerator or one's name."""
    from lightning.pytorch.accelerators import Accelerator, AcceleratorRegistry

    if not isinstance(accelerator, Accelerator):
        names = ("auto", "gpu", *sorted(AcceleratorRegistry.available_accelerators()))
        one_of(accelerator, "accelerator", names)


def _check_fraction(val_fraction: Any) -> float:
    """``val_fraction`` as a float in [0, 1), or a located error."""
    if isinstance(val_fraction, bool) or not isinstance(val_fraction, int | float | np.floating):
        raise UDCGInputError(f"expected a number, got {show(val_fraction)}", field="val_fraction")
    if not 0.0 <= float(val_fraction) < 1.0:
        raise UDCGInputError(f"must be in [0, 1), got {show(val_fraction)}", field="val_fraction")
    return float(val_fraction)


def split_by_query(
    groups: Any, val_fraction: float = 0.2, seed: int | None = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``(train_idx, val_idx)``: context indices split by query, never by context.

    ``groups[i]`` is the query id of context i; every context of a query lands on the same side.
    ``round(val_fraction * n_queries)`` queries (at least 1 and at most ``n_queries - 1`` when
    ``val_fraction > 0``) are drawn for validation with ``numpy.random.default_rng(seed)``; the
    draw depends on the set of query ids, not on the order of the contexts. ``val_fraction=0``
    gives an empty validation split. Indices are sorted.

    Examples:
        >>> train, val = split_by_query(["a", "a", "b", "b"], val_fraction=0.5)
        >>> sorted([train.tolist(), val.tolist()])
        [[0, 1], [2, 3]]
        >>> split_by_query(["a", "b"], val_fraction=0)[1].tolist()
        []
    """
    val_fraction = _check_fraction(val_fraction)
    labels = np.asarray(groups)
    codes = query_codes(labels, labels.shape[0] if labels.ndim else 0)
    n = codes.shape[0]
    if val_fraction == 0 or n == 0:
        return np.arange(n, dtype=np.int64), np.zeros(0, dtype=np.int64)
    n_groups = int(codes.max()) + 1
    if n_groups < 2:
        raise UDCGInputError(
            "all contexts belong to one query; a validation split by query needs at least 2 "
            "(use val_fraction=0)",
            field="groups",
        )
    n_val = min(max(round(float(val_fraction) * n_groups), 1), n_groups - 1)
    rng = np.random.default_rng(seed)
    is_val_group = np.zeros(n_groups, dtype=bool)
    is_val_group[rng.permutation(n_groups)[:n_val]] = True
    in_val = is_val_group[codes]
    return np.flatnonzero(~in_val), np.flatnonzero(in_val)


# --------------------------------------------------------------------------------------------
# the estimator


class UDCGTheta:
    """UDCG-theta for lists of exactly ``k`` passages, with scikit-learn conventions.

    Parameters
    ----------
    k: list size; every context must have exactly k passages.
    bias: fit an intercept ``b`` (off by default, as in the paper).
    l2: weight of ``l2 / 2 * ||[alpha, beta]||^2`` added to the mean BCE (the bias is not
        penalised); equals scikit-learn's ``C = 1 / (l2 * n_train)``.
    optimizer: ``"lbfgs"`` (full-batch, strong-Wolfe line search; reaches the optimum) or
        ``"adam"`` (full-batch steps).
    max_epochs: epoch cap; an L-BFGS epoch is up to 20 iterations, an Adam epoch 25 steps.
        ``None``: 100 for L-BFGS, 200 for Adam.
    lr: learning rate; ``None``: 1.0 for L-BFGS, 0.05 for Adam.
    patience: epochs without a lower validation loss before early stopping.
    val_fraction: fraction of *queries* held out for validation (early stopping, best-epoch
        weights); 0 trains on everything and stops on convergence only. ``None``: 0 for
        L-BFGS, whose full-batch optimum on the data passed to ``fit`` needs no early stopping
        (with ``l2=0`` it is scikit-learn's unpenalised logistic regression), and 0.2 for
        Adam.
    tol: convergence when the largest gradient component of the objective is ``<= tol``.
    seed: seed of the train/validation split, a non-negative integer or None (the weights
        start at zero; nothing else is random, so one seed gives bit-identical weights on one
        machine).
    accelerator: a Lightning accelerator or its name (``"cpu"``, ``"cuda"``, ``"gpu"``...);
        ``"auto"`` is CUDA when available, else CPU.
    verbose: show Lightning's messages and progress bar.

    Fitted attributes: ``alpha_`` and ``beta_`` (``[k]`` float64 arrays), ``intercept_``
    (0.0 when ``bias=False``), ``n_iter_`` (optimizer iterations), ``history_``
    (``{"train_loss": [...], "val_loss": [...]}`` per epoch: training objective, validation
    BCE), ``split_`` (``(train_idx, val_idx)`` context indices), ``converged_``,
    ``early_stopped_``, ``bias_`` and ``l2_`` (what the weights were fitted with, which
    :meth:`save` records whatever the parameters say now), ``card_`` (the card's free entries:
    empty after :meth:`fit`, set by :meth:`load` and :func:`udcg.fit_theta`),
    ``calibration_`` (a :class:`udcg.theta.calibration.Calibration` from :meth:`calibrate` or
    the card, else None).

    Examples:
        Fitted on contexts simulated with alpha = (3.5, 2, 3.5), beta = -1 and b = -1
        (:mod:`udcg.theta.simulate`), saved and loaded back:

        >>> import tempfile
        >>> from pathlib import Path
        >>> from udcg.theta.simulate import simulate_arrays
        >>> model = UDCGTheta(k=3, bias=True).fit(*simulate_arrays(2000, 3, seed=0))
        >>> model.alpha_.round(1).tolist(), model.beta_.round(1).tolist()
        ([3.6, 1.8, 3.4], [-1.2, -1.1, -0.9])
        >>> p = model.predict_proba([[1, 0, 0]], [[0.9, 0.5, 0.1]])[0]
        >>> a, b = model.alpha_, model.beta_
        >>> logit = model.intercept_ + 0.9 * a[0] + 0.5 * b[1] + 0.1 * b[2]
        >>> bool(np.isclose(p, 1 / (1 + np.exp(-logit))))
        True
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     card = model.save(Path(folder) / "theta.safetensors", card={"judge": "sim"})
        ...     loaded = UDCGTheta.load(Path(folder) / "theta.safetensors", k=3)
        >>> card.name, loaded.card_["judge"], np.array_equal(loaded.alpha_, model.alpha_)
        ('theta.json', 'sim', True)
    """

    def __init__(
        self,
        k: int,
        bias: bool = False,
        l2: float = 0.0,
        optimizer: str = "lbfgs",
        max_epochs: int | None = None,
        lr: float | None = None,
        patience: int = 10,
        val_fraction: float | None = None,
        tol: float = 1e-10,
        seed: int | None = 0,
        accelerator: str = "auto",
        verbose: bool = False,
    ) -> None:
        self.k = k
        self.bias = bias
        self.l2 = l2
        self.optimizer = optimizer
        self.max_epochs = max_epochs
        self.lr = lr
        self.patience = patience
        self.val_fraction = val_fraction
        self.tol = tol
        self.seed = seed
        self.accelerator = accelerator
        self.verbose = verbose

    # ----------------------------------------------------------------------------------------
    # scikit-learn protocol

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p for p in sig.parameters if p != "self"]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Constructor parameters, as scikit-learn's ``get_params``."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> UDCGTheta:
        """Set constructor parameters, as scikit-learn's ``set_params``."""
        valid = set(self._param_names())
        for name, value in params.items():
            if name not in valid:
                raise UDCGInputError(f"unknown parameter {name!r} for UDCGTheta", field=name)
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        defaults = inspect.signature(type(self).__init__).parameters
        shown = [
            f"{name}={value!r}"
            for name, value in self.get_params().items()
            if name == "k" or value != defaults[name].default
        ]
        return f"UDCGTheta({', '.join(shown)})"

    def _check_params(self) -> dict[str, Any]:
        k = _check_k(self.k)
        if not isinstance(self.bias, bool | np.bool_):
            raise UDCGInputError(f"expected True or False, got {show(self.bias)}", field="bias")
        l2 = nonnegative_float(self.l2, "l2")
        if self.optimizer not in _OPTIMIZERS:
            raise UDCGInputError(
                f"unknown optimizer {self.optimizer!r}; expected one of {', '.join(_OPTIMIZERS)}",
                field="optimizer",
            )
        max_epochs = self.max_epochs
        if max_epochs is None:
            max_epochs = _DEFAULT_MAX_EPOCHS[self.optimizer]
        max_epochs = _at_least_one(max_epochs, "max_epochs")
        lr = _DEFAULT_LR[self.optimizer] if self.lr is None else self.lr
        if isinstance(lr, bool) or not isinstance(lr, int | float) or not 0 < lr < math.inf:
            raise UDCGInputError(f"expected a positive number, got {show(lr)}", field="lr")
        patience = _at_least_one(self.patience, "patience")
        tol = self.tol
        if isinstance(tol, bool) or not isinstance(tol, int | float) or not 0 < tol < math.inf:
            raise UDCGInputError(f"expected a positive number, got {show(tol)}", field="tol")
        if self.val_fraction is not None:
            _check_fraction(self.val_fraction)
        seed = None if self.seed is None else nonnegative_int(self.seed, "seed")
        _check_accelerator(self.accelerator)
        return {
            "k": k,
            "bias": bool(self.bias),
            "l2": float(l2),
            "max_epochs": max_epochs,
            "lr": float(lr),
            "patience": patience,
            "tol": float(tol),
            "seed": seed,
        }

    # ----------------------------------------------------------------------------------------
    # fitting and scoring

    def fit(
        self,
        relevant: Any,
        utility: Any,
        correct: Any,
        groups: Any = None,
        *,
        trainer: Any = None,
        logger: Any = None,
        callbacks: Any = (),
        warn_unconverged: bool = True,
    ) -> UDCGTheta:
        """Fit the weights on contexts ``[n, k]`` and their 0/1 end-to-end correctness.

        ``groups[i]`` is the query id of context i: the validation split holds out whole
        queries (no query is on both sides). ``groups=None`` treats every context as its own
        query, which leaks when a query has several contexts (runs, permutations).
        ``trainer``, ``logger`` and ``callbacks`` (a ``lightning.Trainer`` partial, Lightning
        loggers and callbacks) go to :func:`udcg.theta.lightning.fit_with_trainer`. A fit that
        stops at ``max_epochs`` unconverged warns (:class:`UDCGThetaConvergenceWarning`) unless
        ``warn_unconverged=False`` (``converged_`` says it either way).
        """
        params = self._check_params()
        k = params["k"]
        x = _features(relevant, utility, k, "the model is set up")
        y = binary_vector(correct, "correct", x.shape[0], "relevant")
        codes = query_codes(groups, x.shape[0], "relevant")
        val_fraction = self.val_fraction
        if val_fraction is None:
            val_fraction = _DEFAULT_VAL_FRACTION[self.optimizer]
        train_idx, val_idx = split_by_query(codes, val_fraction, params["seed"])
        y_train = y[train_idx]
        if y_train.min() == y_train.max():
            raise UDCGInputError(
                f"the training contexts are all {'correct' if y_train[0] else 'incorrect'}; "
                "both outcomes are needed to fit a model",
                field="correct",
            )

        import torch

        from udcg.theta.lightning import (
            ADAM_STEPS_PER_EPOCH,
            UDCGThetaDataModule,
            UDCGThetaModule,
            fit_with_trainer,
        )

        def tensor(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))

        # a caller's no_grad() or inference_mode() does not reach the fit (grad mode is back
        # as it was after)
        with torch.inference_mode(False), torch.enable_grad():
            has_val = val_idx.size > 0
            data = UDCGThetaDataModule(
                tensor(x[train_idx]),
                tensor(y_train),
                tensor(x[val_idx]) if has_val else None,
                tensor(y[val_idx]) if has_val else None,
                steps_per_epoch=ADAM_STEPS_PER_EPOCH if self.optimizer == "adam" else 1,
            )
            module = UDCGThetaModule(
                k=k,
                bias=params["bias"],
                l2=params["l2"],
                optimizer=self.optimizer,
                lr=params["lr"],
                tol=params["tol"],
            )
            outcome = fit_with_trainer(
                module,
                data,
                max_epochs=params["max_epochs"],
                patience=params["patience"],
                accelerator=self.accelerator,
                verbose=bool(self.verbose),
                trainer=trainer,
                logger=logger,
                callbacks=callbacks,
            )
        weight = outcome.weight.numpy()
        self.alpha_ = weight[:k].copy()
        self.beta_ = weight[k:].copy()
        self.intercept_ = 0.0 if outcome.bias is None else float(outcome.bias)
        self.n_iter_ = outcome.n_iter
        self.history_ = outcome.history
        self.split_ = (train_idx, val_idx)
        self.converged_ = outcome.converged
        self.early_stopped_ = outcome.early_stopped
        self.bias_ = params["bias"]
        self.l2_ = params["l2"]
        self.card_ = {}
        self.calibration_ = None
        self.__dict__.pop("digests_", None)  # a loaded file's: not these weights
        if warn_unconverged and not (outcome.converged or outcome.early_stopped):
            warnings.warn(
                f"UDCG-theta training stopped at max_epochs={params['max_epochs']} before "
                "converging; raise max_epochs, add l2 regularisation, or check whether the "
                "outcomes are perfectly separable",
                UDCGThetaConvergenceWarning,
                stacklevel=2,
            )
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "alpha_"):
            raise UDCGInputError(
                "this UDCGTheta is not fitted yet; call fit() or UDCGTheta.load() first"
            )

    def decision_function(self, relevant: Any, utility: Any) -> np.ndarray:
        """Logits ``b + sum_i alpha_i rel_i u_i + sum_i beta_i (1 - rel_i) u_i``, shape ``[n]``,
        summed left to right: a context's logit does not depend on the others scored with it."""
        self._check_fitted()
        x = _features(relevant, utility, len(self.alpha_), "weights are")
        w = np.concatenate([self.alpha_, self.beta_])
        return row_sums(x, w) + self.intercept_

    def predict_proba(self, relevant: Any, utility: Any, calibrated: bool = False) -> np.ndarray:
        """UDCG-theta per context: ``sigmoid(decision_function)``, a 1-D array in (0, 1);
        ``calibrated=True``: the recalibration fitted by :meth:`calibrate` applied to the
        logits instead (an error when there is none)."""
        logits = self.decision_function(relevant, utility)
        if not calibrated:
            return expit(logits)
        if getattr(self, "calibration_", None) is None:
            raise UDCGInputError(
                "these weights carry no calibration; call calibrate() first", field="calibrated"
            )
        return self.calibration_.apply(logits)

    def calibrate(
        self, relevant: Any, utility: Any, correct: Any, method: str = "temperature"
    ) -> UDCGTheta:
        """Fit a recalibration of the logits on contexts ``[n, k]`` and their 0/1 correctness
        (held out from training): ``"temperature"`` ``p = sigmoid(logit / T)`` or ``"platt"``
        ``p = sigmoid(a * logit + b)`` (:mod:`udcg.theta.calibration`). Sets ``calibration_``,
        used by ``predict_proba(..., calibrated=True)`` and saved in the card (``calibration``:
        method, parameters, number of contexts). The records of an earlier calibration in
        ``card_`` (what its contexts had, their digest, its allowed mismatches) are dropped:
        they describe the one replaced."""
        if method not in METHODS:
            raise UDCGInputError(
                f"unknown method {method!r}; expected one of {', '.join(METHODS)}", field="method"
            )
        logits = self.decision_function(relevant, utility)
        fit = fit_temperature if method == "temperature" else fit_platt
        self.calibration_ = fit(logits, correct)
        card = getattr(self, "card_", {})
        self.card_ = {key: value for key, value in card.items() if key not in CALIBRATION_ENTRIES}
        if hasattr(self, "digests_"):  # the card read holds another calibration now
            self.digests_ = {**self.digests_, "card_sha256": None}
        return self

    def best_order(self, relevant: Any, utility: Any) -> tuple[np.ndarray, float]:
        """``(order, probability)`` for ONE context of ``m <= k`` passages (1-D ``relevant`` and
        ``utility``): the permutation of its passages maximising :meth:`predict_proba` (the
        context zero-padded to k), and that probability
        (:func:`udcg.theta.ordering.best_assignment`; ties to the given order)."""
        self._check_fitted()
        n = np.shape(relevant)[0] if np.ndim(relevant) == 1 else -1
        if n > len(self.alpha_):
            raise UDCGInputError(
                f"the context has {n} passages but the weights are for k={len(self.alpha_)}; "
                "use best_context to choose k of them",
                field="relevant",
            )
        return self.best_context(relevant, utility)

    def best_context(
        self, relevant: Any, utility: Any, k: int | None = None
    ) -> tuple[np.ndarray, float]:
        """``(indices, probability)`` for ONE query's n candidates (1-D ``relevant`` and
        ``utility``): the ``min(k, n)`` candidates placed at positions 1..min(k, n) that
        maximise :meth:`predict_proba` (``k`` defaults to the weights' k and may not exceed
        it), and that (uncalibrated) probability (:func:`udcg.theta.ordering.best_assignment`;
        ties to the lower candidate index, earlier position first)."""
        self._check_fitted()
        order, logit = best_assignment(self.alpha_, self.beta_, relevant, utility, k)
        return order, float(expit(logit + self.intercept_))

    # ----------------------------------------------------------------------------------------
    # persistence

    def save(self, path: str | PathLike[str], card: Mapping[str, Any] | None = None) -> Path:
        """Write the weights to ``path`` (safetensors) and the JSON card ``<stem>.json`` beside it.

        Tensors: ``alpha`` ``[k]``, ``beta`` ``[k]``, ``intercept`` ``[]`` (float64). The card
        records ``format``, ``format_version``, ``k``, ``bias``, ``l2``, the tensors' shapes and
        the SHA-256 of the weights file, plus every entry of ``card`` (JSON-serialisable: judge
        model, gamma, training-data fingerprint, held-out correlation...). Each file is
        written atomically (:func:`udcg.io.weights.files.write_weights`); non-finite weights are
        refused. Returns the card's path.
        """
        return write_weights(path, self.to_weights(), pretrained_config(self._card(card)))

    @classmethod
    def load(
        cls, path: str | PathLike[str], k: int | None = None, *, allow_unverified: bool = False
    ) -> UDCGTheta:
        """A fitted :class:`UDCGTheta` from a weights file and its card (see :meth:`save`),
        or from a weights folder (see :meth:`save_pretrained`).

        ``k``: the list size the caller's data has; an error if the weights are for another.
        A missing or corrupted file, a card that does not describe the weights, a card of
        another format, or one that records no SHA-256 of the weights or of its entries
        (unless ``allow_unverified``: then a warning) raise :class:`UDCGInputError`
        (:func:`udcg.io.weights.files.read_weights`). The card's entries are in ``card_``; its
        ``calibration`` entry in ``calibration_`` (None when it has none, as after :meth:`fit`).
        ``digests_`` holds the SHA-256 of the weights file and of the card's entries as read,
        whether the card records them or not (unverified weights): what a record of scores
        made with them names.
        """
        weights = read_weights(path, k, allow_unverified=allow_unverified)
        model = cls(k=weights.k, bias=weights.bias, l2=weights.l2)
        model.alpha_ = weights.alpha
        model.beta_ = weights.beta
        model.intercept_ = weights.intercept
        model.bias_ = weights.bias
        model.l2_ = weights.l2
        model.card_ = weights.card
        model.digests_ = {
            "weights_sha256": weights.sha256,
            "card_sha256": card_digest(weights.card),
        }
        model.calibration_ = None
        if weights.card.get("calibration") is not None:  # checked where the card was read
            model.calibration_ = Calibration.from_dict(weights.card["calibration"])
        return model

    def digests(self) -> dict[str, str | None]:
        """The SHA-256 of the weights file and of the card's entries as :meth:`load` read them
        (``digests_``), else as the card records them (None for weights never written)."""
        card = getattr(self, "card_", {})
        recorded = {name: card.get(name) for name in ("weights_sha256", "card_sha256")}
        return getattr(self, "digests_", recorded)

    def save_pretrained(
        self, directory: str | PathLike[str], card: Mapping[str, Any] | None = None
    ) -> Path:
        """Write a weights folder: ``model.safetensors`` (as :meth:`save`), ``config.json``
        (the card: format, k, bias, l2, weights SHA-256 and :func:`pretrained_config` with
        ``card``'s entries: judge, utility source, abstention mode, prompt and its hash, judge
        serving, generator, udcg version, gamma, training data, licence, held-out
        correlations) and a ``README.md`` model card with Hub metadata. Returns the folder."""
        weights = self.to_weights()
        return write_pretrained(directory, weights, pretrained_config(self._card(card)))

    def to_weights(self) -> ThetaWeights:
        """The fitted weights as :class:`~udcg.io.weights.files.ThetaWeights`, ``card_`` as
        their card (what :func:`udcg.evaluate` reads for ``UDCGtheta@k``), with the bias and
        l2 they were fitted with (``bias_``, ``l2_``; the parameters for weights set by hand)."""
        self._check_fitted()
        card = {**getattr(self, "card_", {}), "k": len(self.alpha_)}
        bias = getattr(self, "bias_", self.bias)
        l2 = getattr(self, "l2_", self.l2)
        return ThetaWeights(
            self.alpha_, self.beta_, float(self.intercept_), bool(bias), float(l2), card
        )

    def _card(self, card: Mapping[str, Any] | None) -> dict[str, Any]:
        """The free entries of the card these weights carry (``card_``: loaded, or recorded by
        :func:`udcg.fit_theta`), ``card``'s over them, and ``calibration`` (:meth:`calibrate`)
        when there is one. A loaded card's ``figure`` names a file of the folder it was read
        from, which a new folder lacks: it is not carried."""
        carried = {k: v for k, v in getattr(self, "card_", {}).items() if k not in RESERVED}
        for entry in ("calibration", "figure"):
            carried.pop(entry, None)
        calibration = getattr(self, "calibration_", None)
        extra = {} if calibration is None else {"calibration": calibration.to_dict()}
        return {**carried, **dict(card or {}), **extra}

    def check_compatible(
        self, allow_mismatch: Any = (), *, calibrated: bool = False, **applied: Any
    ) -> list[str]:
        """Refuse these weights for data they were not fitted for: ``applied`` gives what the
        data has (``k``, ``utility``, ``judge``, ``fingerprint``: of the judge that made the
        utilities, ``prompt``: the prompt's SHA-256, ``mode``;
        None or absent: not checked); a difference from the card raises a one-line
        :class:`UDCGInputError` naming both values unless its field is in ``allow_mismatch``.
        ``calibrated``: the data will be scored with ``predict_proba(calibrated=True)``, so
        what the calibration was fitted on is checked too. Returns a note per mismatch allowed
        on purpose (:func:`udcg.io.weights.files.check_compatible`).
        """
        self._check_fitted()
        card = {"k": len(self.alpha_), **getattr(self, "card_", {})}
        option = "allow_mismatch=['{field}']"
        return check_compatible(card, applied, allow_mismatch, option, calibrated)

    @classmethod
    def from_pretrained(
        cls,
        source: str | PathLike[str],
        k: int | None = None,
        *,
        allow_unverified: bool = False,
    ) -> UDCGTheta:
        """A fitted :class:`UDCGTheta` from a weights folder (:meth:`save_pretrained`), a
        single-file export (:meth:`save`) or a Hugging Face Hub model (:func:`hub_id`:
        ``hf://owner/name[@revision]``, or ``owner/name`` when no local ``owner`` exists;
        only ``model.safetensors``, ``config.json`` and ``README.md`` are downloaded, with
        ``huggingface_hub.snapshot_download``; with ``HF_HUB_OFFLINE`` set it fails at once).
        Every check of :meth:`load` is done."""
        return cls.load(weights_source(source), k, allow_unverified=allow_unverified)
