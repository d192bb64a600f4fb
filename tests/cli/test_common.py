"""What every argparse command shares (udcg.cli.common): one-line errors and warnings, a quiet
end on a closed pipe, ``-`` for standard input and output."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

import udcg.cli.score
import udcg.cli.trec
from udcg.cli.common import BROKEN_PIPE, run_cli
from udcg.errors import UDCGInputError, UDCGWarning
from udcg.io.contexts.jsonl import write_contexts
from udcg.theta.simulate import simulate_contexts as simulate

TREC = Path(__file__).resolve().parents[2] / "examples" / "trec"
QRELS, RUN = TREC / "qrels.trec", TREC / "run.trec"


def test_a_closed_pipe_ends_quietly_with_status_141() -> None:
    """``udcg trec QRELS RUN -q | head -1``, the reader gone before the first write."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "udcg", "trec", str(QRELS), str(RUN), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) == BROKEN_PIPE == 141
    assert stderr == b""


def test_errors_and_warnings_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    def fails() -> None:
        raise UDCGInputError("cannot connect\nretry later", field="judge")

    assert run_cli("udcg x", fails) == 2
    assert capsys.readouterr().err == "udcg x: error: field 'judge': cannot connect retry later\n"

    def warns() -> None:
        for _ in range(2):  # shown each time, not once per place
            warnings.warn("few contexts", UDCGWarning, stacklevel=1)

    assert run_cli("udcg x", warns) == 0
    assert capsys.readouterr().err == "udcg x: warning: few contexts\n" * 2

    def unreadable() -> None:  # a library's OSError without a file name (transformers' config)
        raise OSError("the config file at 'm/config.json' is not a valid JSON file.")

    assert run_cli("udcg x", unreadable) == 2
    err = capsys.readouterr().err
    assert err == "udcg x: error: the config file at 'm/config.json' is not a valid JSON file.\n"


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_trec_reads_a_dash_from_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert udcg.cli.trec.main([str(QRELS), str(RUN), "-q"]) == 0
    from_files = capsys.readouterr().out
    _stdin(monkeypatch, RUN.read_bytes())
    assert udcg.cli.trec.main([str(QRELS), "-", "-q"]) == 0
    assert capsys.readouterr().out == from_files


def test_trec_refuses_stdin_twice(capsys: pytest.CaptureFixture[str]) -> None:
    assert udcg.cli.trec.main(["-", "-"]) == 2
    assert capsys.readouterr().err == (
        "udcg trec: error: QRELS and RUN both read standard input; only one input can\n"
    )


_COLLECTION = ["--collection", "c.tsv", "--qrels", "q.trec", "--judge", "precomputed:p.jsonl"]


@pytest.mark.parametrize(
    ("command", "argv", "named"),
    [
        ("trec", [str(QRELS), "/dev/stdin", "--utilities", "-"], "RUN and --utilities both"),
        ("compare", [str(QRELS), "-", str(RUN), "/dev/fd/0"], "RUN is given standard input "
         "twice (- and /dev/fd/0); only one input can read it"),
        ("annotate", ["-", "-o", "out.jsonl", "--judge", "precomputed:/dev/stdin",
                      "--judge-key", "j"],
         "IN and --judge both"),
        ("contexts", ["-", "--topics", "/dev/stdin", "--collection", "c.tsv", "-k", "5", "-o",
                      "out.jsonl"], "RUN and --topics both"),
        ("report", ["a.trec", "b.trec", "--topics", "-", *_COLLECTION, "-o", "out",
                    "--answers", "/proc/self/fd/0"], "--topics and --answers both"),
        ("report", ["/dev/stdin", "b.trec", "--topics", "-", *_COLLECTION, "-o", "out"],
         "RUN and --topics both"),
        ("qcare", ["rankings", "-", "/dev/stdin"], "INPUT 1 and INPUT 2 both"),
        ("order", ["--run", "-", "--qrels", "/dev/stdin", "--utilities", "u.tsv", "--weights",
                   "w", "-o", "o.run"], "--run and --qrels both"),
        ("trec", [str(QRELS), str(RUN), "-m", "C-nDCG@5", "--coverage", "/dev/stdin"],
         "--coverage cannot be /dev/stdin"),
        ("batch", ["import", "r.jsonl", "-", "--calls", "/dev/stdin", "--judge",
                   "openai:m@http://127.0.0.1:9/v1"], "RESULTS and --calls both"),
        ("qcare", ["label", "/dev/stdin", "-o", "out.jsonl", "--judge", "precomputed:-",
                   "--judge-key", "j"],
         "INPUT and --judge both"),
    ],
)  # fmt: skip
def test_standard_input_named_for_two_inputs_is_refused_first(
    command: str,
    argv: list[str],
    named: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``-``, /dev/stdin, /dev/fd/0 and /proc/self/fd/0 are all standard input, which can be
    read once: two inputs naming it are refused in one line naming both, before anything is
    read (the other inputs do not even exist) or written."""
    import importlib

    monkeypatch.chdir(tmp_path)
    _stdin(monkeypatch, b"")
    main = importlib.import_module(f"udcg.cli.{command}").main
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"udcg {command}") and f": error: {named}" in err, err
    assert err.count("\n") == 1 and "standard input" in err
    assert list(tmp_path.iterdir()) == []


def test_score_from_stdin_to_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_contexts(tmp_path / "c.jsonl", simulate(5, 3, per_query=1))
    _stdin(monkeypatch, (tmp_path / "c.jsonl").read_bytes())
    assert udcg.cli.score.main(["-", "--judge", "sim", "--out", "-"]) == 0
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert len(rows) == 5 and {"qid", "UDCG", "nDCG"} <= set(rows[0])
    assert captured.err.startswith("5 contexts, judge sim, utility abstention\nrun\tk\tn\tUDCG")


def test_an_unsupported_operation_or_a_failing_server_is_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from udcg.cli.common import run_cli
    from udcg.judge.openai_http import JudgeServerError

    def unsupported() -> None:
        raise NotImplementedError(
            "OpenAIJudge cannot compute answer likelihoods\nwithout a tokenizer"
        )

    def server() -> None:
        raise JudgeServerError("http://127.0.0.1:9/v1: HTTP 500")

    assert run_cli("udcg annotate", unsupported) == 2
    assert capsys.readouterr().err == (
        "udcg annotate: error: OpenAIJudge cannot compute answer likelihoods without a tokenizer\n"
    )
    assert run_cli("udcg annotate", server) == 1
    assert capsys.readouterr().err == "udcg annotate: failed: http://127.0.0.1:9/v1: HTTP 500\n"


def test_a_broken_output_fifo_leaves_standard_output_alone(tmp_path: Path) -> None:
    """``main([..., "-o", FIFO])`` whose reader stops early ends with 141, and the caller's
    standard output still takes what it prints after (only a broken standard output is
    pointed at /dev/null)."""
    import udcg

    udcg.write_contexts(tmp_path / "ctx.jsonl", udcg.demo_contexts())
    os.mkfifo(tmp_path / "out.fifo")
    script = (
        "from udcg.cli.main import main\n"
        "rc = main(['score', 'ctx.jsonl', '--judge', 'smollm2-135m', '-o', 'out.fifo'])\n"
        "print('after', rc)\n"
    )
    reader = subprocess.Popen(["head", "-c", "100", "out.fifo"], cwd=tmp_path,
                              stdout=subprocess.DEVNULL)  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    reader.wait(timeout=60)
    assert done.stdout.endswith("after 141\n"), done.stderr


def test_closed_stream_objects_and_a_text_stdin_in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A caller's closed ``sys.stderr`` drops the messages and a closed ``sys.stdout`` is one
    line, as when the shell closes them; a ``StringIO`` standard input is read as UTF-8."""
    import io

    from udcg.cli.main import main

    assert main(["trec", str(QRELS), str(RUN), "-m", "AP"]) == 0
    expected = capsys.readouterr().out
    closed = io.StringIO()
    closed.close()
    with monkeypatch.context() as patch:
        patch.setattr(sys, "stderr", closed)
        assert main(["trec", str(QRELS), str(RUN), "-m", "AP"]) == 0
    assert capsys.readouterr().out == expected
    with monkeypatch.context() as patch:
        patch.setattr(sys, "stdout", closed)
        assert main(["trec", str(QRELS), str(RUN), "-m", "AP"]) == 2
    assert "standard output is closed" in capsys.readouterr().err
    with monkeypatch.context() as patch:  # a closed stdout, data to a device: flushed around
        patch.setattr(sys, "stdout", closed)
        import udcg

        contexts = tmp_path / "c.jsonl"
        udcg.write_contexts(contexts, list(udcg.demo_contexts())[:3])
        argv = ["score", str(contexts), "--judge", "smollm2-135m", "-o", os.devnull]
        assert main(argv) == 0
    monkeypatch.setattr(sys, "stdin", io.StringIO(RUN.read_text()))
    assert main(["trec", str(QRELS), "-", "-m", "AP"]) == 0
    assert capsys.readouterr().out == expected.replace(str(RUN), "-")
    # read by the library, outside a command, each new standard input is read anew
    from udcg.io.formats.trec import read_trec_qrels

    for text in ("q1 0 d1 1\n", "q2 0 d2 1\n", "q3 0 d3 1\n"):
        sys.stdin = None  # the last one freed first: the next may take its id
        sys.stdin = io.TextIOWrapper(io.BytesIO(text.encode()))
        assert read_trec_qrels("-").qids.to_pylist() == [text[:2]]


def test_commands_in_two_threads_put_the_warnings_state_back(capsys) -> None:
    """The first of two overlapping in-process commands to start ends first: the warnings
    filters and ``showwarning`` are the caller's again once both end, and each thread's
    warning carries its own command's name."""
    import threading

    before = (warnings.showwarning, list(warnings.filters))
    started, release = threading.Event(), threading.Event()

    def first() -> None:
        started.set()
        release.wait(10)
        warnings.warn("from the first", UDCGWarning, stacklevel=1)

    def second() -> None:
        started.wait(10)
        warnings.warn("from the second", UDCGWarning, stacklevel=1)
        release.set()
        time.sleep(0.2)  # ends after the first

    threads = [
        threading.Thread(target=run_cli, args=("udcg one", first)),
        threading.Thread(target=run_cli, args=("udcg two", second)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (warnings.showwarning, list(warnings.filters)) == before
    err = capsys.readouterr().err
    assert "udcg one: warning: from the first\n" in err
    assert "udcg two: warning: from the second\n" in err


def test_a_rerun_on_the_same_standard_input_rewritten_reads_it_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``trec`` parses RUN on a worker thread: the worker reads standard input within the
    command, so a second command on the same stream, rewritten in place and rewound, scores
    the new run (as a file of the new run does)."""
    from udcg.cli.main import main

    monkeypatch.setenv("UDCG_NUM_THREADS", "2")
    other = tmp_path / "other.trec"  # the ranking turned over: scores negated
    rows = [line.split() for line in RUN.read_text().splitlines()]
    other.write_text("".join(f"{q} Q0 {d} {r} {-float(s)} t\n" for q, _, d, r, s, _ in rows))
    assert main(["trec", str(QRELS), str(other), "-m", "AP"]) == 0
    expected = capsys.readouterr().out.replace(str(other), "-")
    stdin = tmp_path / "stdin.trec"
    stdin.write_text(RUN.read_text())
    with stdin.open() as stream:
        monkeypatch.setattr(sys, "stdin", stream)
        assert main(["trec", str(QRELS), "-", "-m", "AP"]) == 0
        first = capsys.readouterr().out
        stdin.write_text(other.read_text())
        stream.seek(0)
        assert main(["trec", str(QRELS), "-", "-m", "AP"]) == 0
        assert capsys.readouterr().out == expected != first
