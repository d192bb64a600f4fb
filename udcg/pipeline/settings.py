"""The typed options of the two pipelines (``udcg/conf/train.yaml``, ``udcg/conf/evaluate.yaml``).

Each settings object checks its values when it is built, before any work starts: a wrong value
is a :class:`~udcg.errors.UDCGInputError` whose field is the option as the user types it
(``test_fraction``, ``correlation``), never a parameter name inside the library.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from udcg.errors import UDCGInputError
from udcg.io.joins.utility_sources import DEFAULT_SOURCE, get_source
from udcg.io.weights.files import MISMATCH_FIELDS
from udcg.judge.options import check_options
from udcg.judge.ray_engine import engine_options
from udcg.judge.spec import judge_key
from udcg.labels.annotate import GRADERS, RELEVANCE_MODES
from udcg.qcare.coverage import GAINS
from udcg.stats import METHODS
from udcg.theta.gamma import check_grid
from udcg.theta.ordering import ORDERINGS
from udcg.validation import (
    boolean,
    nonempty_str,
    nonnegative_float,
    nonnegative_int,
    one_of,
    open_fraction,
    positive_int,
    show,
)


@dataclass(frozen=True)
class Settings:
    """Options of both pipelines: list size, judge (its labels are read under
    :attr:`judge_key`: ``judge_name``, else the spec without connection details), utility
    source, and how metrics are correlated with correctness."""

    k: int = 5
    judge: str = "smollm2-135m"
    judge_name: str | None = None
    utility: str = DEFAULT_SOURCE
    correlation: str = "spearman"
    n_bootstrap: int = 1000
    seed: int = 0

    def __post_init__(self) -> None:
        positive_int(self.k, "k")
        nonempty_str(self.judge, "judge")
        judge_key(self.judge, self.judge_name)  # a malformed spec or empty name fails here
        get_source(self.utility)  # an unknown source names the known ones
        one_of(self.correlation, "correlation", METHODS)
        positive_int(self.n_bootstrap, "n_bootstrap")
        nonnegative_int(self.seed, "seed")

    @property
    def judge_key(self) -> str:
        """The key the judge's labels are stored under (:func:`udcg.judge.judge_key`)."""
        return judge_key(self.judge, self.judge_name)


#: ``train.py calibration=...``: no recalibration, or the one fitted on the held-out queries.
CALIBRATIONS = ("none", "temperature", "platt")


@dataclass(frozen=True)
class TrainSettings(Settings):
    """``train``'s options beyond the data and the model: the share of queries held out and
    the gammas tried (None: :data:`udcg.theta.DEFAULT_GRID`) and the recalibration fitted on
    the held-out queries and stored with the weights (:data:`CALIBRATIONS`)."""

    test_fraction: float = 0.3
    gamma_grid: Sequence[float] | None = None
    calibration: str = "none"

    def __post_init__(self) -> None:
        super().__post_init__()
        open_fraction(self.test_fraction, "test_fraction")
        check_grid(self.gamma_grid, "gamma_grid")
        one_of(self.calibration, "calibration", CALIBRATIONS)


@dataclass(frozen=True)
class EvaluateSettings(Settings):
    """``evaluate``'s options beyond the data and the retriever. ``cache_dir`` holds the
    stage outputs; ``judge_cache`` is the judge's SQLite cache (None: the one every command
    shares, :func:`udcg.judge.cache.default_cache_path`). ``order`` picks the contexts'
    passages and their order from the retriever's top :attr:`candidates`
    (:data:`udcg.theta.ordering.ORDERINGS`; ``theta`` needs ``theta_weights`` or
    ``theta_crossfit``, fitted with the penalty ``theta_l2``); ``qcare_gain`` is C-nDCG's gain
    (:data:`udcg.qcare.coverage.GAINS`); ``erag`` adds eRAG's per-passage labels and metrics
    (:mod:`udcg.labels.erag`); ``allow_unverified`` loads
    ``theta_weights`` whose card records no SHA-256 (unchecked, with a warning).
    ``engine=ray`` runs the judge calls on Ray actors set by ``ray``
    (:func:`udcg.judge.ray_engine.engine_options`)."""

    k: int = 3
    judge_options: Mapping[str, Any] = field(default_factory=dict)
    relevance: str = "string"
    grader: str = "span"
    max_new_tokens: int = 16
    qcare: bool = False
    qcare_gain: str = "linear"
    erag: bool = False
    ablations: bool = False
    theta_weights: str | None = None
    allow_mismatch: Sequence[str] = ()
    allow_unverified: bool = False
    theta_crossfit: bool = False
    theta_l2: float = 0.0
    cache_dir: Path = Path("outputs/evaluate/cache")
    judge_cache: str | None = None
    order: str = "retriever"
    order_candidates: int | None = None
    engine: str = "local"
    ray: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.judge_options, Mapping):
            raise UDCGInputError(
                f"must be a mapping of backend options, got {show(self.judge_options)}",
                field="judge_options",
            )
        check_options(self.judge, self.judge_options, "judge_options.")
        engine_options(self.engine, self.ray)  # engine=ray: judge calls on Ray actors
        if self.judge_cache is not None:
            nonempty_str(self.judge_cache, "judge_cache")
        one_of(self.relevance, "relevance", RELEVANCE_MODES)
        one_of(self.grader, "grader", GRADERS)
        one_of(self.qcare_gain, "qcare_gain", GAINS)
        positive_int(self.max_new_tokens, "max_new_tokens")
        for name in ("qcare", "erag", "ablations", "theta_crossfit", "allow_unverified"):
            boolean(getattr(self, name), name)
        nonnegative_float(self.theta_l2, "theta_l2")
        if self.theta_weights is not None:
            nonempty_str(self.theta_weights, "theta_weights")
        if isinstance(self.allow_mismatch, str) or not isinstance(self.allow_mismatch, Sequence):
            raise UDCGInputError(
                f"must be a list of fields, got {show(self.allow_mismatch)}",
                field="allow_mismatch",
            )
        for name in self.allow_mismatch:
            one_of(name, "allow_mismatch", tuple(MISMATCH_FIELDS))
        one_of(self.order, "order", tuple(ORDERINGS))
        if self.order_candidates is not None:
            positive_int(self.order_candidates, "order_candidates")
            if self.order_candidates < self.k:
                raise UDCGInputError(
                    f"must be at least k={self.k}, got {self.order_candidates}",
                    field="order_candidates",
                )
        if self.order == "theta" and not (self.theta_weights or self.theta_crossfit):
            raise UDCGInputError(
                "order=theta needs UDCG-theta weights: set theta_weights=... (train.py) or "
                "theta_crossfit=true",
                field="theta_weights",
            )

    @property
    def outcome(self) -> dict[str, Any]:
        """What an outcome records of how it was made: its ``grader`` and ``max_new_tokens``."""
        return {"grader": self.grader, "max_new_tokens": self.max_new_tokens}

    @property
    def candidates(self) -> int:
        """How many of the retriever's passages an ordering chooses from: ``order_candidates``,
        else 2k (k for ``order=retriever``: the retriever's top-k as they come)."""
        if self.order == "retriever":
            return self.k
        return self.order_candidates if self.order_candidates is not None else 2 * self.k
