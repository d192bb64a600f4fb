"""Library calls leave process-wide state as they found it, also with several threads: the
``bm25s`` logger's level, matplotlib's backend and pyplot's figures, the warnings filters,
torch's determinism flags and ``CUBLAS_WORKSPACE_CONFIG``, the SIGINT handler after Ctrl+C
in a fit, and the root logger after ``udcg train`` run in-process (docs/cli.md, "Process
settings").

Each check runs its script in a fresh interpreter, where nothing has been imported or set
yet; the script prints one JSON line that the test reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_fresh(script: str, cwd: Path | None = None) -> dict:
    """Run ``script`` in a fresh interpreter (offline); its last stdout line, as JSON."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------- retrieval


def test_bm25_retrieval_keeps_the_bm25s_logger_level() -> None:
    pytest.importorskip("bm25s")
    out = run_fresh(
        """
        import json, logging
        import bm25s
        from udcg.io.contexts.jsonl import Passage
        from udcg.retrieval.base import Query
        from udcg.retrieval.bm25 import BM25Retriever

        logger = logging.getLogger("bm25s")
        logger.setLevel(logging.DEBUG)  # the user's choice
        corpus = [Passage("d0", text="Jane Austen wrote Emma."), Passage("d1", text="Canberra.")]
        query = Query("q1", "Who wrote Emma?", relevant=frozenset())
        ranking = BM25Retriever().retrieve([query], corpus, k=2)[0]
        print(json.dumps({"level": logger.level, "top": int(ranking.indices[0])}))
        """
    )
    assert out == {"level": 10, "top": 0}


# ----------------------------------------------------------------------------------- plots


def test_plots_select_no_backend_and_keep_pyplot_figures(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = run_fresh(
        f"""
        import json
        from pathlib import Path
        from types import SimpleNamespace
        import matplotlib
        matplotlib.use("svg")  # the user's backend
        import matplotlib.pyplot as plt
        plt.figure()  # the user's open figure
        before = [matplotlib.get_backend(), plt.get_fignums()]
        from udcg.pipeline.plots import plot_weights
        from udcg.theta.calibration import plot_reliability, reliability_table

        folder = Path({str(tmp_path)!r})
        table = reliability_table([0.2, 0.3, 0.8, 0.9], [0, 1, 1, 1], n_bins=2)
        plot_reliability({{"UDCG-theta": table}}, folder / "reliability.png")
        plot_weights(SimpleNamespace(alpha_=[0.5, 0.2], beta_=[-0.1, 0.0]), folder / "w.png", "t")
        after = [matplotlib.get_backend(), plt.get_fignums()]
        pngs = sorted(p.name for p in folder.iterdir() if p.read_bytes()[:4] == b"\\x89PNG")
        print(json.dumps({{"before": before, "after": after, "pngs": pngs}}))
        """
    )
    assert out["after"] == out["before"] == ["svg", [1]]
    assert out["pngs"] == ["reliability.png", "w.png"]


# ------------------------------------------------------------------------------ statistics


def test_correlations_run_with_the_warnings_filters_untouched() -> None:
    """While udcg.stats and the pipeline's correlations call scipy, warnings.filters is the
    caller's (a filter set there would be process-wide and not thread-safe), a nearly
    constant vector draws no warning and gives scipy's value, and threads leave the filters
    as they were."""
    pytest.importorskip("scipy")
    out = run_fresh(
        """
        import json, threading, warnings
        import numpy as np
        from scipy import stats as sps
        from udcg import stats
        from udcg.pipeline.correlate import correlations

        stats.correlation([1.0, 2.0, 3.0], [0.0, 1.0, 1.0])  # scipy imported: its filters set
        before = list(warnings.filters)
        seen = []
        for name in ("spearmanr", "kendalltau", "pearsonr"):
            real = getattr(sps, name)

            def spy(*args, _real=real, **kwargs):
                seen.append(len(warnings.filters))
                return _real(*args, **kwargs)

            setattr(sps, name, spy)
        rng = np.random.default_rng(0)
        x, y = rng.random(40), (rng.random(40) < 0.5).astype(float)
        groups = np.repeat(np.arange(10), 4)
        for method in ("spearman", "kendall", "pearson"):
            stats.correlation(x, y, method)
            stats.bootstrap_correlation(x, y, groups, method=method, n_resamples=20)
            stats.paired_bootstrap_test(x, x ** 2, y, groups, method=method, n_resamples=20)
        correlations({"a": x, "b": x ** 2}, y, groups, n_resamples=20)
        near = 1e8 + 1e-7 * rng.random(40)
        from scipy.stats import _stats_py  # the unwrapped pearsonr
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = stats.correlation(near, y, "pearson")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = float(_stats_py.pearsonr(near, y)[0])

        def work():
            for _ in range(200):
                stats.correlation(x, y, "pearson")

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(json.dumps({
            "seen": sorted(set(seen)), "count": len(before),
            "kept": warnings.filters == before,
            "near_warnings": [str(w.message) for w in caught], "near": [got, expected],
        }))
        """
    )
    assert out["seen"] == [out["count"]]
    assert out["kept"]
    assert out["near_warnings"] == []
    assert out["near"][0] == out["near"][1]


# ---------------------------------------------------------------------------------- theta

_FIT = """
import json, os, signal, threading, warnings
import torch
import udcg
from lightning.pytorch.callbacks import Callback
from udcg.theta.simulate import simulate_arrays

rel, util, cor = simulate_arrays(300, 3, seed=0)
udcg.UDCGTheta(3, max_epochs=2).fit(rel, util, cor)  # imports done first


def state():
    return [torch.are_deterministic_algorithms_enabled(),
            os.environ.get("CUBLAS_WORKSPACE_CONFIG"), len(warnings.filters)]
"""


def test_ctrl_c_in_a_fit_raises_keyboard_interrupt_and_keeps_sigint() -> None:
    """Lightning turns Ctrl+C into sys.exit(1) with SIGINT ignored; the fit raises
    KeyboardInterrupt and Ctrl+C works again afterwards."""
    pytest.importorskip("lightning")
    out = run_fresh(
        _FIT
        + """
class CtrlC(Callback):
    def on_train_epoch_start(self, trainer, pl_module):
        raise KeyboardInterrupt


try:
    udcg.UDCGTheta(3, max_epochs=5).fit(rel, util, cor, callbacks=[CtrlC()])
    raised = "nothing"
except KeyboardInterrupt:
    raised = "KeyboardInterrupt"
except SystemExit as exc:
    raised = f"SystemExit({exc.code})"
print(json.dumps({"raised": raised,
                  "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler}))
"""
    )
    assert out == {"raised": "KeyboardInterrupt", "sigint": True}


def test_a_cpu_fit_leaves_torch_determinism_and_cublas_alone() -> None:
    """The CPU kernels are deterministic already: no process-wide torch flag or environment
    variable changes while a CPU fit runs."""
    pytest.importorskip("lightning")
    out = run_fresh(
        _FIT
        + """
during = []


class Look(Callback):
    def on_train_epoch_start(self, trainer, pl_module):
        during.append(state()[:2])


before = state()[:2]
udcg.UDCGTheta(3, max_epochs=3, accelerator="cpu").fit(rel, util, cor, callbacks=[Look()])
print(json.dumps({"before": before, "during": during}))
"""
    )
    assert out["before"] == [False, None]
    assert out["during"] and all(seen == out["before"] for seen in out["during"])


def test_concurrent_fits_run_one_at_a_time_and_restore_the_settings() -> None:
    """Two fits in two threads: the second does not start training while the first one is
    (their save/restore of the process settings cannot interleave), and the settings after
    both equal those before."""
    pytest.importorskip("lightning")
    out = run_fresh(
        _FIT
        + """
first_training, second_training = threading.Event(), threading.Event()
overlap = []


class First(Callback):
    def on_train_start(self, trainer, pl_module):
        first_training.set()
        overlap.append(second_training.wait(3.0))  # True: the second trains meanwhile


class Second(Callback):
    def on_train_start(self, trainer, pl_module):
        second_training.set()


def fit(callback):
    udcg.UDCGTheta(3, max_epochs=3, val_fraction=0.2).fit(rel, util, cor, callbacks=[callback])


before = state()
one = threading.Thread(target=fit, args=(First(),))
one.start()
first_training.wait(30.0)
two = threading.Thread(target=fit, args=(Second(),))
two.start()
one.join()
two.join()
print(json.dumps({"overlap": overlap, "before": before, "after": state(),
                  "second_ran": second_training.is_set()}))
"""
    )
    assert out["overlap"] == [False]
    assert out["second_ran"]
    assert out["after"] == out["before"]


def test_crossfit_theta_fits_with_the_warnings_filters_untouched() -> None:
    """crossfit_theta warns once for both halves without a warnings filter around the fits."""
    pytest.importorskip("lightning")
    out = run_fresh(
        _FIT
        + """
from tests.pipeline.test_pipeline import collinear_contexts
from udcg.pipeline.scoring import crossfit_theta
from udcg.theta import UDCGTheta

seen = []
real_fit = UDCGTheta.fit


def fit(self, *args, **kwargs):
    seen.append(len(warnings.filters))
    return real_fit(self, *args, **kwargs)


UDCGTheta.fit = fit
relevant, utility, correct, qids = collinear_contexts()
before = len(warnings.filters)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    _, models = crossfit_theta(relevant, utility, correct, qids, seed=0)
print(json.dumps({"before": before, "seen": seen,
                  "warned": [str(w.message)[:40] for w in caught],
                  "stuck": sum(not m.converged_ for m in models)}))
"""
    )
    assert out["seen"] == [out["before"] + 1] * 2  # the caller's catch_warnings, no more
    assert out["warned"] == ["UDCG-theta (cross-fitted) did not conver"]
    assert out["stuck"] in (1, 2)


# ------------------------------------------------------------------------------------- cli


def test_train_in_process_leaves_the_root_logger_as_it_was(tmp_path: Path) -> None:
    """``main(["train", ...])`` in-process: Hydra's job logging lasts for the run (the run
    folder gets train.log), then the root logger has its level and handlers back and the
    log file is closed."""
    pytest.importorskip("hydra")
    pytest.importorskip("lightning")
    out = run_fresh(
        f"""
        import contextlib, io, json, logging
        from udcg.cli.main import main

        root = logging.getLogger()
        mine = logging.StreamHandler(io.StringIO())
        root.addHandler(mine)
        before = [root.level, [id(h) for h in root.handlers]]
        added = []
        real_add = logging.Logger.addHandler

        def add(logger, handler):
            added.append(handler)
            real_add(logger, handler)

        logging.Logger.addHandler = add
        run = {str(tmp_path / "run")!r}
        with contextlib.redirect_stdout(io.StringIO()):
            status = main(["train", "k=3", "n_bootstrap=20", "logger=none",
                           f"hydra.run.dir={{run}}"])
        files = [h for h in added if isinstance(h, logging.FileHandler)]
        print(json.dumps({{
            "status": status, "before": before,
            "after": [root.level, [id(h) for h in root.handlers]],
            "log": [h.baseFilename.rsplit("/", 1)[-1] for h in files],
            "closed": [h.stream is None for h in files],
        }}))
        """,
        cwd=tmp_path,
    )
    assert out["status"] == 0
    assert out["after"] == out["before"]
    assert out["log"] == ["train.log"] and (tmp_path / "run" / "train.log").is_file()
    assert out["closed"] == [True]
