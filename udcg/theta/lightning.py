"""The torch side of UDCG-theta: a LightningModule, a full-batch LightningDataModule and the
``Trainer`` run that fits them. :class:`udcg.theta.UDCGTheta` is the user-facing estimator;
this module is imported only when a model is fitted, so loading saved weights and scoring
needs neither torch nor lightning.

The model is logistic regression on the ``2k`` UDCG features
``x = [rel_1 u_1, ..., rel_k u_k, (1 - rel_1) u_1, ..., (1 - rel_k) u_k]``::

    objective(w, b) = mean_i BCE(sigmoid(b + w . x_i), correct_i) + l2 / 2 * ||w||^2

(the bias ``b`` is not penalised). Everything runs in float64 from zero initial weights, so
full-batch L-BFGS reaches the unique optimum when one exists, and no random number is drawn.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import skip_init

__all__ = [
    "FitOutcome",
    "UDCGThetaDataModule",
    "UDCGThetaModule",
    "bce_with_logits",
    "fit_with_trainer",
    "resolve_accelerator",
]

# L-BFGS iterations per epoch: an epoch is one ``optimizer.step(closure)``.
LBFGS_ITERATIONS_PER_EPOCH = 20
# Adam steps per epoch (full batch each), so that Lightning's per-epoch cost stays small.
ADAM_STEPS_PER_EPOCH = 25
# A validation loss (mean BCE) must drop by more than this to count as an improvement.
VAL_MIN_DELTA = 1e-6


def bce_with_logits(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Element-wise binary cross-entropy of ``sigmoid(logits)`` against ``target``.

    ``softplus(z) - y * z`` equals ``-y log sigmoid(z) - (1 - y) log(1 - sigmoid(z))`` and is
    stable for any z; it is what ``F.binary_cross_entropy_with_logits(reduction="none")``
    computes, several times faster on CPU for float64 (softplus is exact in float64 beyond
    the threshold 40, where ``log1p(exp(-z)) < 1e-17``).
    """
    return F.softplus(logits, threshold=40.0) - target * logits


class _FullBatch:
    """A "data loader" that yields the same full-batch tensors ``repeats`` times per epoch."""

    def __init__(self, tensors: tuple[torch.Tensor, torch.Tensor], repeats: int = 1) -> None:
        self.tensors = tensors
        self.repeats = repeats

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for _ in range(self.repeats):
            yield self.tensors

    def __len__(self) -> int:
        return self.repeats


class UDCGThetaDataModule(L.LightningDataModule):
    """Training (and optional validation) features and labels as full-batch float64 tensors.

    ``x_*`` are ``[n, 2k]`` feature matrices, ``y_*`` ``[n]`` 0/1 labels; ``x_val=None`` means
    no validation split. ``steps_per_epoch`` full-batch steps make one training epoch.
    """

    def __init__(
        self,
        x_train: torch.Tensor,
        y_train: torch.Tensor,
        x_val: torch.Tensor | None = None,
        y_val: torch.Tensor | None = None,
        steps_per_epoch: int = 1,
    ) -> None:
        super().__init__()
        self.x_train, self.y_train = x_train, y_train
        self.x_val, self.y_val = x_val, y_val
        self.steps_per_epoch = steps_per_epoch

    @property
    def has_validation(self) -> bool:
        return self.x_val is not None and self.x_val.shape[0] > 0

    def train_dataloader(self) -> _FullBatch:
        return _FullBatch((self.x_train, self.y_train), self.steps_per_epoch)

    def val_dataloader(self) -> _FullBatch | list:
        if not self.has_validation:
            return []
        return _FullBatch((self.x_val, self.y_val))


class UDCGThetaModule(L.LightningModule):
    """``sigmoid(Linear(2k -> 1))`` trained on BCE + ``l2 / 2 * ||w||^2`` (manual optimization).

    Each training step is one ``optimizer.step(closure)``: up to
    :data:`LBFGS_ITERATIONS_PER_EPOCH` L-BFGS iterations with a strong-Wolfe line search, or one
    Adam step. After the step the objective and its gradient are evaluated again; training
    stops (``converged``) when the largest gradient component is ``<= tol`` or the objective
    no longer moves. ``history`` holds the per-epoch training objective and validation BCE; the
    weights with the lowest validation loss are kept in ``best_state``.
    """

    def __init__(
        self,
        k: int,
        bias: bool = False,
        l2: float = 0.0,
        optimizer: str = "lbfgs",
        lr: float = 1.0,
        tol: float = 1e-10,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        # built without nn.Linear's random init (a draw from torch's global generator)
        self.linear = skip_init(nn.Linear, 2 * k, 1, bias=bias, dtype=torch.float64)
        with torch.no_grad():  # zero start: deterministic, and the problem is convex
            self.linear.weight.zero_()
            if self.linear.bias is not None:
                self.linear.bias.zero_()
        self.converged = False
        self.n_iter = 0
        self.history: dict[str, list[float]] = {"train_loss": [], "val_loss": []}
        self.best_val = float("inf")
        self.best_state: dict[str, torch.Tensor] | None = None
        self._val_sum = 0.0
        self._val_n = 0
        self._logged_epochs = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``b + w . x``, shape ``[n]``."""
        return self.linear(x).squeeze(-1)

    def objective(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean BCE of the logits against ``y`` plus ``l2 / 2 * ||w||^2`` (bias excluded)."""
        loss = bce_with_logits(self(x), y).mean()
        if self.hparams.l2 > 0:
            loss = loss + 0.5 * self.hparams.l2 * self.linear.weight.pow(2).sum()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self.hparams.optimizer == "lbfgs":
            return torch.optim.LBFGS(
                self.parameters(),
                lr=self.hparams.lr,
                max_iter=LBFGS_ITERATIONS_PER_EPOCH,
                history_size=20,
                tolerance_grad=self.hparams.tol,
                tolerance_change=1e-15,
                line_search_fn="strong_wolfe",
            )
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        if self.converged:
            return
        x, y = batch
        opt = self.optimizers()
        lbfgs = self.hparams.optimizer == "lbfgs"

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = self.objective(x, y)
            self.manual_backward(loss)
            return loss

        before = float(opt.step(closure=closure).detach())  # objective at the step's start
        if lbfgs:
            state = opt.optimizer.state[opt.optimizer.param_groups[0]["params"][0]]
            self.n_iter = int(state.get("n_iter", 0))
        else:
            self.n_iter += 1
        if not lbfgs and batch_idx < self.trainer.num_training_batches - 1:
            return
        after = float(closure().detach())  # objective and gradient where the step ended
        grad_max = max(float(p.grad.abs().max()) for p in self.parameters())
        stalled = lbfgs and abs(before - after) <= 1e-15 * max(1.0, abs(after))
        self.converged = grad_max <= self.hparams.tol or stalled
        self.history["train_loss"].append(after)

    def on_train_epoch_end(self) -> None:
        self._log_epoch()
        if self.converged:
            self.trainer.should_stop = True

    def _log_epoch(self) -> None:
        """This epoch's ``history`` entries, as the float64 values themselves, to the Trainer's
        loggers at step = epoch number (1, 2, ...: the rows of ``history.csv``)."""
        epoch = len(self.history["train_loss"])
        if not self.loggers or epoch == self._logged_epochs:
            return
        values = {"train_loss": self.history["train_loss"][-1]}
        if len(self.history["val_loss"]) == epoch:
            values["val_loss"] = self.history["val_loss"][-1]
        for logger in self.loggers:
            logger.log_metrics(values, step=epoch)
        self._logged_epochs = epoch

    def on_validation_epoch_start(self) -> None:
        self._val_sum, self._val_n = 0.0, 0

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        loss = bce_with_logits(self(x), y).sum()
        self._val_sum += float(loss)
        self._val_n += int(y.shape[0])

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking or self._val_n == 0:
            return
        val = self._val_sum / self._val_n
        self.history["val_loss"].append(val)
        # for early stopping; the loggers get the float64 value from on_train_epoch_end
        self.log("val_loss", val, prog_bar=True, logger=False)
        # keep the latest weights whose validation loss is within VAL_MIN_DELTA of the best:
        # a later epoch that is as good (up to noise) is the better-trained one
        if val <= self.best_val + VAL_MIN_DELTA:
            self.best_state = {n: t.detach().clone() for n, t in self.state_dict().items()}
        self.best_val = min(self.best_val, val)


@dataclass
class FitOutcome:
    """What one training run produced (weights on the CPU, as float64 tensors)."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    n_iter: int
    converged: bool
    early_stopped: bool
    history: dict[str, list[float]] = field(default_factory=dict)


def resolve_accelerator(accelerator: str) -> str:
    """``"auto"`` means CUDA when available, else CPU (never MPS, which lacks float64)."""
    if accelerator == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return accelerator


# One Trainer run at a time in this process: a run changes process-wide settings and puts them
# back (_quiet, _restore_torch_flags, Lightning's SIGTERM handler); two runs in two threads
# would interleave their saves and restores and leave the settings changed for good.
_TRAINER_LOCK = threading.RLock()


@contextlib.contextmanager
def _quiet(verbose: bool) -> Iterator[None]:
    """Silence Lightning's info lines and advisory warnings unless ``verbose``."""
    if verbose:
        yield
        return
    loggers = [logging.getLogger(n) for n in ("lightning.pytorch", "lightning.fabric")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"lightning(\.|$)")
            warnings.filterwarnings("ignore", module=r"pytorch_lightning(\.|$)")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


@contextlib.contextmanager
def _restore_torch_flags() -> Iterator[None]:
    """``Trainer(deterministic=True)`` changes process-wide torch flags, and a fit turns grad
    mode on; put them back."""
    grad = torch.is_grad_enabled()
    det = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    cudnn_det = torch.backends.cudnn.deterministic
    cudnn_bench = torch.backends.cudnn.benchmark
    cublas = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    try:
        yield
    finally:
        torch.set_grad_enabled(grad)
        torch.use_deterministic_algorithms(det, warn_only=warn_only)
        torch.backends.cudnn.deterministic = cudnn_det
        torch.backends.cudnn.benchmark = cudnn_bench
        if cublas is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = cublas


def _fit_interruptible(
    lightning_trainer: L.Trainer, module: UDCGThetaModule, data: UDCGThetaDataModule
) -> None:
    """``lightning_trainer.fit``, where Ctrl+C raises KeyboardInterrupt to the caller.

    Lightning catches a KeyboardInterrupt, ignores SIGINT from then on and calls
    ``sys.exit(1)``: here the SIGINT handler is put back and the interrupt raised again (a
    SystemExit that no interrupt caused goes on as it is)."""
    main = threading.current_thread() is threading.main_thread()
    sigint = signal.getsignal(signal.SIGINT) if main else None
    try:
        lightning_trainer.fit(module, datamodule=data)
    except SystemExit as exc:
        interrupt = exc.__context__
        if not isinstance(interrupt, KeyboardInterrupt):
            raise
        if main and sigint is not None:
            signal.signal(signal.SIGINT, sigint)
        raise interrupt from None


def fit_with_trainer(
    module: UDCGThetaModule,
    data: UDCGThetaDataModule,
    *,
    max_epochs: int,
    patience: int,
    accelerator: str = "auto",
    verbose: bool = False,
    trainer: Callable[..., L.Trainer] | None = None,
    logger: Any = None,
    callbacks: Sequence[Callback] = (),
) -> FitOutcome:
    """Fit ``module`` on ``data`` with a ``lightning.Trainer`` and return the chosen weights.

    With a validation split, training stops after ``patience`` epochs without a lower
    validation loss and the weights of the best validation epoch are returned. Without one,
    the final weights are returned. Checkpoints, progress bar and model summary are off unless
    ``verbose``.

    ``trainer`` builds the Trainer (``lightning.Trainer`` when None; a ``functools.partial`` of
    it, such as the ``trainer`` config of ``udcg train``, adds its other options); the
    arguments set here win over the partial's. ``logger``: Lightning logger(s) that get the
    module's hyperparameters and the per-epoch ``train_loss``/``val_loss`` (None: none, and
    nothing is written to disk). ``callbacks`` are added to the Trainer's; an
    ``EarlyStopping`` among them replaces the one built from ``patience`` (used only with a
    validation split).

    Process settings (docs/cli.md, "Process settings"): runs in one process are one at a
    time; while one runs, Lightning's loggers and warnings are quiet (unless ``verbose``) and,
    on a GPU only, torch's determinism flags and ``CUBLAS_WORKSPACE_CONFIG`` are set; all are
    put back after. Ctrl+C raises KeyboardInterrupt.
    """
    callbacks = list(callbacks)
    given_early = [c for c in callbacks if isinstance(c, EarlyStopping)]
    callbacks = [c for c in callbacks if not isinstance(c, EarlyStopping)]
    early = None
    if data.has_validation:
        early = given_early[0] if given_early else None
        if early is None:
            early = EarlyStopping(
                monitor="val_loss", mode="min", patience=patience, min_delta=VAL_MIN_DELTA
            )
        callbacks.append(early)
    make_trainer = L.Trainer if trainer is None else trainer
    device = resolve_accelerator(accelerator)
    with _TRAINER_LOCK, _quiet(verbose), _restore_torch_flags():
        lightning_trainer = make_trainer(
            accelerator=device,
            devices=1,
            max_epochs=max_epochs,
            logger=False if logger is None else logger,
            enable_checkpointing=False,
            enable_progress_bar=verbose,
            enable_model_summary=verbose,
            # the CPU kernels of this model are deterministic already: torch's flags and
            # CUBLAS_WORKSPACE_CONFIG are left alone there (None: not touched by Lightning)
            deterministic=None if device == "cpu" else True,
            num_sanity_val_steps=0,
            limit_val_batches=1.0 if data.has_validation else 0,
            callbacks=callbacks,
        )
        _fit_interruptible(lightning_trainer, module, data)
    if data.has_validation and module.best_state is not None:
        module.load_state_dict(module.best_state)
    weight = module.linear.weight.detach().to("cpu", torch.float64).reshape(-1)
    b = module.linear.bias
    return FitOutcome(
        weight=weight,
        bias=None if b is None else b.detach().to("cpu", torch.float64).reshape(()),
        n_iter=module.n_iter,
        converged=module.converged,
        early_stopped=bool(early is not None and early.stopped_epoch > 0),
        history={k: list(v) for k, v in module.history.items()},
    )
