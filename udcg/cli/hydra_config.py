"""Hydra wiring shared by ``udcg train``/``udcg benchmark`` and the repository's ``train.py``/
``evaluate.py``: where the configs are, objects built from ``_target_`` configs with errors that
name the option the user typed, the jobs' error handling, and the sweep callbacks.

The configs ship inside the package (``udcg/conf/``, package data): the ``@hydra.main`` of
:mod:`udcg.cli.train` and :mod:`udcg.cli.benchmark` points at :data:`CONF_DIR`, an absolute path
found from this file, so the same configs are found from a clone (``python train.py``), an
editable install or a wheel, whatever the working directory.

A single run that fails prints one line and exits (status 2 for a user mistake). A sweep member
that fails prints the same line and returns, so the sweep goes on; :class:`SweepFailures` lists
the failed members when the sweep ends and exits with the highest status among them.

One process at a time writes a run or sweep folder (:class:`OneWriter`, the base of the sweep
callbacks of both jobs): a second run or sweep into a folder another process is writing is
refused in one line (status 2) before Hydra writes anything there.

Hydra and OmegaConf are imported here and in the two entry points only; the library takes the
typed arguments built below.
"""

from __future__ import annotations

import difflib
import json
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn
from hydra.errors import InstantiationException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from udcg.cli.common import Outcome, messages, run_command
from udcg.cli.extras import missing_module_error
from udcg.errors import UDCGInputError
from udcg.io.files import atomic_write, exclusive_writer, inputs_read_once
from udcg.pipeline.settings import EvaluateSettings, Settings, TrainSettings
from udcg.pipeline.sweep import current_sweep, start_sweep, write_summary
from udcg.pipeline.tracking import TrackingSettings, track_sweep
from udcg.retrieval import Retriever

S = TypeVar("S", bound=Settings)

#: The Hydra config groups shipped with the package (``udcg/conf``).
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"

#: The name a job's messages start with when it runs as a ``udcg`` command (``udcg train``);
#: None: the repository's script, ``train.py`` or ``evaluate.py``.
_COMMAND: ContextVar[str | None] = ContextVar("udcg_hydra_command", default=None)


def prog_name(job: str) -> str:
    """What the messages of Hydra job ``job`` (``train``) start with: ``udcg train`` through
    the console script, else the script's name ``train.py``."""
    return _COMMAND.get() or f"{job}.py"


@contextmanager
def _as_command(prog: str, argv: Sequence[str]) -> Iterator[None]:
    """Hydra reads its arguments from ``sys.argv`` (and shows ``sys.argv[0]`` in its usage):
    ``prog`` and ``argv`` while the block runs."""
    saved = sys.argv
    token = _COMMAND.set(prog)
    sys.argv = [prog, *argv]
    try:
        yield
    finally:
        sys.argv = saved
        _COMMAND.reset(token)


@contextmanager
def _logging_kept() -> Iterator[None]:
    """Logging as it was before the block, after it: Hydra configures logging for a run
    (``hydra/hydra_logging``, then ``hydra/job_logging``: the root logger at INFO with a
    console handler and a file handler on ``<run dir>/JOB.log``). The root logger's level and
    handlers and the level, handlers, ``propagate`` and ``disabled`` of every logger that
    existed before are put back; the root handlers added meanwhile are closed (the log file
    is complete and no longer open)."""
    root = logging.getLogger()
    loggers = [root] + [
        lg
        for lg in list(logging.Logger.manager.loggerDict.values())
        if isinstance(lg, logging.Logger)
    ]
    saved = [(lg, lg.level, list(lg.handlers), lg.propagate, lg.disabled) for lg in loggers]
    root_handlers = list(root.handlers)
    try:
        yield
    finally:
        added = [h for h in root.handlers if h not in root_handlers]
        for lg, level, handlers, propagate, disabled in saved:
            lg.handlers[:] = handlers
            lg.propagate, lg.disabled = propagate, disabled
            lg.setLevel(level)  # also clears the loggers' cached levels
        for handler in added:
            handler.close()


@contextmanager
def _hydra_kept() -> Iterator[None]:
    """Hydra's process-wide state (the initialized Hydra, the job's config) cleared for the
    run and put back after: a caller inside its own ``initialize``/``compose`` keeps it."""
    from hydra.core.global_hydra import GlobalHydra

    hydra, config = GlobalHydra.instance().hydra, HydraConfig.instance().cfg
    GlobalHydra.instance().clear()
    try:
        yield
    finally:
        GlobalHydra.instance().hydra = hydra
        HydraConfig.instance().cfg = config


def run_hydra(job: str, entry: Callable[[], Any], argv: Sequence[str]) -> int:
    """``udcg JOB ARGS``: run ``entry`` (a function decorated with ``@hydra.main``) on the
    Hydra arguments ``argv`` (overrides, ``-m``, ``--help``, ``--cfg job``, ...) as the
    repository's ``JOB.py ARGS`` runs; returns the exit status. Hydra's logging set-up lasts
    for the run only (:func:`_logging_kept`), so a call in-process leaves logging as it was.
    Help that cannot be written to standard output (open for reading only, full) is one line
    on standard error and status 2."""
    helping = bool(_HELP_FLAGS & set(argv))
    with _as_command(f"udcg {job}", argv), _logging_kept(), _hydra_kept():
        try:
            try:
                entry()
                code = 0
            except SystemExit as exc:
                if exc.code is not None and not isinstance(exc.code, int):
                    raise
                code = exc.code or 0
            if helping and sys.stdout is not None:
                sys.stdout.flush()  # where a help that cannot be written fails
        except OSError as exc:
            if not helping:
                raise
            print(f"udcg {job}: error: standard output: {exc.strerror or exc}", file=messages())
            return 2
    return code


#: Hydra's options that print a help on standard output
_HELP_FLAGS = frozenset({"--help", "-h", "--hydra-help"})


def plain(cfg: Any) -> Any:
    """A config node as plain Python containers (resolved); other values unchanged."""
    return OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg


def as_node(cfg: Any) -> DictConfig:
    """``cfg`` as a config node (a plain dict is converted)."""
    return cfg if isinstance(cfg, DictConfig) else OmegaConf.create(cfg)


def option_name(cfg: DictConfig, group: str, key: str) -> str:
    """The option a user types for ``key`` of config group ``group`` (node ``cfg``): the
    interpolated one for ``key: ${k}`` (``k``), else ``group.key`` (``dataset.limit``)."""
    raw = OmegaConf.to_container(cfg, resolve=False).get(key)
    if isinstance(raw, str) and raw.startswith("${") and raw.endswith("}"):
        return raw[2:-1]
    return f"{group}.{key}"


def as_option(exc: UDCGInputError, cfg: DictConfig, group: str) -> UDCGInputError:
    """``exc`` naming the option behind its field when the field is a key of ``cfg`` (an
    error located in a file keeps its field)."""
    if exc.path is not None or exc.field is None or exc.field not in cfg:
        return exc
    return UDCGInputError(exc.reason, field=option_name(cfg, group, exc.field))


def build(cfg: Any, option: str, drop: tuple[str, ...] = ()) -> Any:
    """``instantiate(cfg)`` without the keys in ``drop``; a missing value or a failing
    constructor is a UDCGInputError naming the option (``option`` is the config group the user
    sets), a UDCGInputError from inside names the option behind its field."""
    cfg = as_node(cfg)
    try:
        spec = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as exc:
        raise UDCGInputError(
            f"set {exc.full_key}=... (no value given)", field=str(exc.full_key)
        ) from None
    try:
        return instantiate({k: v for k, v in spec.items() if k not in drop})
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, UDCGInputError):
            raise as_option(cause, cfg, option) from None
        reason = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
        raise UDCGInputError(f"cannot build {option}: {reason}", field=option) from None


def build_retriever(cfg: Any) -> tuple[str, Retriever]:
    """``(name, retriever)`` from a config with ``name`` and a ``_target_`` to instantiate."""
    cfg = as_node(cfg)
    if not cfg.get("name") or "_target_" not in cfg:
        raise UDCGInputError(
            "a retriever config needs 'name' and '_target_' (see udcg/conf/retriever/)",
            field="retriever",
        )
    retriever = build(cfg, "retriever", drop=("name",))
    if not isinstance(retriever, Retriever):
        raise UDCGInputError(
            f"{cfg._target_} has no retrieve(queries, corpus, k)", field="retriever"
        )
    return str(cfg.name), retriever


def primary_options(job: str) -> set[str]:
    """The top-level options of ``udcg/conf/JOB.yaml``: its keys and its config groups.

    Examples:
        >>> sorted(primary_options("train"))[:4]
        ['calibration', 'callbacks', 'correlation', 'data']
    """
    raw = OmegaConf.load(CONF_DIR / f"{job}.yaml")
    groups = {
        key.split(" ")[-1].split("@")[0]
        for entry in raw.get("defaults", [])
        if isinstance(entry, DictConfig)
        for key in entry
    }
    return {str(key) for key in raw if key not in ("defaults", "hydra")} | groups


def _settings(cfg: DictConfig, kind: type[S], job: str, **given: Any) -> S:
    """``kind`` (a settings dataclass) from the top-level options of ``cfg`` it has fields for,
    and ``given``; a top-level option the job does not have (``+test_fractoin=0.5``, which
    Hydra accepts) is refused rather than ignored."""
    known = {f.name for f in fields(kind)} | primary_options(job)
    unknown = sorted(str(key) for key in cfg if key not in known)
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f"did you mean {close[0]}?" if close else f"options: {', '.join(sorted(known))}"
        raise UDCGInputError(f"no such option ({hint})", field=unknown[0])
    names = [f.name for f in fields(kind) if f.name in cfg and f.name not in given]
    return kind(**{name: plain(cfg[name]) for name in names}, **given)


def train_settings(cfg: DictConfig) -> TrainSettings:
    """The checked settings of ``udcg/conf/train.yaml``."""
    return _settings(cfg, TrainSettings, "train")


def evaluate_settings(cfg: DictConfig) -> EvaluateSettings:
    """The checked settings of ``udcg/conf/evaluate.yaml``."""
    return _settings(cfg, EvaluateSettings, "evaluate", cache_dir=Path(cfg.cache_dir))


def _in_sweep() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def sweep_dir() -> Path | None:
    """The sweep directory when a sweep member runs, else None."""
    return Path(HydraConfig.get().sweep.dir) if _in_sweep() else None


def tracking_settings(cfg: DictConfig) -> TrackingSettings:
    """The checked ``tracking`` options of ``cfg`` (``udcg/conf/tracking/``); with tracking
    on, MLflow is imported now, so a missing one fails before any work."""
    node = plain(cfg.get("tracking")) or {}
    known = {f.name for f in fields(TrackingSettings)}
    unknown = sorted(set(node) - known)
    if unknown:
        raise UDCGInputError(
            f"unknown option; expected one of {', '.join(sorted(known))}",
            field=f"tracking.{unknown[0]}",
        )
    settings = TrackingSettings(**node)
    if settings.enabled:
        import mlflow  # noqa: F401 (ModuleNotFoundError: needs the 'tracking' extra)
    return settings


def _with_extras(work: Callable[[], int | None]) -> Callable[[], int | None]:
    """``work`` where a missing optional dependency is a user mistake naming its extra."""

    def guarded() -> int | None:
        try:
            return work()
        except ModuleNotFoundError as exc:
            message = missing_module_error(exc)
            if message is None:
                raise
            raise UDCGInputError(message) from None

    return guarded


#: The record of the sweep member that writes an output folder other than its own.
MEMBER_RECORD = ".udcg-member.json"


@contextmanager
def output_folder(folder: Path, option: str) -> Iterator[None]:
    """Hold the lock of a run's output ``folder`` (``option``: ``export_dir``, ``output_dir``;
    :class:`OneWriter`'s, already held when it is the run folder). In a sweep, a folder an
    earlier member of the same sweep wrote is refused in one line, as this member would replace
    that member's files (a shared ``export_dir=``, or a ``hydra.sweep.subdir`` that two members
    share); a member that ends well records itself there (``MEMBER_RECORD``: the sweep id, its
    number), one that fails does not."""
    with exclusive_writer(folder / ".hydra", "run folder"):
        if not _in_sweep():
            yield
            return
        hydra = HydraConfig.get()
        mine = {"sweep_id": current_sweep(Path(hydra.sweep.dir)), "member": hydra.job.num}
        record = folder / MEMBER_RECORD
        try:
            earlier = json.loads(record.read_text())
        except (OSError, ValueError):  # none yet, or not ours
            earlier = None
        if isinstance(earlier, dict) and earlier.get("sweep_id") == mine["sweep_id"]:
            if earlier.get("member") != mine["member"]:
                raise UDCGInputError(
                    f"member #{earlier.get('member')} of this sweep wrote here: each member "
                    f"needs its own folder (leave {option} and hydra.sweep.subdir at their "
                    "defaults, or put ${hydra:job.num} in them)",
                    path=folder,
                    field=option,
                )
        yield
        with atomic_write(record) as handle:
            json.dump(mine, handle)


def run_job(job: str, work: Callable[[], int | None]) -> Outcome:
    """Run one job of Hydra job ``job`` (``train``; :func:`udcg.cli.common.run_command`,
    messages start with :func:`prog_name`). A single run exits with the status of a failure;
    a sweep member returns its outcome, so the sweep goes on (an interrupt stops it). A
    missing optional dependency is one line naming the extra to install (status 2)."""
    sweep = _in_sweep()
    outcome = run_command(prog_name(job), _with_extras(work), catch_all=sweep)
    if outcome.status and (not sweep or outcome.status == 130):
        sys.exit(outcome.status)
    return outcome


class OneWriter(Callback):
    """Hydra callback: hold the lock of the run or sweep folder
    (:func:`udcg.io.files.exclusive_writer` on ``FOLDER/.hydra``: ``FOLDER/.hydra.lock``) from
    the start of the run or sweep, before Hydra writes there, to its end; a second process
    into the same folder is refused in one line with status 2. A sweep invocation gets its own
    id once it holds the folder (:func:`udcg.pipeline.sweep.start_sweep`: ``sweep.json``,
    which its members read), and its members read one standard input or pipe once
    (:func:`udcg.io.files.inputs_read_once`)."""

    def __init__(self) -> None:
        self.held = ExitStack()

    def hold(self, config: DictConfig, folder: str, what: str) -> None:
        """Take the lock of ``folder``, or exit with the one-line refusal."""
        outcome = run_command(
            prog_name(config.hydra.job.name),
            lambda: self.held.enter_context(exclusive_writer(Path(folder) / ".hydra", what)),
        )
        if outcome.status:
            sys.exit(outcome.status)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.hold(config, config.hydra.run.dir, "run folder")

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.held.close()

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.hold(config, config.hydra.sweep.dir, "sweep folder")
        self.held.enter_context(inputs_read_once())  # every member reads the same input
        self.sweep_id = start_sweep(Path(config.hydra.sweep.dir))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.held.close()


class SweepFailures(OneWriter):
    """Hydra callback: hold the run or sweep folder (:class:`OneWriter`) and collect the sweep
    members that failed; when the sweep ends, list them with their error on stderr, release
    the folder and exit with the highest of their statuses."""

    def __init__(self) -> None:
        super().__init__()
        self.members = 0
        self.failed: list[tuple[str, Outcome]] = []

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        self.members += 1
        outcome = job_return.return_value
        if isinstance(outcome, Outcome) and outcome.status:
            num = job_return.hydra_cfg.hydra.job.num if job_return.hydra_cfg else "?"
            self.failed.append((f"#{num} {' '.join(job_return.overrides or [])}", outcome))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            if not self.failed:
                return
            prog = prog_name(config.hydra.job.name)
            lines = [f"{prog}: {len(self.failed)} of {self.members} sweep members failed:"]
            lines += [f"  {name}: {outcome.error or 'failed'}" for name, outcome in self.failed]
            print("\n".join(lines), file=messages())
            sys.exit(max(outcome.status for _, outcome in self.failed))
        finally:
            super().on_multirun_end(config, **kwargs)


class SweepSummary(SweepFailures):
    """Hydra callback: once the sweep folder is held (:class:`SweepFailures`), write the
    summary of its members' reports when it ends, then list the failed members and release the
    folder."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            tracked = self.summarize(config)
        finally:
            super().on_multirun_end(config, **kwargs)
        if tracked:
            sys.exit(tracked)

    def summarize(self, config: DictConfig) -> int:
        """Write and print the summary of this sweep's members and log it to the tracker; the
        tracking's exit status."""
        sweep = Path(config.hydra.sweep.dir)
        path = write_summary(sweep, self.sweep_id)
        if path is None:
            if self.members > len(self.failed):  # reports written outside the sweep folder
                print(
                    f"{prog_name(config.hydra.job.name)}: no sweep summary: no member wrote its "
                    f"report under {sweep} (output_dir= outside the members' folders)",
                    file=messages(),
                )
            return 0
        print(path.read_text())
        print(f"sweep summary: {path}")
        return run_command(
            prog_name(config.hydra.job.name),
            _with_extras(lambda: _track_sweep(config, sweep, path)),
        ).status


def _track_sweep(config: DictConfig, sweep: Path, summary_md: Path) -> None:
    """Log the sweep summary to the tracker of ``config`` (``tracking=mlflow``)."""
    settings = tracking_settings(config)
    summary_json = summary_md.with_suffix(".json")
    summary = json.loads(summary_json.read_text())
    run_id = track_sweep(settings, summary, [summary_json, summary_md], sweep)
    if run_id is not None:
        print(f"sweep summary tracked: MLflow run {run_id}")
