"""Fit UDCG-theta for one list size k, tune gamma, compare every metric on held-out queries.

The steps behind ``python train.py k=5``: select the contexts with exactly k passages and the
judge's labels, split them by query into train and held-out sets, fit UDCG-theta and tune
gamma on the training queries, then correlate every metric with end-to-end correctness on the
held-out queries (bootstrap CIs over queries) and export the weights with their card and a plot:
a weights folder ``udcg_theta_k{k}/`` (:meth:`UDCGTheta.save_pretrained`: ``model.safetensors``,
``config.json``, ``README.md`` model card, ``weights.png``) and the single-file export
``udcg_theta_k{k}.safetensors`` + ``.json`` + ``.png`` beside it.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from udcg import metrics
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context
from udcg.io.contexts.model import distinct_contexts
from udcg.io.files import PathType, exclusive_writer
from udcg.io.joins.utility_sources import DEFAULT_SOURCE, get_source
from udcg.pipeline.context_scores import (
    abstention_mode,
    as_contexts,
    file_labels_made_by,
    file_values_made_by,
    stored_judge_key,
)
from udcg.pipeline.fit_size import warn_if_few_contexts
from udcg.pipeline.metric_table import MetricRow, classic_metrics, finite_or_none, metric_rows
from udcg.pipeline.plots import plot_weights
from udcg.pipeline.settings import TrainSettings
from udcg.pipeline.tracking import flat_metrics, log_params
from udcg.progress import next_stage, progress
from udcg.theta import UDCGTheta, split_by_query, tune_gamma
from udcg.validation import positive_int

MIN_QUERIES_PER_SPLIT = 2
#: the alpha/beta plot in a weights folder, shown by its README.md
FIGURE_NAME = "weights.png"


@dataclass(frozen=True, eq=False)
class LabelledSet:
    """Contexts of one list size: ``relevant`` and ``utility`` ``[n, k]``, ``correct`` ``[n]``."""

    qids: np.ndarray
    relevant: np.ndarray
    utility: np.ndarray
    correct: np.ndarray

    def __len__(self) -> int:
        return len(self.correct)

    def subset(self, index: np.ndarray) -> LabelledSet:
        return LabelledSet(
            self.qids[index], self.relevant[index], self.utility[index], self.correct[index]
        )

    def fingerprint(self) -> str:
        """SHA-256 of the labels, utilities, outcomes and query ids, in order."""
        digest = hashlib.sha256()
        for array in (self.relevant, self.utility, self.correct):
            digest.update(np.ascontiguousarray(array, dtype=np.float64).tobytes())
        digest.update("\n".join(self.qids.tolist()).encode())
        return digest.hexdigest()


@dataclass
class Selection:
    """What :func:`select` kept, and why it skipped the rest."""

    data: LabelledSet
    skipped: Counter = field(default_factory=Counter)


def select(
    contexts: Iterable[Context], k: int, judge: str, utility: str = DEFAULT_SOURCE
) -> Selection:
    """Contexts with exactly ``k`` passages, all labelled ``relevant``, with the judge's
    utilities from source ``utility`` (see :mod:`udcg.io.joins.utility_sources`) and an outcome
    ``outcomes[judge].correct``; the rest are counted by reason."""
    source = get_source(utility)
    skipped: Counter = Counter()
    qids, rel, util, correct = [], [], [], []
    for ctx in contexts:
        if len(ctx.passages) != k:
            skipped[f"list size != {k}"] += 1
            continue
        labels = [p.relevant for p in ctx.passages]
        if None in labels:
            skipped["passage without 'relevant'"] += 1
            continue
        u = source.passage_utilities(ctx, judge)
        if u is None:
            skipped[f"passage without {source.field}.{judge}"] += 1
            continue
        outcome = ctx.outcomes.get(judge, {}).get("correct")
        if outcome is None:
            skipped[f"no outcomes.{judge}.correct"] += 1
            continue
        qids.append(ctx.qid)
        rel.append(np.asarray(labels, dtype=np.float64))
        util.append(u)
        correct.append(float(outcome))
    data = LabelledSet(
        np.asarray(qids, dtype=object),
        np.asarray(rel, dtype=np.float64).reshape(len(qids), k),
        np.asarray(util, dtype=np.float64).reshape(len(qids), k),
        np.asarray(correct, dtype=np.float64),
    )
    return Selection(data, skipped)


def metric_scores(data: LabelledSet, model: UDCGTheta, gamma: float) -> dict[str, np.ndarray]:
    """Per-context value of every compared metric."""
    return {
        "UDCG-theta": model.predict_proba(data.relevant, data.utility),
        f"UDCG (gamma={gamma:.3g}, tuned)": metrics.udcg(data.relevant, data.utility, gamma),
        "UDCG (gamma=1/3)": metrics.udcg(data.relevant, data.utility),
        **classic_metrics(data.relevant),
    }


@dataclass
class TrainReport:
    """Everything ``train.py`` prints and exports."""

    k: int
    judge: str
    n_train: int
    n_test: int
    n_train_queries: int
    n_test_queries: int
    gamma: float
    gamma_train_correlation: float
    rows: list[MetricRow]
    skipped: dict[str, int]
    fingerprint: str
    weights_path: Path | None = None
    plot_path: Path | None = None
    model_dir: Path | None = None
    correlation: str = "spearman"
    calibration: str | None = None  # the recalibration fitted on the held-out queries
    seed: int = 0  # of the split by query and the fit
    test_fraction: float = 0.3  # share of queries held out
    judge_fingerprint: str | None = None  # of the judge that made the utilities (None: unknown)
    relevance_fingerprint: str | None = None  # of the judge whose LLM labelled the relevance

    def card(self, utility: str) -> dict[str, Any]:
        """The JSON card entries written next to the weights."""
        source = get_source(utility)
        return {
            "judge_model": self.judge,
            "judge_fingerprint": self.judge_fingerprint,
            "relevance_fingerprint": self.relevance_fingerprint,
            "abstention_mode": abstention_mode(self.judge_fingerprint, utility),
            "correlation": self.correlation,
            "training_data_description": (
                f"{self.n_train} training contexts ({self.n_train_queries} queries) of exactly "
                f"k={self.k} passages with judge {self.judge!r} utilities and end-to-end "
                f"correctness labels; {self.n_test} contexts ({self.n_test_queries} queries) "
                "held out for the correlations"
            ),
            "utility": utility,
            "utility_field": source.field,
            "utility_formula": source.formula,
            "gamma": self.gamma,
            "gamma_train_correlation": finite_or_none(self.gamma_train_correlation),
            "training_data_fingerprint": self.fingerprint,
            "seed": self.seed,
            "test_fraction": self.test_fraction,
            "sizes": {
                "train_contexts": self.n_train,
                "test_contexts": self.n_test,
                "train_queries": self.n_train_queries,
                "test_queries": self.n_test_queries,
                "skipped": self.skipped,
            },
            "heldout": [row.to_json() for row in self.rows],
        }


def train(
    contexts: Iterable[Context],
    model: UDCGTheta,
    settings: TrainSettings | None = None,
    export_dir: Path | None = None,
    *,
    trainer: Any = None,
    logger: Any = None,
    callbacks: Sequence[Any] = (),
    judge_fingerprint: str | None = None,
    relevance_fingerprint: str | None = None,
) -> TrainReport:
    """Select, split by query, fit ``model`` and tune gamma, compare on held-out, fit the
    recalibration ``settings.calibration`` on the held-out queries (stored with the weights:
    :meth:`UDCGTheta.calibrate`), export. ``judge_fingerprint``: of the judge that made the
    utilities (the contexts file's manifest records it: :func:`udcg.io.manifests.values_made_by`),
    recorded in the card so the weights are refused for another judge's values of the key;
    ``relevance_fingerprint`` likewise, of the judge whose LLM labelled the relevance.

    ``settings`` default to :class:`TrainSettings` for the model's k. ``trainer``, ``logger``
    and ``callbacks`` go to :meth:`UDCGTheta.fit` (the Lightning Trainer, loggers, callbacks);
    :func:`log_run` adds the results to the loggers. With ``export_dir``, one process at a
    time trains into it for k: the lock of its weights file is taken before any work
    (:func:`udcg.io.files.exclusive_writer`), and a second one is refused in one line."""
    k = settings.k if settings is not None else model.k
    held = (
        contextlib.nullcontext()
        if export_dir is None
        else exclusive_writer(_exported(export_dir, k).with_suffix(".safetensors"), "export")
    )
    with held:
        return _train(
            contexts, model, settings, export_dir, trainer, logger, callbacks,
            judge_fingerprint, relevance_fingerprint,
        )  # fmt: skip


def _exported(export_dir: PathType, k: int) -> Path:
    """Where :func:`train` exports the weights for ``k``: the folder ``udcg_theta_k{k}``, with
    ``.safetensors`` and ``.png`` files of that name beside it.

    Examples:
        >>> _exported("out", 5).with_suffix(".safetensors").as_posix()
        'out/udcg_theta_k5.safetensors'
    """
    return Path(export_dir) / f"udcg_theta_k{k}"


def _train(
    contexts: Iterable[Context],
    model: UDCGTheta,
    settings: TrainSettings | None,
    export_dir: Path | None,
    trainer: Any,
    logger: Any,
    callbacks: Sequence[Any],
    judge_fingerprint: str | None,
    relevance_fingerprint: str | None,
) -> TrainReport:
    """:func:`train`, the export's lock held."""
    if settings is None:
        settings = TrainSettings(k=model.k)
    k = settings.k
    if model.k != k:
        raise UDCGInputError(f"the model is for k={model.k}, not k={k}", field="model.k")
    # a context held twice would count twice in the fit and the held-out correlations
    selection = select(distinct_contexts(contexts), k, settings.judge_key, settings.utility)
    data = selection.data
    n_queries = len(set(data.qids.tolist()))
    if n_queries < 2 * MIN_QUERIES_PER_SPLIT:
        reasons = ", ".join(f"{n} {why}" for why, n in selection.skipped.items()) or "none skipped"
        raise UDCGInputError(
            f"{len(data)} contexts from {n_queries} queries have k={k} and judge "
            f"{settings.judge_key!r} labels ({reasons}); a train/held-out split by query needs at "
            f"least {2 * MIN_QUERIES_PER_SPLIT} queries",
            field="data",
        )
    train_idx, test_idx = split_by_query(data.qids, settings.test_fraction, settings.seed)
    train_set, test_set = data.subset(train_idx), data.subset(test_idx)
    for side, held in (("held-out", test_set), ("training", train_set)):
        if len(set(held.qids.tolist())) < MIN_QUERIES_PER_SPLIT:
            raise UDCGInputError(
                f"test_fraction={settings.test_fraction} leaves fewer than"
                f" {MIN_QUERIES_PER_SPLIT} {side} queries out of {n_queries}",
                field="test_fraction",
            )
    warn_if_few_contexts(len(train_set), model)
    with progress(4, "train: fit", unit="stage") as bar:
        model.fit(
            train_set.relevant,
            train_set.utility,
            train_set.correct,
            groups=train_set.qids,
            trainer=trainer,
            logger=logger,
            callbacks=callbacks,
        )
        next_stage(bar, "train", "tune gamma")
        tuned = tune_gamma(
            train_set.relevant,
            train_set.utility,
            train_set.correct,
            grid=settings.gamma_grid,
            method=settings.correlation,
        )
        next_stage(bar, "train", "held-out comparison")
        rows = metric_rows(
            metric_scores(test_set, model, tuned.gamma),
            test_set.correct,
            test_set.qids,
            settings.correlation,
            settings.n_bootstrap,
            settings.seed,
        )
        next_stage(bar, "train", "calibrate and export")
        if settings.calibration != "none":
            try:
                model.calibrate(
                    test_set.relevant, test_set.utility, test_set.correct, settings.calibration
                )
            except UDCGInputError as exc:
                raise UDCGInputError(
                    f"cannot fit {settings.calibration} on the held-out queries: {exc.reason}",
                    field="calibration",
                ) from None
        report = TrainReport(
            k=k,
            judge=settings.judge_key,
            n_train=len(train_set),
            n_test=len(test_set),
            n_train_queries=len(set(train_set.qids.tolist())),
            n_test_queries=len(set(test_set.qids.tolist())),
            gamma=float(tuned.gamma),
            gamma_train_correlation=float(tuned.train_correlation),
            rows=rows,
            skipped=dict(selection.skipped),
            fingerprint=train_set.fingerprint(),
            correlation=settings.correlation,
            calibration=None if model.calibration_ is None else model.calibration_.describe(),
            seed=settings.seed,
            test_fraction=settings.test_fraction,
            judge_fingerprint=judge_fingerprint,
            relevance_fingerprint=relevance_fingerprint,
        )
        if export_dir is not None:
            report.model_dir = _exported(export_dir, k)
            report.weights_path = report.model_dir.with_suffix(".safetensors")
            model.save(report.weights_path, card=report.card(settings.utility))
            report.plot_path = report.model_dir.with_suffix(".png")
            plot_weights(
                model, report.plot_path, f"UDCG-theta weights, k={k}, judge {settings.judge_key}"
            )
            card = {**report.card(settings.utility), "figure": FIGURE_NAME}
            model.save_pretrained(report.model_dir, card=card)
            (report.model_dir / FIGURE_NAME).write_bytes(report.plot_path.read_bytes())
        bar.update(1)
    return report


def run_metrics(report: TrainReport, utility: str = DEFAULT_SOURCE) -> dict[str, float]:
    """The run's numbers as the loggers get them: every finite number of its weights card
    (:meth:`TrainReport.card`) under its ``/``-joined path (:func:`udcg.pipeline.tracking.
    flat_metrics`): ``gamma``, ``sizes/train_contexts``, ``heldout/<metric>/spearman``...

    >>> from udcg.theta.simulate import simulate_contexts
    >>> settings = TrainSettings(k=3, judge="sim", n_bootstrap=20)
    >>> report = train(simulate_contexts(40, 3), UDCGTheta(3), settings)
    >>> metrics = run_metrics(report)
    >>> theta = report.rows[0]
    >>> metrics["gamma"] == report.gamma, metrics["heldout/UDCG-theta/kendall"] == theta.kendall
    (True, True)
    """
    return flat_metrics(report.card(utility))


def log_run(
    loggers: Sequence[Any],
    report: TrainReport,
    params: Mapping[str, str],
    utility: str = DEFAULT_SOURCE,
    artifacts: Sequence[Path] = (),
) -> None:
    """Add a finished training run to its Lightning ``loggers``: ``params`` (flat names to
    strings) as hyperparameters (to MLflow whole: :func:`udcg.pipeline.tracking.log_params`),
    :func:`run_metrics` as metrics; an ``MLFlowLogger`` also gets the ``artifacts`` (files and
    folders). Each logger is finalized ("success") again.

    >>> log_run([], None, {})  # no logger: nothing to do
    """
    if not loggers:
        return
    from lightning.pytorch.loggers import MLFlowLogger

    for logger in loggers:
        if not isinstance(logger, MLFlowLogger):
            logger.log_hyperparams(dict(params))
        logger.log_metrics(run_metrics(report, utility))
        if isinstance(logger, MLFlowLogger):
            client, run_id = logger.experiment, logger.run_id
            log_params(client, run_id, params)
            for path in artifacts:
                if Path(path).is_dir():
                    client.log_artifacts(run_id, str(path), artifact_path=Path(path).name)
                else:
                    client.log_artifact(run_id, str(path))
        logger.finalize("success")


def fit_theta(
    contexts: Iterable[Context] | PathType,
    k: int,
    *,
    judge_key: str | None = None,
    utility: str = DEFAULT_SOURCE,
    **options: Any,
) -> UDCGTheta:
    """:class:`UDCGTheta` for lists of ``k`` passages fitted on every labelled context of that
    size (:func:`select`: relevance labels, the judge's utilities from source ``utility``,
    graded outcomes); ``contexts``: contexts or a contexts JSONL file; ``judge_key``: the key
    their labels are stored under (None: the only one they hold); ``options`` go to
    :class:`UDCGTheta` (``l2``, ``val_fraction``, ``seed``...). ``train.py`` adds a held-out
    comparison, gamma tuning and a weights card.

    >>> import udcg
    >>> model = udcg.fit_theta(udcg.demo_contexts(), 3, val_fraction=0.0)
    >>> model.alpha_.shape, model.beta_.shape
    ((3,), (3,))
    """
    k = positive_int(k, "k")
    given, contexts = contexts, as_contexts(contexts)
    judge = judge_key or stored_judge_key(contexts, utility)
    made = file_values_made_by(given, judge, utility)
    data = select(contexts, k, judge, utility).data
    if not len(data):
        raise UDCGInputError(
            f"no context has k={k} passages with relevance labels, {utility} utilities and "
            f"graded outcomes of judge {judge!r}",
            field="k",
        )
    model = UDCGTheta(k, **options).fit(data.relevant, data.utility, data.correct, groups=data.qids)
    # what save() and the checks read
    model.card_ = {
        "judge_model": judge,
        "judge_fingerprint": made,
        "relevance_fingerprint": file_labels_made_by(given),
        "abstention_mode": abstention_mode(made, utility),
        "utility": utility,
    }
    return model
