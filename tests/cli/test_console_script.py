"""``udcg train`` and ``udcg benchmark`` through the installed console script, from a directory
outside the clone: Hydra finds the configs shipped in the package, sees the arguments after the
command, and names the command in its one-line errors; a missing optional dependency is one
line naming the extra to install."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from udcg.cli import main as dispatcher
from udcg.cli.extras import EXTRAS, extra_of, needs
from udcg.cli.hydra_config import CONF_DIR, run_job
from udcg.io.contexts.jsonl import write_contexts
from udcg.theta.simulate import simulate_contexts as simulate

REPO = Path(__file__).resolve().parents[2]
UDCG = shutil.which("udcg", path=str(Path(sys.executable).parent))
needs_script = pytest.mark.skipif(UDCG is None, reason="the udcg console script is not installed")


def udcg(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``udcg ARGS`` (the console script of this environment) in ``cwd``, offline."""
    return subprocess.run(
        [str(UDCG), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=300,
    )


def script(name: str, *args: str) -> subprocess.CompletedProcess:
    """``python NAME ARGS`` from the repository root."""
    return subprocess.run(
        [sys.executable, name, *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )


def test_udcg_help_lists_train_and_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    assert dispatcher.main(["--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    commands = [line.split()[0] for line in lines if line.startswith("  ")]
    assert {"trec", "train", "benchmark"} <= set(commands)
    assert "evaluate" not in commands  # the old name runs, with a note, but is not listed


def test_the_configs_live_in_the_package() -> None:
    assert CONF_DIR == REPO / "udcg" / "conf"
    assert (CONF_DIR / "train.yaml").is_file() and (CONF_DIR / "evaluate.yaml").is_file()
    assert not (REPO / "conf").exists()


@needs_script
@pytest.mark.parametrize("job", ["train", "benchmark"])
def test_hydra_help_through_the_console_script(job: str, tmp_path: Path) -> None:
    done = udcg(job, "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].endswith(".")  # a sentence saying what the job does
    assert "== Configuration groups ==" in done.stdout
    retrievers = sorted(path.stem for path in (CONF_DIR / "retriever").glob("*.yaml"))
    assert f"retriever: {', '.join(retrievers)}" in done.stdout
    assert not list(tmp_path.iterdir())  # --help runs nothing


@needs_script
def test_a_bad_option_through_the_console_script_is_one_line(tmp_path: Path) -> None:
    done = udcg("train", "k=abc", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert done.stderr.splitlines() == [
        "udcg train: error: field 'k': must be a positive integer, got 'abc'"
    ]
    assert done.returncode == 2


@needs_script
@pytest.mark.parametrize(("command", "job"), [("train", "train"), ("benchmark", "evaluate")])
def test_udcg_and_the_script_compose_the_same_config(
    command: str, job: str, tmp_path: Path
) -> None:
    """Same job config and the same output directories as ``python JOB.py`` in the clone."""
    args = ["--cfg", "all", "k=3", "seed=2"]
    mine, theirs = udcg(command, *args, cwd=tmp_path), script(f"{job}.py", *args)
    assert mine.returncode == theirs.returncode == 0, mine.stderr + theirs.stderr

    def without_cwd(text: str) -> list[str]:  # hydra.runtime.cwd: where each one ran
        return [line for line in text.splitlines() if not line.startswith("    cwd: ")]

    assert without_cwd(mine.stdout) == without_cwd(theirs.stdout)
    assert f"dir: outputs/{job}/" in mine.stdout and f"dir: multirun/{job}/" in mine.stdout


@needs_script
def test_a_train_sweep_outside_the_clone_names_the_command(tmp_path: Path) -> None:
    data = tmp_path / "contexts.jsonl"
    write_contexts(data, simulate(40, 3))
    done = udcg(
        "train",
        "-m",
        "k=7,3",
        "data=jsonl",
        f"data.path={data}",
        "judge=sim",
        "n_bootstrap=50",
        cwd=tmp_path,
    )
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[0].startswith("udcg train: error: field 'data': 0 contexts")
    assert lines[1] == "udcg train: 1 of 2 sweep members failed:"
    (sweep,) = (tmp_path / "multirun" / "train").iterdir()  # relative to the working directory
    assert (sweep / "1-k3" / "udcg_theta_k3.safetensors").is_file()


# ----------------------------------------------------------------------- missing extras


def test_a_missing_extra_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "lightning", None)  # as if not installed
    assert dispatcher.main(["train", "k=5"]) == 2
    assert capsys.readouterr().err == (
        "udcg train: error: needs the 'train' extra: pip install 'udcg[train]'\n"
    )
    monkeypatch.setitem(sys.modules, "bm25s", None)
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert dispatcher.main(["evaluate"]) == 2  # the old name of udcg benchmark
    assert capsys.readouterr().err == (
        "udcg: note: udcg evaluate is deprecated: use udcg benchmark\n"
        "udcg benchmark: error: needs the 'train', 'judge' and 'retrieval' extras: "
        "pip install 'udcg[train,judge,retrieval]'\n"
    )


def test_an_optional_import_failing_in_a_command_names_its_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = types.ModuleType("udcg_test_command")

    def main(argv: list[str]) -> int:
        import httpx  # noqa: F401  (blocked below)

        return 0

    module.main = main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "udcg_test_command", module)
    monkeypatch.setitem(sys.modules, "httpx", None)
    monkeypatch.setitem(dispatcher.COMMANDS, "fake", ("udcg_test_command", "test", ()))
    assert dispatcher.main(["fake"]) == 2
    assert capsys.readouterr().err == (
        "udcg fake: error: needs the 'judge' extra: pip install 'udcg[judge]'\n"
    )


def test_a_hydra_job_names_the_extra_of_a_failed_import(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def work() -> None:
        raise ModuleNotFoundError("No module named 'bm25s'", name="bm25s")

    with pytest.raises(SystemExit) as stop:
        run_job("evaluate", work)
    assert stop.value.code == 2
    assert capsys.readouterr().err == (
        "evaluate.py: error: needs the 'retrieval' extra: pip install 'udcg[retrieval]'\n"
    )


def test_an_import_of_no_extra_keeps_its_traceback() -> None:
    def work() -> None:
        raise ModuleNotFoundError("No module named 'nosuch'", name="nosuch")

    with pytest.raises(ModuleNotFoundError):
        run_job("train", work)


def test_extra_of_prefers_the_command_s_extras() -> None:
    assert extra_of("torch.nn") == "train"
    assert extra_of("torch", prefer=("judge",)) == "judge"
    assert extra_of("numpy") is None and extra_of(None) is None
    assert needs(["judge"]) == "needs the 'judge' extra: pip install 'udcg[judge]'"
    assert set(EXTRAS) >= {"train", "judge", "retrieval"}
