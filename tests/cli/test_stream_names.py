"""Standard streams as the shell hands them over: closed (``<&-``, ``>&-``, ``2>&-``), a
file that is also an input, several names of one stream, and a deleted working folder. Each
case runs the command in a child process whose descriptors are set up by a shell."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

CLI = f"{sys.executable} -m udcg"


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    """A folder with topics.tsv, coll.tsv, run.txt and qrels.txt: enough for ``contexts``."""
    (tmp_path / "topics.tsv").write_text("q1\tcapital of australia\nq2\tcapital of france\n")
    (tmp_path / "coll.tsv").write_text("d1\tCanberra is it\nd2\tParis is it\nd3\tnothing\n")
    (tmp_path / "run.txt").write_text("q1 Q0 d1 1 2.0 r\nq1 Q0 d3 2 1.0 r\nq2 Q0 d2 1 2.0 r\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    return tmp_path


def _sh(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``script`` run by bash in ``cwd``, ``$U`` the command line of udcg."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "U": CLI}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True)


CONTEXTS = "$U contexts run.txt --topics topics.tsv --collection coll.tsv -k 2"


def _judge_values(inputs: Path) -> None:
    """``vals.jsonl``: a precomputed judge of every (question, passage) of ``inputs``."""
    rows = "".join(
        f'{{"question": "capital of {c}", "passage": "{t}", "abstain_prob": 0.3}}\n'
        for c in ("australia", "france")
        for t in ("Canberra is it", "Paris is it", "nothing")
    )
    (inputs / "vals.jsonl").write_text(rows)


def test_a_deleted_working_folder_does_not_stop_absolute_names_and_standard_output(
    inputs: Path,
) -> None:
    absolute = f"$U contexts {inputs}/run.txt --topics {inputs}/topics.tsv " \
        f"--collection {inputs}/coll.tsv -k 2 -o -"  # fmt: skip
    done = _sh(
        f"mkdir gone && cd gone && rmdir ../gone && {absolute} > ../out.jsonl 2> ../err"
        f" && $U trec {inputs}/qrels.txt {inputs}/run.txt > ../trec.txt",
        inputs,
    )
    assert done.returncode == 0, (done.stderr, (inputs / "err").read_text())
    assert len((inputs / "out.jsonl").read_text().splitlines()) == 2
    assert "num_q" in (inputs / "trec.txt").read_text()


def test_a_closed_standard_error_drops_progress_and_messages(inputs: Path) -> None:
    done = _sh(f"UDCG_PROGRESS=lines {CONTEXTS} -o out.jsonl 2>&- && {CONTEXTS} -o - 2>&-", inputs)
    assert done.returncode == 0 and done.stderr == ""
    assert len((inputs / "out.jsonl").read_text().splitlines()) == 2
    assert done.stdout == (inputs / "out.jsonl").read_text()  # no summary among the data


def test_a_usage_mistake_with_standard_error_closed_leaves_standard_output_empty(
    inputs: Path,
) -> None:
    """argparse's usage text, and the dispatcher's without a command, are dropped, never
    written among the data."""
    for command in (f"{CONTEXTS} -o out/", "$U trec --bogus qrels.txt run.txt", "$U batch", "$U"):
        done = _sh(f"{command} 2>&- > data.jsonl", inputs)
        assert done.returncode == 2, command
        assert (inputs / "data.jsonl").read_text() == "", command


def test_a_closed_standard_output_is_no_failure_when_the_output_is_a_file(inputs: Path) -> None:
    done = _sh(f"{CONTEXTS} -o out.jsonl >&-", inputs)
    assert done.returncode == 0 and "Traceback" not in done.stderr
    assert len((inputs / "out.jsonl").read_text().splitlines()) == 2


def test_a_closed_standard_input_given_as_an_input_is_one_line(inputs: Path) -> None:
    for command in (
        "$U contexts - --topics topics.tsv --collection coll.tsv -k 2 -o out.jsonl",
        "$U trec qrels.txt -",
    ):
        done = _sh(f"{command} <&-", inputs)
        assert done.returncode == 2, done.stderr
        assert "-: standard input is closed" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("name", ["out/", "out/.", "/dev/stdin/", "/dev/fd/0/", "/dev/stdout/"])
def test_an_output_named_as_a_folder_is_refused_before_work(inputs: Path, name: str) -> None:
    before = sorted(p.name for p in inputs.iterdir())
    done = _sh(f"{CONTEXTS} -o {name} < run.txt > stdout", inputs)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{name} names a folder" in done.stderr
    assert sorted(p.name for p in inputs.iterdir()) == sorted([*before, "stdout"])
    assert (inputs / "stdout").read_text() == ""
    assert (inputs / "run.txt").read_text().count("\n") == 3


def test_a_folder_output_may_end_in_a_slash() -> None:
    from udcg.cli.common import output_folder

    assert output_folder("report/") == "report/" and output_folder("/dev/fd/1") == "-"


def test_two_outputs_on_standard_output_are_refused_before_work(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text("[]")
    for table in ("-", "/dev/stdout", "/dev/fd/1"):
        done = _sh(f"$U qcare import results.json -o - --table {table}", tmp_path)
        assert done.returncode == 2 and done.stdout == "", done.stderr
        assert "--out and --table both write standard output" in done.stderr


def test_standard_output_that_is_an_input_file_is_refused(inputs: Path) -> None:
    before = (inputs / "run.txt").read_text()
    for redirect in (">> run.txt", "1<> run.txt"):
        for out in ("-", "/dev/stdout"):
            done = _sh(f"{CONTEXTS} -o {out} {redirect}", inputs)
            assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
            assert "standard output is the input RUN" in done.stderr
            assert (inputs / "run.txt").read_text() == before
    done = _sh(f"{CONTEXTS} -o - >> other.jsonl", inputs)  # another regular file: written
    assert done.returncode == 0 and len((inputs / "other.jsonl").read_text().splitlines()) == 2


def test_an_open_descriptor_as_output_is_written_through_itself(inputs: Path) -> None:
    want = _sh(f"{CONTEXTS} -o -", inputs).stdout.splitlines()
    assert len(want) == 2
    for out, redirect in (("/dev/stderr", "2> log"), ("/dev/fd/3", "2> log 3>&2")):
        done = _sh(f"UDCG_PROGRESS=lines {CONTEXTS} -o {out} {redirect}", inputs)
        assert done.returncode == 0, done.stderr
        log = (inputs / "log").read_text().splitlines()
        assert all(line in log for line in want), log  # the summary after them, not over them
        assert log[-1].startswith("udcg contexts: 2 queries")


def test_an_output_through_a_descriptor_open_for_reading_only_is_refused_before_work(
    inputs: Path,
) -> None:
    """``-o /dev/fd/3 3< FILE`` (and standard output open for reading only) would fail at the
    first write, after the work: refused in one line (after the usage) before it, exit 2."""
    (inputs / "held.txt").write_text("kept\n")
    for command in (
        f"{CONTEXTS} -o /dev/fd/3 3< held.txt",
        f"{CONTEXTS} -o /proc/self/fd/3 3< held.txt",
        f"{CONTEXTS} -o /dev/stdout 1< held.txt",
        f"{CONTEXTS} -o - 1< held.txt",
        "$U trec qrels.txt run.txt 1< held.txt",
    ):
        done = _sh(f"UDCG_PROGRESS=lines {command}", inputs)
        lines = done.stderr.splitlines()
        assert done.returncode == 2 and "Traceback" not in done.stderr, (command, lines)
        assert lines[-1].endswith("is open for reading only, not an output"), (command, lines)
        assert not any(line.startswith("contexts:") for line in lines), lines  # no progress
        assert (inputs / "held.txt").read_text() == "kept\n"
    done = _sh(f"{CONTEXTS} -o /dev/fd/3 3<> rw.jsonl", inputs)  # read and write: written
    assert done.returncode == 0 and len((inputs / "rw.jsonl").read_text().splitlines()) == 2


def test_standard_output_open_for_reading_only_drops_a_summary_and_refuses_results(
    inputs: Path,
) -> None:
    """With standard output open for reading only (``1< FILE``), a command writing its data to
    a file drops its summary there, as with standard output closed, and succeeds; commands
    whose results go there (``score`` and ``qcare score`` without ``-o``, ``cache stats``,
    ``weights show``) are refused before the work, closed too, and ``--version`` / ``--help``
    end in one line, not a traceback or a silent status 0."""
    (inputs / "held.txt").write_text("kept\n")
    assert _sh(f"{CONTEXTS} --qrels qrels.txt -o ctx.jsonl", inputs).returncode == 0
    _judge_values(inputs)
    annotate = "$U annotate ctx.jsonl --judge precomputed:vals.jsonl --steps abstain"
    (inputs / "a.jsonl").write_text("")  # private: replaced, it stays so
    (inputs / "a.jsonl").chmod(0o600)
    done = _sh(f"{annotate} -o a.jsonl --cache c.sqlite 1< held.txt", inputs)
    assert done.returncode == 0 and (inputs / "a.jsonl").stat().st_size, done.stderr
    assert stat.S_IMODE((inputs / "a.jsonl").stat().st_mode) == 0o600
    for command in (
        "$U score a.jsonl --judge vals -o s.jsonl",
        "$U cache merge m.sqlite c.sqlite",
        "$U cache checkpoint c.sqlite",
    ):
        done = _sh(f"{command} 1< held.txt", inputs)
        assert done.returncode == 0 and done.stderr == "", (command, done.stderr)
    assert (inputs / "s.jsonl").is_file() and (inputs / "m.sqlite").is_file()
    for command in (
        "$U score a.jsonl --judge vals",
        "$U qcare score a.jsonl",
        "$U qcare rankings a.jsonl a.jsonl",
        "$U qcare agreement a.jsonl a.jsonl",
        "$U cache stats c.sqlite",
        "$U weights show no-such-weights",  # refused before the weights are read
        "$U probe --judge openai:m@http://127.0.0.1:9/v1",  # before asking the server
    ):
        for closing in ("1< held.txt", ">&-"):
            done = _sh(f"UDCG_PROGRESS=lines {command} {closing}", inputs)
            lines = done.stderr.splitlines()
            assert done.returncode == 2 and len(lines) == 1, (command, closing, lines)
            assert " standard output is " in lines[0], (command, closing, lines)
    for command in ("$U --version", "$U --help", "$U trec --help", "$U train --help"):
        done = _sh(f"{command} 1< held.txt", inputs)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.endswith(": error: standard output: Bad file descriptor\n")
    done = _sh("$U cache merge full.sqlite c.sqlite > /dev/full", inputs)  # its summary
    assert (inputs / "full.sqlite").is_file()
    assert (done.returncode, done.stderr.splitlines()[-1]) == (
        2,
        "udcg cache merge: error: standard output: No space left on device",
    )
    assert (inputs / "held.txt").read_text() == "kept\n"


def test_a_closed_standard_output_is_one_line_for_each_command_writing_there(
    inputs: Path,
) -> None:
    """annotate, merge-shards, trec and compare write their data to standard output: closed,
    the command stops in one line before its work."""
    assert _sh(f"{CONTEXTS} -o ctx.jsonl", inputs).returncode == 0
    _judge_values(inputs)
    judge = "--judge precomputed:vals.jsonl --steps abstain"
    for i in (1, 2):
        shard = f"$U annotate ctx.jsonl -o p{i}.jsonl {judge} --cache s.sqlite --shard {i}/2"
        assert _sh(shard, inputs).returncode == 0
    judge += " --cache c.sqlite"
    for command in (
        f"$U annotate ctx.jsonl -o - {judge}",
        "$U merge-shards ctx.jsonl p1.jsonl p2.jsonl -o -",
        "$U trec qrels.txt run.txt",
        "$U compare qrels.txt run.txt run.txt --names a,b",
    ):
        done = _sh(f"{command} >&-", inputs)
        err = done.stderr.strip()
        assert done.returncode != 0 and "Traceback" not in err, (command, err)
        assert err.endswith("standard output is closed: give an output file"), (command, err)
    assert not (inputs / "c.sqlite").exists()  # refused before the judge


def test_qcare_tables_on_standard_output_get_no_summary_and_no_other_output(
    tmp_path: Path,
) -> None:
    data = Path(__file__).resolve().parents[1] / "qcare" / "data" / "release"
    csvs = " ".join(f"'{p}'" for p in sorted(data.glob("[[]*[]]test-close_ended*.csv")))
    done = _sh(f"$U qcare import {csvs} -o h.jsonl --table -", tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("Group,LLM,Metric"), done.stderr
    assert "imported" in done.stderr
    published = sorted(data.glob("*query_level_results.json"))[0]
    done = _sh(f"$U qcare published '{published}' --table -", tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("Group,LLM,Metric"), done.stderr
    assert done.stderr.startswith("read ")
    done = _sh(f"$U qcare import {csvs} -o - --table t.csv > t.csv", tmp_path)
    assert done.returncode == 2 and "standard output is the input --table" in done.stderr


def test_an_hf_dataset_output_may_end_in_a_slash(inputs: Path) -> None:
    pytest.importorskip("datasets")
    done = _sh(f"{CONTEXTS} -o hf:ds/", inputs)
    assert done.returncode == 0, done.stderr
    assert (inputs / "ds" / "dataset_info.json").is_file()


def test_an_hf_dataset_is_written_with_standard_error_closed(inputs: Path) -> None:
    pytest.importorskip("datasets")
    done = _sh(f"{CONTEXTS} -o hf:ds 2>&-", inputs)
    assert done.returncode == 0 and done.stdout == "", done.stdout
    assert (inputs / "ds" / "dataset_info.json").is_file()


def test_an_output_that_is_a_link_is_written_through_it(inputs: Path) -> None:
    """``-o LINK`` writes the link's target, as ``>`` would, and the link stays a link, for the
    atomic writers (contexts) and the resumable ones (annotate); a link to an input is still
    refused as that input."""
    (inputs / "kept").mkdir()
    (inputs / "kept" / "ctx.jsonl").write_text("old\n")
    (inputs / "ctx.jsonl").symlink_to("kept/ctx.jsonl")
    done = _sh(f"{CONTEXTS} -o ctx.jsonl", inputs)
    assert done.returncode == 0, done.stderr
    assert (inputs / "ctx.jsonl").is_symlink()
    assert len((inputs / "kept" / "ctx.jsonl").read_text().splitlines()) == 2
    _judge_values(inputs)
    (inputs / "labelled.jsonl").symlink_to("kept/labelled.jsonl")  # dangling: > creates it
    judge = "--judge precomputed:vals.jsonl --steps abstain"
    done = _sh(f"$U annotate ctx.jsonl -o labelled.jsonl {judge}", inputs)
    assert done.returncode == 0, done.stderr
    assert (inputs / "labelled.jsonl").is_symlink()
    assert len((inputs / "kept" / "labelled.jsonl").read_text().splitlines()) == 2
    (inputs / "run-link.txt").symlink_to("run.txt")
    done = _sh(f"{CONTEXTS} -o run-link.txt", inputs)
    assert done.returncode == 2 and "the output names the input RUN" in done.stderr


def test_a_command_run_again_in_one_process_reads_its_own_standard_input(inputs: Path) -> None:
    """Standard input read by one in-process command is not served to the next one after the
    caller points descriptor 0 at another file."""
    (inputs / "run2.txt").write_text("q1 Q0 d3 1 2.0 r\nq1 Q0 d1 2 1.0 r\nq2 Q0 d2 1 2.0 r\n")
    script = (
        "import os, sys\n"
        "from udcg.cli.main import main\n"
        "for name in ('run.txt', 'run2.txt'):\n"
        "    fd = os.open(name, os.O_RDONLY); os.dup2(fd, 0); os.close(fd)\n"
        "    main(['trec', 'qrels.txt', '-', '-m', 'RR'])\n"
    )
    done = _sh(f'{sys.executable} -c "{script}"', inputs)
    assert done.returncode == 0, done.stderr
    mean = [line for line in done.stdout.splitlines() if line.startswith("RR\tall")]
    assert mean == ["RR\tall\t1.0000", "RR\tall\t0.7500"], done.stdout
