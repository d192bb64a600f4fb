"""Experiment tracking: the parameters, metric tables and plots of ``udcg benchmark`` runs and
sweeps in MLflow, and the flat names every tracker (MLflow, and the Lightning loggers of
``udcg train``) gets.

MLflow is imported only when a run is tracked (the ``tracking`` extra; a missing one is the
``ModuleNotFoundError`` the commands turn into their one-line error). Runs are written through
an explicit ``mlflow.MlflowClient(tracking_uri)``: no environment variable, global tracking URI
or active run is set.

One tracked run (:func:`track_report`) holds:

* params: the run's config (``report.json``'s ``config``), flattened with ``.`` as Hydra
  overrides are written (``dataset.limit``), each value a string (:func:`param_value`: a
  string as it is, anything else as JSON: ``3``, ``true``, ``null``, ``[]``);
* metrics: every finite number of ``report.json`` outside ``config`` (:func:`flat_metrics`:
  ``means/UDCG``, ``correlations/UDCG/spearman``, ``correlations/UDCG/ci95/0``,
  ``setup/accuracy``);
* artifacts: ``report.json``, ``report.md`` and the plots;
* tags: ``udcg.command`` and, for a sweep member, ``udcg.sweep_dir`` and ``udcg.sweep_id``
  (the id of the sweep invocation it ran in, ``report.json``'s ``sweep.id``).

A sweep (:func:`track_sweep`) adds a run ``sweep summary`` with the numbers and files of
``sweep_summary.json``/``.md``; the member runs of that sweep invocation (tag ``udcg.sweep_id``)
become its children (``mlflow.parentRunId``), so a sweep rerun into the same folder or store
leaves the earlier sweep's members with their own summary.

Without a tracking URI runs go to a local SQLite store, ``mlflow.db`` in the run's (a sweep's)
output directory, artifacts beside it in ``mlartifacts/`` (:func:`local_store`).
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from udcg.errors import UDCGInputError, UDCGWarning
from udcg.validation import nonempty_str, one_of

#: ``tracking=none`` logs nothing; ``tracking=mlflow`` logs to MLflow
BACKENDS = ("none", "mlflow")
#: the local store's database and artifact folder in an output directory
DB_NAME = "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"
#: the tags a sweep member carries: the sweep directory, and the id of the sweep invocation,
#: which finds the members of a sweep
SWEEP_TAG = "udcg.sweep_dir"
SWEEP_ID_TAG = "udcg.sweep_id"
COMMAND_TAG = "udcg.command"
#: fields that name a row of a list of records in a report, in this order of preference
ROW_LABELS = ("metric", "run", "position", "name", "source")
#: characters every tracker takes in a metric name (Lightning's MLFlowLogger drops the rest)
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_\-. /]+")
#: MLflow's limit on a parameter value
MAX_PARAM_CHARS = 6000


def log_params(client: Any, run_id: str, params: Mapping[str, str]) -> None:
    """Log ``params`` (flat names to strings) to MLflow run ``run_id`` whole, 100 per batch;
    a value over MLflow's limit (:data:`MAX_PARAM_CHARS`) is cut there, with a warning naming
    it (Lightning's ``MLFlowLogger`` cuts at 250 characters without a word).

    >>> log_params(None, "run", {})  # nothing to log: MLflow is not asked
    """
    if not params:
        return
    from mlflow.entities import Param

    cut = [(k, len(v)) for k, v in params.items() if len(v) > MAX_PARAM_CHARS]
    if cut:
        more = f" (and {len(cut) - 1} more)" if len(cut) > 1 else ""
        warnings.warn(
            f"MLflow keeps {MAX_PARAM_CHARS} characters of a parameter: {cut[0][0]!r} "
            f"({cut[0][1]} characters){more} is logged cut",
            UDCGWarning,
            stacklevel=2,
        )
    items = [Param(k, v[:MAX_PARAM_CHARS]) for k, v in params.items()]
    for start in range(0, len(items), 100):  # MLflow takes 100 params per batch
        client.log_batch(run_id, params=items[start : start + 100])


def local_store(directory: str | os.PathLike[str]) -> tuple[str, str]:
    """``(tracking_uri, artifact_location)`` of the local store in ``directory``: a SQLite
    database ``mlflow.db`` and an artifact folder ``mlartifacts`` (absolute paths).

    >>> uri, artifacts = local_store("/tmp/run")
    >>> uri, artifacts
    ('sqlite:////tmp/run/mlflow.db', '/tmp/run/mlartifacts')
    """
    folder = Path(directory).absolute()
    return f"sqlite:///{folder / DB_NAME}", str(folder / ARTIFACTS_DIR)


def param_value(value: Any) -> str:
    """A parameter as MLflow stores it: a string as it is, anything else as JSON.

    >>> [param_value(v) for v in ("bm25", 3, 0.5, True, None, [1, 2])]
    ['bm25', '3', '0.5', 'true', 'null', '[1, 2]']
    """
    return value if isinstance(value, str) else json.dumps(value)


def flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``config`` flattened with ``.`` (``dataset.limit``), values by :func:`param_value`; an
    empty mapping is ``{}``.

    >>> flat_params({"k": 3, "dataset": {"limit": 8, "path": None}, "judge_options": {}})
    {'k': '3', 'dataset.limit': '8', 'dataset.path': 'null', 'judge_options': '{}'}
    """
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flat_params(value, f"{name}."))
        else:
            flat[name] = param_value(value)
    return flat


def key_part(label: Any) -> str:
    """One part of a metric name: ``label`` with each run of characters MLflow does not allow
    replaced by ``_`` (``UDCG (gamma=1/3)`` is ``UDCG _gamma_1/3_`` without the ``/``).

    >>> key_part("UDCG-gamma"), key_part("UDCG (gamma=1/3)"), key_part(None)
    ('UDCG-gamma', 'UDCG _gamma_1_3_', 'none')
    """
    text = "none" if label is None else str(label).replace("/", "_")
    return _NOT_ALLOWED.sub("_", text) or "_"


def _row_label(row: Mapping[str, Any], index: int) -> str:
    """The name of a record in a list: its first :data:`ROW_LABELS` field, ``A vs B`` for a
    pair (``a``, ``b``), else its index."""
    if "a" in row and "b" in row:
        return f"{row['a']} vs {row['b']}"
    for name in ROW_LABELS:
        if name in row and not isinstance(row[name], Mapping | list):
            return str(row[name])
    return str(index)


def _numbers(tree: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], float]]:
    if isinstance(tree, bool) or tree is None or isinstance(tree, str):
        return
    if isinstance(tree, int | float):
        if math.isfinite(tree):
            yield path, float(tree)
        return
    if isinstance(tree, Mapping):
        for key, value in tree.items():
            yield from _numbers(value, (*path, key_part(key)))
    elif isinstance(tree, list | tuple):
        seen: set[str] = set()
        for index, item in enumerate(tree):
            label = key_part(_row_label(item, index) if isinstance(item, Mapping) else index)
            if label in seen:  # two records with one name: the second is told by its index
                label = f"{label}_{index}"
            seen.add(label)
            yield from _numbers(item, (*path, label))


def flat_metrics(tree: Mapping[str, Any], skip: Iterable[str] = ()) -> dict[str, float]:
    """Every finite number in ``tree`` (a report) under its path joined by ``/``, top-level
    keys in ``skip`` left out; a record of a list is named by its ``metric``, ``run``,
    ``position``, ``name`` or ``source`` field (``A vs B`` for a pair ``a``/``b``), else its
    index; booleans, strings, nulls and NaN are left out.

    >>> report = {"means": {"UDCG": 0.6}, "correlations": [
    ...     {"metric": "nDCG", "spearman": 0.5, "ci95": [0.1, 0.8], "undefined": None}]}
    >>> flat_metrics(report)
    {'means/UDCG': 0.6, 'correlations/nDCG/spearman': 0.5, 'correlations/nDCG/ci95/0': 0.1, \
'correlations/nDCG/ci95/1': 0.8}
    """
    skipped = set(skip)
    kept = {key: value for key, value in tree.items() if key not in skipped}
    return {"/".join(path): value for path, value in _numbers(kept, ())}


@dataclass(frozen=True)
class TrackingSettings:
    """The ``tracking`` options of ``udcg benchmark`` (``udcg/conf/tracking/``): ``backend``
    (:data:`BACKENDS`), ``tracking_uri`` (None: :func:`local_store` in the output directory),
    ``experiment_name``, ``run_name`` (None: the run's name in the report; a sweep's summary
    is ``sweep summary``) and extra ``tags``.

    >>> TrackingSettings("mlflow").enabled, TrackingSettings().enabled
    (True, False)
    """

    backend: str = "none"
    tracking_uri: str | None = None
    experiment_name: str = "udcg-benchmark"
    run_name: str | None = None
    tags: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        one_of(self.backend, "tracking.backend", BACKENDS)
        if self.tracking_uri is not None:
            nonempty_str(self.tracking_uri, "tracking.tracking_uri")
        nonempty_str(self.experiment_name, "tracking.experiment_name")
        if self.run_name is not None:
            nonempty_str(self.run_name, "tracking.run_name")
        if not isinstance(self.tags, Mapping):
            raise UDCGInputError("expected a mapping of tag names to values", field="tracking.tags")

    @property
    def enabled(self) -> bool:
        return self.backend != "none"


class MLflowRuns:
    """Runs in one MLflow experiment, written through ``mlflow.MlflowClient(tracking_uri)``.

    The experiment ``experiment_name`` is created when missing (its artifacts in
    ``artifact_location``; None: the store's default).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     runs = MLflowRuns(*local_store(folder), "demo")
    ...     run_id = runs.log_run("r", params={"k": "3"}, metrics={"m": 0.5})
    ...     run = runs.client.get_run(run_id)
    >>> run.data.params, run.data.metrics, run.info.status
    ({'k': '3'}, {'m': 0.5}, 'FINISHED')
    """

    def __init__(
        self, tracking_uri: str, artifact_location: str | None, experiment_name: str
    ) -> None:
        import mlflow  # the tracking extra

        self.tracking_uri = tracking_uri
        self.client = mlflow.MlflowClient(tracking_uri)
        found = self.client.get_experiment_by_name(experiment_name)
        if found is not None and found.lifecycle_stage != "deleted":
            self.experiment_id = found.experiment_id
        else:
            self.experiment_id = self.client.create_experiment(
                experiment_name, artifact_location=artifact_location
            )

    def log_run(
        self,
        run_name: str,
        params: Mapping[str, str] = {},
        metrics: Mapping[str, float] = {},
        artifacts: Iterable[Path] = (),
        tags: Mapping[str, Any] = {},
    ) -> str:
        """A finished run with ``params``, ``metrics`` (step 0), ``artifacts`` (files) and
        ``tags``; its run id. A failure on the way leaves the run marked FAILED."""
        from mlflow.entities import Metric

        run = self.client.create_run(
            self.experiment_id, run_name=run_name, tags={k: str(v) for k, v in tags.items()}
        )
        run_id = run.info.run_id
        try:
            log_params(self.client, run_id, params)
            stamp = run.info.start_time
            values = [Metric(k, v, stamp, 0) for k, v in metrics.items()]
            for start in range(0, len(values), 1000):  # and 1000 metrics
                self.client.log_batch(run_id, metrics=values[start : start + 1000])
            for path in artifacts:
                self.client.log_artifact(run_id, str(path))
        except BaseException:
            self.client.set_terminated(run_id, "FAILED")
            raise
        self.client.set_terminated(run_id, "FINISHED")
        return run_id

    def runs_tagged(self, tags: Mapping[str, str]) -> list[str]:
        """Ids of the experiment's runs that carry every tag of ``tags`` with its value."""
        found = self.client.search_runs(
            [self.experiment_id],
            filter_string=" and ".join(
                f"tags.`{tag}` = '{_quoted(value)}'" for tag, value in tags.items()
            ),
            max_results=50000,
        )
        return [run.info.run_id for run in found]


def _quoted(value: str) -> str:
    """``value`` as it goes between single quotes in an MLflow filter string."""
    return value.replace("\\", "\\\\").replace("'", "\\'")


def _runs(settings: TrackingSettings, directory: Path) -> MLflowRuns:
    if settings.tracking_uri is None:
        uri, artifacts = local_store(directory)
        Path(directory).mkdir(parents=True, exist_ok=True)
    else:
        uri, artifacts = settings.tracking_uri, None
    return MLflowRuns(uri, artifacts, settings.experiment_name)


@contextmanager
def _mlflow_errors(settings: TrackingSettings) -> Iterator[None]:
    """An MLflow error (a store that cannot be reached or written) as one line naming the
    tracking URI."""
    from mlflow.exceptions import MlflowException

    try:
        yield
    except MlflowException as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        where = settings.tracking_uri or "the local store"
        raise UDCGInputError(
            f"MLflow tracking to {where} failed: {reason}", field="tracking.tracking_uri"
        ) from None


def track_report(
    settings: TrackingSettings,
    report: Mapping[str, Any],
    files: Iterable[Path],
    directory: Path,
    sweep_dir: Path | None = None,
) -> str | None:
    """Log one benchmark run (its ``report.json`` as ``report``, its ``files``) as described in
    the module docstring; the local store is in ``sweep_dir`` for a sweep member, else in
    ``directory``. The run id, or None when tracking is off."""
    if not settings.enabled:
        return None
    tags = {COMMAND_TAG: "benchmark", **settings.tags}
    if sweep_dir is not None:
        tags[SWEEP_TAG] = str(Path(sweep_dir).absolute())
        tags[SWEEP_ID_TAG] = str(report.get("sweep", {}).get("id"))
    name = settings.run_name or str(report.get("setup", {}).get("run", "benchmark"))
    with _mlflow_errors(settings):
        runs = _runs(settings, sweep_dir if sweep_dir is not None else directory)
        return runs.log_run(
            name,
            params=flat_params(report.get("config", {})),
            metrics=flat_metrics(report, skip=("config",)),
            artifacts=files,
            tags=tags,
        )


def track_sweep(
    settings: TrackingSettings, summary: Mapping[str, Any], files: Iterable[Path], sweep_dir: Path
) -> str | None:
    """Log a sweep's summary (``sweep_summary.json`` as ``summary``, its ``files``) as run
    ``sweep summary`` and make the member runs of its sweep invocation (``summary["sweep_id"]``)
    its children; the run id, or None when tracking is off."""
    if not settings.enabled:
        return None
    sweep = str(Path(sweep_dir).absolute())
    sweep_id = str(summary.get("sweep_id"))
    with _mlflow_errors(settings):
        runs = _runs(settings, sweep_dir)
        members = runs.runs_tagged({SWEEP_TAG: sweep, SWEEP_ID_TAG: sweep_id})
        run_id = runs.log_run(
            "sweep summary",
            params={"sweep_dir": sweep, "sweep_id": sweep_id, "members": str(len(members))},
            metrics=flat_metrics(summary),
            artifacts=files,
            tags={COMMAND_TAG: "benchmark sweep", **settings.tags},
        )
        for member in members:
            runs.client.set_tag(member, "mlflow.parentRunId", run_id)
    return run_id


@contextmanager
def mlflow_uri_kept() -> Iterator[None]:
    """Put MLflow's process-wide tracking URI and ``MLFLOW_TRACKING_URI`` back as they were
    when the block ends (Lightning's ``MLFlowLogger`` sets both when it starts a run).

    >>> with mlflow_uri_kept():
    ...     pass
    """
    from mlflow.tracking._tracking_service import utils

    before = getattr(utils, "_tracking_uri", None)
    env = os.environ.get("MLFLOW_TRACKING_URI")
    try:
        yield
    finally:
        if getattr(utils, "_tracking_uri", None) != before:
            utils.set_tracking_uri(before)
        if env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = env
