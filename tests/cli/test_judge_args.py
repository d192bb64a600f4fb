"""The judge arguments of annotate, qcare label and demo: options as flags or KEY=VALUE, one
line for an option the backend does not take, one line within seconds for a server that does
not answer."""

from __future__ import annotations

import argparse
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from udcg.cli import annotate, demo, qcare
from udcg.cli.judge_args import add_judge_arguments, judge_options, option_value
from udcg.io.contexts.jsonl import Context, Passage, write_contexts

COMMANDS: dict[str, tuple[Callable[[list[str]], int], list[str]]] = {
    "udcg annotate": (annotate.main, ["{inp}", "-o", "{out}"]),
    "udcg qcare": (qcare.main, ["label", "{inp}", "-o", "{out}"]),
    "udcg demo": (demo.main, ["-o", "{out}"]),
}


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_judge_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", 8),
        ("2.5", 2.5),
        ("true", True),
        ("False", False),
        ("null", None),
        ('{"kwargs": {"enable_thinking": false}}', {"kwargs": {"enable_thinking": False}}),
        ("cuda:1", "cuda:1"),
        ("Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-7B"),
        ("", ""),
    ],
)
def test_option_values_read_as_json_when_they_are(text: str, value: Any) -> None:
    got = option_value(text)
    assert got == value and type(got) is type(value)


def test_flags_and_key_value_pairs_make_the_options() -> None:
    args = _args(
        "--judge-option", "timeout=10", "--judge-option", "extra_body={\"a\": 1}",
        "--max-concurrency", "4", "--timeout", "2.5", "--template-tokenizer", "org/tok",
    )  # fmt: skip
    assert judge_options(args) == {
        "timeout": 2.5,  # the flag wins
        "extra_body": {"a": 1},
        "max_concurrency": 4,
        "template_tokenizer": "org/tok",
    }
    assert judge_options(_args()) == {} and _args().judge == "smollm2-135m"


def test_the_options_reach_the_backend(monkeypatch, tmp_path: Path, tag_judge) -> None:
    from udcg.cli.judge_args import open_cli_judge

    seen: dict[str, Any] = {}

    def load(spec: str, **options: Any) -> Any:
        seen.update(spec=spec, **options)
        return tag_judge()

    monkeypatch.setattr("udcg.judge.load_judge", load)
    args = _args(
        "--judge", "openai:m@http://h/v1", "--judge-key", "mine", "--max-retries", "0",
        "--cache", str(tmp_path / "judge.sqlite"),
    )  # fmt: skip
    judge = open_cli_judge(args)
    assert seen == {"spec": "openai:m@http://h/v1", "name": "mine", "max_retries": 0}
    assert judge.cache.path == tmp_path / "judge.sqlite"


def _run(command: str, tmp_path: Path, *extra: str, capsys) -> tuple[int, list[str], float]:
    main, template = COMMANDS[command]
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    context = Context("q", [Passage(doc_id="a", text="Paris.")], question="Q?", answers=["Paris"])
    write_contexts(inp, [context])
    argv = [a.format(inp=inp, out=out) for a in template]
    start = time.monotonic()
    status = main([*argv, *extra])
    elapsed = time.monotonic() - start
    assert not out.exists()
    return status, capsys.readouterr().err.splitlines(), elapsed


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_server_that_does_not_answer_is_one_line_within_seconds(
    command: str, tmp_path: Path, capsys
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    status, lines, elapsed = _run(command, tmp_path, "--judge", f"openai:m@{url}", capsys=capsys)
    assert (status, elapsed < 10) == (2, True)
    assert lines == [
        f"{command}: error: field 'judge': the server at {url} does not answer (connection refused)"
    ]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_option_the_backend_does_not_take_is_one_line(
    command: str, tmp_path: Path, capsys
) -> None:
    status, lines, _ = _run(
        command, tmp_path, "--judge", "openai:m@http://h/v1", "--judge-option", "device=cpu",
        capsys=capsys,
    )  # fmt: skip
    assert status == 2 and len(lines) == 1
    assert lines[0].startswith(
        f"{command}: error: field 'device': not an option of the openai judge; its options: "
        "abstain_token, api_key_env,"
    )


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--timeout", "nan"], "field 'timeout': must be a finite number > 0 of seconds, got nan"),
        (["--deadline", "-1"], "field 'deadline': must be a finite number > 0 of seconds"),
        (["--judge-option", "extra_body=x"], "field 'extra_body': must be a JSON object"),
        (["--judge", "openai:m@http://h:99999/v1"], "field 'base_url': must be an http(s) URL"),
    ],
)
def test_judge_values_that_cannot_work_are_one_line_before_any_work(
    command: str, extra: list[str], message: str, tmp_path: Path, capsys
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"  # never asked: the values are checked first
    status, lines, elapsed = _run(
        command, tmp_path, "--judge", f"openai:m@{url}", *extra, capsys=capsys
    )
    assert (status, len(lines), elapsed < 10) == (2, 1, True), lines
    assert lines[0].startswith(f"{command}: error: {message}")


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("dtype", ["bf17", "int8", "cuda"])
def test_a_local_dtype_that_is_not_a_float_is_one_line_before_any_file(
    command: str, dtype: str, tmp_path: Path, capsys
) -> None:
    status, lines, _ = _run(
        command, tmp_path, "--judge", str(tmp_path / "model"), "--judge-option", f"dtype={dtype}",
        "--cache", str(tmp_path / "judge.sqlite"), capsys=capsys,
    )  # fmt: skip
    assert (status, len(lines)) == (2, 1), lines
    assert lines[0] == (
        f"{command}: error: field 'dtype': must be a floating-point torch dtype (float32, float,"
        f" bfloat16, float16, half, float64, double), got '{dtype}'"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_piped_precomputed_judge_needs_a_key_and_no_ray(
    command: str, tmp_path: Path, capsys
) -> None:
    """``precomputed:<(...)`` would store its labels under the pipe's name (``63``), the
    same for every pipe; Ray workers would open the pipe again. Both are refused before any
    work."""
    fifo = tmp_path / "values"
    os.mkfifo(fifo)
    status, lines, _ = _run(command, tmp_path, "--judge", f"precomputed:{fifo}", capsys=capsys)
    assert (status, len(lines)) == (2, 1), lines
    assert lines[0] == (
        f"{command}: error: field 'judge': {fifo} is not a regular file: name the labels of a "
        "piped precomputed judge with --judge-key (its name 'values' would be every pipe's)"
    )
    ray = ["--judge-key", "mine", "--engine", "ray"]
    status, lines, _ = _run(
        command, tmp_path, "--judge", f"precomputed:{fifo}", *ray, capsys=capsys
    )
    assert status == 2 and "each Ray worker opens the precomputed file again" in lines[-1]
