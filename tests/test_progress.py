"""Progress on stderr: a bar on a terminal, plain timed lines elsewhere, an opt-out, and a
whole ``udcg annotate`` process with stderr in a file."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from udcg import progress as progress_module
from udcg.cli.contexts import main as contexts_main
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage, write_contexts
from udcg.progress import LineProgress, next_stage, progress, progress_mode

LINE = re.compile(r"^contexts: (\d+)/40 \((\d+)%\), \d+\.\d/s(, ETA \d+s)?$")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("UDCG_PROGRESS", "UDCG_PROGRESS_INTERVAL", "TQDM_DISABLE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_lines_every_interval_and_at_the_end(clean_env: pytest.MonkeyPatch) -> None:
    now = [100.0]
    clean_env.setattr(progress_module.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    with LineProgress(out, "contexts", 1000, interval=5.0) as bar:
        now[0] += 2.0
        bar.update(100)  # 2 s: too soon for a line
        now[0] += 5.0
        bar.update(200)  # 300 done in 7 s
    assert out.getvalue().splitlines() == [
        "contexts: 300/1000 (30%), 42.9/s, ETA 16s",
        "contexts: 300/1000 (30%), 42.9/s, ETA 16s",
    ]


def test_resumed_work_is_not_counted_in_the_rate(clean_env: pytest.MonkeyPatch) -> None:
    now = [0.0]
    clean_env.setattr(progress_module.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    bar = LineProgress(out, "contexts", 10_000, initial=9_000, interval=1.0)
    now[0] = 100.0
    bar.update(100)
    assert out.getvalue() == "contexts: 9100/10000 (91%), 1.0/s, ETA 15m00s\n"


def test_unknown_total_and_inner_loops(clean_env: pytest.MonkeyPatch) -> None:
    now = [0.0]
    clean_env.setattr(progress_module.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    with LineProgress(out, "contexts", None, interval=1.0) as bar:
        now[0] = 2.0
        bar.update(5)
    with LineProgress(out, "abstain", 3, leave=False, interval=1.0) as inner:
        inner.update(3)  # quick inner loop: no line, not even at the end
    assert out.getvalue() == "contexts: 5, 2.5/s\ncontexts: 5, 2.5/s\n"


def test_mode_follows_the_stream_and_the_opt_outs(clean_env: pytest.MonkeyPatch) -> None:
    assert progress_mode(io.StringIO()) == "lines"
    assert progress_mode(Terminal()) == "bar"
    clean_env.setenv("UDCG_PROGRESS", "lines")
    assert progress_mode(Terminal()) == "lines"
    for name, value in (("UDCG_PROGRESS", "0"), ("UDCG_PROGRESS", "off"), ("TQDM_DISABLE", "1")):
        clean_env.delenv("UDCG_PROGRESS", raising=False)
        clean_env.setenv(name, value)
        out = io.StringIO()
        with progress(3, "contexts", stream=out) as bar:
            bar.update(3)
        assert out.getvalue() == ""
        assert progress_mode(Terminal()) == "off"
        clean_env.delenv(name)


def test_a_bar_on_a_terminal_and_no_process_wide_change(clean_env: pytest.MonkeyPatch) -> None:
    before = dict(os.environ)
    out = Terminal()
    with progress(4, "contexts", unit="ctx", stream=out) as bar:
        bar.update(4)
    assert "\r" in out.getvalue() and "4/4" in out.getvalue()
    assert dict(os.environ) == before


def test_a_bad_interval_is_one_named_error(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("UDCG_PROGRESS_INTERVAL", "soon")
    with pytest.raises(UDCGInputError, match="UDCG_PROGRESS_INTERVAL"):
        progress(3, "contexts", stream=io.StringIO())


def test_annotate_with_stderr_in_a_file_writes_progress_lines(tmp_path: Path) -> None:
    contexts = [
        Context(
            f"q{i}",
            [Passage(doc_id=f"d{j}", text=f"passage {i}-{j}") for j in range(2)],
            question=f"question {i}?",
        )
        for i in range(40)
    ]
    src = tmp_path / "in.jsonl"
    write_contexts(src, contexts)
    probs = tmp_path / "probs.jsonl"
    rows = [
        {"question": c.question, "passage": p.text, "abstain_prob": 0.5}
        for c in contexts
        for p in c.passages
    ]
    probs.write_text("".join(json.dumps(row) + "\n" for row in rows))
    env = {k: v for k, v in os.environ.items() if k not in ("UDCG_PROGRESS", "TQDM_DISABLE")}
    env |= {"HF_HUB_OFFLINE": "1", "UDCG_PROGRESS_INTERVAL": "0.000001"}
    out = tmp_path / "out.jsonl"
    command = [sys.executable, "-m", "udcg", "annotate", str(src), "-o", str(out),
               "--judge", f"precomputed:{probs}", "--steps", "abstain", "--chunk", "4",
               "--cache", str(tmp_path / "cache.sqlite")]  # fmt: skip
    log = tmp_path / "stderr.log"
    with open(log, "w") as stderr:
        done = subprocess.run(
            command,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            timeout=120,
        )
    text = log.read_text()
    assert done.returncode == 0, text
    assert "\r" not in text
    lines = [m for m in map(LINE.match, text.splitlines()) if m]
    assert len(lines) >= 2, text  # lines while it runs (interval ~0) and one at the end
    assert lines[-1].group(1) == "40" and lines[-1].group(2) == "100"
    assert [int(m.group(1)) for m in lines] == sorted(int(m.group(1)) for m in lines)


def test_stages_are_named_as_they_start(clean_env: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    with progress(2, "train: fit", unit="stage", stream=out) as bar:
        next_stage(bar, "train", "tune gamma")
        bar.update(1)
    lines = out.getvalue().splitlines()
    assert [line.split(":")[:2] for line in lines] == [["train", " tune gamma"]] * 2
    assert lines[0].split(": ", 2)[2].startswith("1/2 (50%)")
    assert lines[1].split(": ", 2)[2].startswith("2/2 (100%)")


def test_udcg_contexts_shows_its_count(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "run").write_text("1 Q0 a 1 2.0 sys\n1 Q0 b 2 1.0 sys\n2 Q0 a 1 1.0 sys\n")
    (tmp_path / "topics").write_text("1\tfirst?\n2\tsecond?\n")
    (tmp_path / "collection").write_text("a\tpassage a\nb\tpassage b\n")
    args = ["--topics", str(tmp_path / "topics"), "--collection", str(tmp_path / "collection")]
    assert contexts_main([str(tmp_path / "run"), *args, "-k", "2", "--out", "-"]) == 0
    assert re.match(r"contexts: 2, \d+\.\d/s\n", capsys.readouterr().err)


def test_a_long_collection_read_shows_it_moves(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reading a collection for a few ranked passages moves a line of passages read (every
    PROGRESS_STEP of them), which is not left once done."""
    from udcg.io.formats import collection

    now = [0.0]

    def tick() -> float:
        now[0] += 1.0
        return now[0]

    clean_env.setattr(progress_module.time, "monotonic", tick)
    clean_env.setattr(collection, "PROGRESS_STEP", 2)
    clean_env.setenv("UDCG_PROGRESS_INTERVAL", "0.5")
    path = tmp_path / "collection.tsv"
    path.write_text("".join(f"d{i}\tpassage {i}\n" for i in range(6)))
    assert set(collection.read_collection(path, {"d5"})) == {"d5"}
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(",")[0] for line in lines] == [f"passages read: {n}" for n in (2, 4, 6)]
