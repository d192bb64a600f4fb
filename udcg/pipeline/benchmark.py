"""The evaluation pipeline behind ``evaluate.py``: check the configuration, retrieve, annotate
through the judge, score every metric, correlate with accuracy, write the report."""

from __future__ import annotations

import socket
import warnings
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import numpy as np

from udcg.errors import UDCGInputError, UDCGWarning
from udcg.io.contexts.jsonl import Context
from udcg.io.contexts.sources import check_label_inputs, listed_sources, warn_mixed_sources
from udcg.io.joins.utility_sources import get_source
from udcg.io.manifests import mode_of, relevance_made_by
from udcg.io.weights.files import check_compatible, check_fingerprint
from udcg.judge.prompts import prompt_record
from udcg.judge.spec import PRECOMPUTED
from udcg.labels.signal_check import SignalCheck, check_contexts
from udcg.pipeline import correlate, report
from udcg.pipeline.calibration_report import calibration_report
from udcg.pipeline.context_scores import made_by_spec, refuse_kept_values
from udcg.pipeline.datasets import Dataset
from udcg.pipeline.metric_table import defined
from udcg.pipeline.order_study import compare_orders, run_order_study
from udcg.pipeline.scoring import score_table
from udcg.pipeline.settings import EvaluateSettings
from udcg.pipeline.stages import (
    StageCache,
    annotate_stage,
    missing_steps,
    needs_coverage,
    retrieve_contexts,
    stage_key,
)
from udcg.pipeline.sweep import qids_sha256
from udcg.progress import next_stage, progress
from udcg.retrieval import Retriever, check_depth
from udcg.retrieval.base import retriever_identity

if TYPE_CHECKING:
    from udcg.judge.cached import CachedJudge
    from udcg.theta import UDCGTheta

GIVEN = "given"


def load_theta(
    path: str | None,
    k: int,
    utility: str,
    judge: str | None = None,
    prompt: str | None = None,
    mode: str | None = None,
    allow_mismatch: Sequence[str] = (),
    allow_unverified: bool = False,
    fingerprint: str | None = None,
    relevance: str | None = None,
) -> tuple[Any, list[str]]:
    """``(weights, notes)``: UDCG-theta weights (a folder or a single file) checked against
    what they are applied to (:func:`udcg.io.weights.files.check_compatible`: k, utility source,
    judge key, prompt SHA-256, abstention mode, the fingerprints of the judges that made the
    utilities and the LLM relevance labels; None: not known, not checked; weights for
    another k are refused, always), with a note per
    mismatch allowed on purpose; ``(None, [])`` without a path. Weights whose card records no
    SHA-256 are refused unless ``allow_unverified``."""
    if not path:
        return None, []
    from udcg.theta import UDCGTheta

    # another k cannot score this data at all
    model = UDCGTheta.from_pretrained(path, k=k, allow_unverified=allow_unverified)
    applied = {
        "utility": utility,
        "judge": judge,
        "fingerprint": fingerprint,
        "relevance": relevance,
        "prompt": prompt,
        "mode": mode,
    }
    option = "allow_mismatch=[{field}]"
    notes = check_compatible(model.card_, applied, allow_mismatch, option, calibrated=True)
    return model, notes


def _in_hub_cache(spec: str) -> bool:
    """Whether the Hugging Face cache holds model ``spec`` (its config.json)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(spec, "config.json"), str)
    except ValueError:  # not a repo id
        return False


def _offline() -> str | None:
    """Why the Hugging Face hub cannot be used (offline mode, no route), or None."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "offline mode is on (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE)"
    url = urlsplit(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=3).close()
    except OSError:
        return f"{url.hostname} cannot be reached"
    return None


def check_hub_judge(spec: str) -> None:
    """A transformers judge that cannot load fails here, at once, not after the hub client's
    retries: an id that is not a local path and not in the Hugging Face cache while offline."""
    from udcg.judge import EMBEDDED

    if spec == EMBEDDED or spec.startswith(("openai:", "precomputed:")):
        return
    if Path(spec).expanduser().exists() or _in_hub_cache(spec):
        return
    offline = _offline()
    if offline is not None:
        raise UDCGInputError(
            f"{spec!r} is not a local path and not in the Hugging Face cache, and {offline}: "
            "give a local path or download the model first",
            field="judge",
        )


def connect_judge(settings: EvaluateSettings) -> CachedJudge:
    """The judge as every command opens it (:func:`udcg.judge.open_judge`: probed, behind the
    judge cache ``judge_cache``, by default the shared one); a hub id that cannot load offline
    stops the run at once (:func:`check_hub_judge`), and so does a server that does not
    answer."""
    from udcg.judge import open_judge
    from udcg.judge.ray_engine import engine_options

    spec = settings.judge
    try:
        check_hub_judge(spec)
        engine = engine_options(settings.engine, settings.ray)
        return open_judge(
            spec, settings.judge_name, settings.judge_options, settings.judge_cache, engine
        )
    except (UDCGInputError, ModuleNotFoundError):  # a missing extra is named by the command
        raise
    except Exception as exc:  # any other backend failure: a bad model, a bad file, ...
        raise UDCGInputError(
            f"judge {spec!r} is not usable: {type(exc).__name__}: {exc}", field="judge"
        ) from None


def _settings_json(settings: EvaluateSettings) -> dict[str, Any]:
    out = dict(vars(settings))
    out["cache_dir"] = str(out["cache_dir"])
    return out


def _calibration(table: Any, settings: EvaluateSettings, theta: Any) -> dict[str, Any]:
    """``{"calibration": ...}`` for a run with UDCG-theta
    (:func:`udcg.pipeline.calibration_report.calibration_report`; its notes join the table's),
    else nothing."""
    found, notes = calibration_report(table, settings.n_bootstrap, settings.seed, theta)
    table.notes.extend(notes)
    return {} if found is None else {"calibration": found}


def _given_name(contexts: Sequence[Context]) -> str:
    """The name of given contexts: the ``run`` they all share (a TREC run's file name,
    or what ``udcg annotate`` kept), else ``given``."""
    runs = {c.run for c in contexts}
    only = runs.pop() if len(runs) == 1 else None
    return only or GIVEN


def _run_name(name: str, retriever: Any) -> str:
    position = getattr(retriever, "position", None)  # GoldAt: one run name per position
    return name if position is None else f"{name}@{position}"


def signal_check(contexts: Sequence[Context], judge: str, utility: str) -> SignalCheck | None:
    """:func:`udcg.labels.signal_check.check_contexts` over the utilities the metrics use;
    warns (:class:`UDCGWarning`, one line with the numbers and the remedy) when the source
    carries almost no information."""
    check = check_contexts(contexts, judge, utility)
    if check is not None and check.fires:
        warnings.warn(check.warning("utility=answer_likelihood"), UDCGWarning, stacklevel=2)
    return check


def run_benchmark(
    dataset: Dataset,
    retriever: tuple[str, Retriever] | None,
    settings: EvaluateSettings,
    output_dir: Path,
    stage_id: Sequence[Any] = (),
    config: dict[str, Any] | None = None,
    sweep: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], list[Path]]:
    """Run the pipeline; returns the report and its files.

    ``retriever`` is ``(name, retriever)``, or None for a dataset that holds its retrieved
    contexts (``retriever=given``). ``stage_id`` (plain JSON naming the dataset and retriever
    settings), the run name, the retriever's own description
    (:func:`~udcg.retrieval.base.retriever_identity`) and the dataset's content
    (:meth:`Dataset.fingerprint`, recorded in the report as ``setup.dataset_sha256``) key the
    cached retrieval stage; ``config`` is recorded in the
    report as given, and so is ``sweep`` (a sweep member's sweep id and overrides). The judge
    it opens is closed when it returns.
    """
    with ExitStack() as stack:
        return _benchmark(dataset, retriever, settings, output_dir, stage_id, config, sweep, stack)


def _benchmark(
    dataset: Dataset,
    retriever: tuple[str, Retriever] | None,
    settings: EvaluateSettings,
    output_dir: Path,
    stage_id: Sequence[Any],
    config: dict[str, Any] | None,
    sweep: dict[str, Any] | None,
    stack: ExitStack,
) -> tuple[dict[str, Any], list[Path]]:
    """:func:`run_benchmark`'s work; the judge it opens is closed by ``stack``."""
    k = settings.k
    given = retriever is None
    if given != (dataset.contexts is not None):
        raise UDCGInputError(
            "dataset holds retrieved contexts: use retriever=given"
            if not given
            else "retriever=given needs retrieved contexts (dataset=jsonl, reference or trec)",
            field="retriever",
        )
    if given and settings.order != "retriever":
        raise UDCGInputError(
            f"order={settings.order} chooses from a retriever's candidates: not with "
            "retriever=given",
            field="order",
        )
    if not given:
        check_depth(settings.candidates, dataset.corpus)
    # the prompt and mode this pipeline annotates with; a precomputed judge's are unknown
    own_labels = not settings.judge.startswith(PRECOMPUTED)
    # the values given contexts hold: who made them, as their file's manifest says
    made_here = dataset.judges.get(settings.judge_key, {})
    made = made_here.get(get_source(settings.utility).step)
    # relevance=llm labels every passage again, with the judge this run opens
    relabels = settings.relevance == "llm"
    if given:
        made_by_spec(settings.judge, settings.judge_key, made, None)
    # given values are scored in the mode their manifest records; this run labels first-token
    mode = (mode_of(made) if given and made else "first_token") if own_labels else None
    theta, theta_notes = load_theta(
        settings.theta_weights,
        k,
        settings.utility,
        settings.judge_key,
        prompt_record()["sha256"] if own_labels else None,
        mode,
        settings.allow_mismatch,
        settings.allow_unverified,
        fingerprint=made if given else None,
        relevance=relevance_made_by(dataset.judges) if given and not relabels else None,
    )
    cache = StageCache(settings.cache_dir)
    dataset_sha256 = dataset.fingerprint()

    def connected() -> CachedJudge:
        """The judge, and the weights checked against its fingerprint (the card's)."""
        opened = stack.enter_context(connect_judge(settings))
        if theta is not None:
            theta_notes.extend(
                check_fingerprint(
                    theta.card_,
                    settings.judge_key,
                    opened.fingerprint,
                    settings.allow_mismatch,
                    "allow_mismatch=[{field}]",
                    relevance=opened.fingerprint if relabels else None,
                    calibrated=True,
                )
            )
        return opened

    # retrieved contexts always need the judge: connect before the work, not after it
    judge = None if given else connected()
    with progress(5, "evaluate: retrieve", unit="stage") as bar:
        if given:
            contexts = dataset.contexts
            name = _given_name(contexts)
        else:
            name, searcher = retriever
            name = _run_name(name, searcher)
            depth = settings.candidates
            key = stage_key(*stage_id, name, retriever_identity(searcher), dataset_sha256, k, depth)
            contexts = cache.run(
                "retrieve", key, lambda: retrieve_contexts(dataset, name, searcher, k, depth)
            )
        next_stage(bar, "evaluate", "annotate")
        label_key = settings.judge_key

        def annotate(contexts: list[Context], steps: list[str]) -> list[Context]:
            nonlocal judge
            if judge is None:
                judge = connected()
            if given:
                read = {get_source(settings.utility).step, "relevance", "outcomes", "erag"}
                notes = refuse_kept_values(
                    {s: f for s, f in made_here.items() if s in read},
                    steps,
                    judge.fingerprint,
                    label_key,
                    settings.allow_mismatch,
                    [s for s in steps if s != "relevance" or relabels],
                )
                mix_notes.extend(n for n in notes if n not in mix_notes)
            return annotate_stage(cache, contexts, judge, steps, settings)

        mix_notes: list[str] = []
        ordered = None
        if settings.order != "retriever":
            ordered = run_order_study(contexts, settings, annotate, theta)
            contexts = ordered.chosen
        steps = missing_steps(
            contexts,
            label_key,
            settings.utility,
            settings.relevance,
            settings.erag,
            settings.outcome,
        )
        if steps or (settings.qcare and needs_coverage(contexts)):
            contexts = annotate(contexts, steps)
        if settings.qcare:  # who labelled the coverage: this run's judge, or the given file's
            check_label_inputs(contexts)
            warn_mixed_sources(contexts, name)
            mix_notes.append(f"Q-CARE coverage labels: {listed_sources(contexts)}")
        signal = signal_check(contexts, label_key, settings.utility)
        next_stage(bar, "evaluate", "score")
        table = score_table(
            contexts,
            k,
            label_key,
            settings.utility,
            theta,
            settings.correlation,
            settings.seed,
            settings.ablations,
            settings.theta_crossfit,
            settings.theta_l2,
            settings.qcare_gain,
        )
        next_stage(bar, "evaluate", "correlate")
        kept = {m: defined(v)[0] for m, v in table.scores.items()}  # a missing value left out
        args = (
            table.scores,
            table.correct,
            table.qids,
            settings.correlation,
            settings.n_bootstrap,
            settings.seed,
        )
        result = {
            "setup": {
                "dataset": dataset.name,
                "dataset_sha256": dataset_sha256,
                "run": name,
                "order": settings.order,
                "k": k,
                "judge": label_key,
                "utility": settings.utility,
                **{f"theta_{name}": value for name, value in _digests(theta).items()},
                "theta_weights_overrides": theta_notes,
                "n_contexts": len(table.correct),
                "n_queries": len(set(table.qids.tolist())),
                "qids_sha256": qids_sha256(table.qids.tolist()),
                "accuracy": float(table.correct.mean()),
                "cached_stages": cache.hits,
                "judge_cache": None if judge is None else judge.cache.stats(),
            },
            "config": config if config is not None else _settings_json(settings),
            **({} if sweep is None else {"sweep": sweep}),
            "signal": None if signal is None else signal.as_dict(),
            "means": {m: float(np.mean(v)) for m, v in kept.items()},
            "mean_counts": {m: len(v) for m, v in kept.items()},  # contexts each mean is over
            "mean_qids_sha256": {  # and their queries
                m: qids_sha256(table.qids[~np.isnan(v)].tolist()) for m, v in table.scores.items()
            },
            "tuned_gammas": table.gammas,
            "crossfit_theta_weights": [
                {"alpha": m.alpha_.tolist(), "beta": m.beta_.tolist()} for m in table.theta_models
            ],
            "correlations": correlate.correlations(*args),
            "paired_tests": correlate.paired_tests(*args),
            "accuracy_by_gold_position": correlate.accuracy_by_gold_position(
                table.relevant, table.correct
            ),
            **({} if ordered is None else {"ordering": compare_orders(ordered, settings)}),
            **_calibration(table, settings, theta),
            "notes": [
                *dataset.notes,
                *table.notes,
                *(ordered.notes if ordered is not None else []),
                *(f"UDCG-theta weights: {note}" for note in theta_notes),
                *mix_notes,
                *(
                    []
                    if signal is None or not signal.fires
                    else [signal.warning("utility=answer_likelihood")]
                ),
            ],
        }
        next_stage(bar, "evaluate", "report")
        if theta is None and table.theta_models:
            theta = table.theta_models[0]  # the plot shows the weights fitted on half 1
        files = report.write_report(result, output_dir, theta)
        bar.update(1)
    return result, files


def _digests(theta: UDCGTheta | None) -> dict[str, str | None]:
    """The SHA-256 of the weights file and of the card applied (:meth:`UDCGTheta.digests`)."""
    return {"weights_sha256": None, "card_sha256": None} if theta is None else theta.digests()
