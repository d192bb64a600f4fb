"""Hostile replies of an OpenAI-compatible server, and hostile text in a contexts file: an API
key the server quotes back, JSON nested deeper than Python decodes, a lone surrogate
(``"\\ud800"``), terminal escape sequences, and a failing server under ``qcare label``. Each is
one line (``failed:``/``error:``) or a counted, retried model reply, never a traceback, never
the key.

Loopback servers only (the scripted server of tests/judge/test_openai_backend.py).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.judge.test_openai_backend import ScriptedServer, _chat_reply, _fast, _openai_logprobs
from udcg.cli.annotate import main as annotate_main
from udcg.cli.batch import main as batch_main
from udcg.cli.probe import main as probe_main
from udcg.cli.qcare import main as qcare_main
from udcg.errors import UDCGInputError, UDCGWarning
from udcg.io.contexts.jsonl import read_contexts
from udcg.judge.openai_backend import JudgeServerError

KEY = "sk-SECRETKEY12345"
MODELS = {"object": "list", "data": [{"id": "m"}]}
CONTEXT = {
    "qid": "q1",
    "question": "What is the capital of France?",
    "answers": ["Paris"],
    "passages": [{"doc_id": "a", "text": "Paris is the capital of France."}],
    "outcomes": {"gen": {"answer": "The capital of France is Paris."}},
}


def _serve(chat):
    """``GET /v1/models`` answered, every other request by ``chat(body, headers)``."""

    def reply(path: str, body: Any, headers: dict[str, str]):
        if body is None:
            return 200, {}, MODELS
        return chat(body, headers)

    return reply


def _contexts(tmp_path: Path, context: dict[str, Any] = CONTEXT) -> str:
    path = tmp_path / "contexts.jsonl"
    path.write_text(json.dumps(context) + "\n", encoding="utf-8")
    return str(path)


def _annotate(tmp_path: Path, url: str, *extra: str) -> int:
    judge = ["--judge", f"openai:m@{url}", "--judge-option", "abstain_token=NO"]
    files = ["-o", str(tmp_path / "out.jsonl"), "--cache", str(tmp_path / "judge.sqlite")]
    return annotate_main([_contexts(tmp_path), *files, *judge, "--max-retries", "0", *extra])


def _one_failed_line(err: str, prog: str) -> str:
    lines = [line for line in err.splitlines() if "contexts:" not in line]
    assert len(lines) == 1 and lines[0].startswith(f"udcg {prog}: failed: "), err
    return lines[0]


# -- the API key a server quotes back ----------------------------------------------------------


def _echo_key(status: int, pad: int = 0):
    """HTTP ``status`` whose body quotes the Authorization header after ``pad`` characters."""
    return _serve(lambda body, headers: (status, {}, {"e": "x" * pad + headers["authorization"]}))


def test_a_key_the_server_quotes_is_masked_in_every_retry_warning(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ScriptedServer(_echo_key(503)) as server:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(JudgeServerError) as error:
                _fast(server.url, max_retries=1).generate([[{"role": "user", "content": "x"}]])
    notices = [str(w.message) for w in caught if issubclass(w.category, UDCGWarning)]
    assert len(notices) == 1 and "attempt 1 of 2 failed" in notices[0]
    for text in (*notices, str(error.value)):
        assert "Bearer ***" in text and "SECRET" not in text


def test_a_key_at_the_cut_of_the_quoted_reply_leaves_no_prefix(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ScriptedServer(_echo_key(400, pad=280)) as server:  # the key spans character 300
        with pytest.raises(JudgeServerError) as error:
            _fast(server.url).generate([[{"role": "user", "content": "x"}]])
    assert "sk-S" not in str(error.value) and "sk-S" not in error.value.reply


def test_probe_masks_a_key_the_server_quotes(monkeypatch, capsys) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ScriptedServer(_echo_key(503)) as server:
        assert probe_main(["--judge", f"openai:m@{server.url}", "--max-retries", "1"]) == 0
    out, err = capsys.readouterr()
    assert "attempt 1 of 2 failed" in err and "Bearer ***" in out + err
    assert "SECRET" not in out + err


def test_a_key_quoted_as_json_escapes_it_is_masked(monkeypatch) -> None:
    """A server that writes ``/`` as ``\\/`` (PHP, some Java encoders) quotes the key in a form
    other than the one sent: masked too."""
    key = "sk-SECRET/KEY/12345"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    escaped = key.replace("/", "\\/")

    def chat(body, headers):
        return 401, {}, ('{"e": "' + escaped + '"}').encode()

    with ScriptedServer(_serve(chat)) as server:
        with pytest.raises(JudgeServerError) as error:
            _fast(server.url).generate([[{"role": "user", "content": "x"}]])
    assert "SECRET" not in str(error.value) and "***" in str(error.value)


def test_probe_masks_a_key_quoted_in_a_reply_it_takes(monkeypatch, capsys) -> None:
    """A key quoted in the text or the top tokens of a 200 reply (not an HTTP error)."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)

    def chat(body, headers):
        said = headers["authorization"]
        top = [{"token": said, "logprob": -0.1, "bytes": None}]
        first = {"token": said, "logprob": -0.1, "bytes": None, "top_logprobs": top}
        message = {"role": "assistant", "content": said}
        choice = {"index": 0, "message": message, "logprobs": {"content": [first]}}
        return 200, {}, {"id": "x", "model": "m", "choices": [{**choice, "finish_reason": "stop"}]}

    with ScriptedServer(_serve(chat)) as server:
        for form in ("text", "json"):
            probe_main(["--judge", f"openai:m@{server.url}", "--format", form])
            out, err = capsys.readouterr()
            assert "SECRET" not in out + err, form


# -- JSON nested deeper than Python decodes ----------------------------------------------------

DEEP = b"[" * 5000 + b"]" * 5000


def test_annotate_against_a_deeply_nested_reply_is_one_failed_line(tmp_path, capsys) -> None:
    with ScriptedServer(_serve(lambda body, headers: (200, {}, DEEP))) as server:
        assert _annotate(tmp_path, server.url, "--steps", "abstain") == 1
    line = _one_failed_line(capsys.readouterr().err, "annotate")
    assert line.endswith("/chat/completions: malformed JSON reply (HTTP 200): nested too deeply")


def test_probe_lists_a_deeply_nested_reply_as_failed_checks(capsys) -> None:
    with ScriptedServer(_serve(lambda body, headers: (200, {}, DEEP))) as server:
        assert probe_main(["--judge", f"openai:m@{server.url}", "--max-retries", "0"]) == 0
    out, err = capsys.readouterr()
    failed = [line for line in out.splitlines() if line.startswith("failed check")]
    assert len(failed) == 4 and all(line.endswith("nested too deeply") for line in failed)
    assert "Traceback" not in err


# -- a lone surrogate in a server's reply or a contexts line -----------------------------------


def test_a_reply_holding_a_lone_surrogate_is_a_malformed_reply(tmp_path, capsys) -> None:
    """json.dumps writes ``"\\ud800"`` for the lone surrogate, a pair of escapes for 😀."""

    def chat(body: Any, headers: dict[str, str]):
        pair = body["messages"][-1]["content"] == "x"
        return 200, {}, _chat_reply("ok 😀" if pair else "Paris \ud800")

    with ScriptedServer(_serve(chat)) as server:
        assert _fast(server.url).generate([[{"role": "user", "content": "x"}]]) == ["ok 😀"]
        assert _annotate(tmp_path, server.url, "--steps", "outcomes") == 1
    line = _one_failed_line(capsys.readouterr().err, "annotate")
    assert (
        "malformed JSON reply (HTTP 200): field 'choices[0].message.content' holds a lone" in line
    )


SURROGATE_LINE = json.dumps({**CONTEXT, "passages": [{"doc_id": "a", "text": "Paris \ud800"}]})


def test_the_contexts_reader_refuses_a_lone_surrogate_at_its_field(tmp_path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(CONTEXT) + "\n" + SURROGATE_LINE + "\n", encoding="utf-8")
    with pytest.raises(UDCGInputError) as error:
        list(read_contexts(path))
    assert str(error.value).startswith(f"{path}:2: field 'passages[0].text': holds a lone")


@pytest.mark.parametrize("command", ["annotate", "batch export"])
def test_commands_refuse_a_contexts_line_holding_a_lone_surrogate(tmp_path, capsys, command):
    path = tmp_path / "c.jsonl"
    path.write_text(SURROGATE_LINE + "\n", encoding="utf-8")
    judge = ["--judge", "openai:m@http://127.0.0.1:9/v1", "--judge-option", "abstain_token=NO"]
    args = [str(path), "-o", str(tmp_path / "out.jsonl"), *judge, "--steps", "abstain"]
    main = annotate_main if command == "annotate" else batch_main
    assert main(args if command == "annotate" else ["export", *args]) == 2
    err = capsys.readouterr().err
    assert err == f"udcg {command}: error: {path}:1: field 'passages[0].text': holds a lone" + (
        " surrogate (a \\ud800-\\udfff escape outside a pair): not Unicode text, UTF-8 cannot"
        " encode it\n"
    )


# -- terminal escape sequences in a server's text ----------------------------------------------


def test_probe_escapes_control_and_format_characters_of_the_server(capsys) -> None:
    body = '{"error": "bad \x1b]0;PWNED\x07\x1b[2J red \u202e reversed \x9b"}'.encode()
    with ScriptedServer(_serve(lambda b, h: (400, {}, body))) as server:
        assert probe_main(["--judge", f"openai:m@{server.url}", "--max-retries", "0"]) == 0
    out = capsys.readouterr().out
    assert all(line.isprintable() for line in out.splitlines())
    assert "failed check      abstention: " in out and "bad \\x1b]0;PWNED\\x07\\x1b[2J" in out
    assert "\\u202e reversed \\x9b" in out


# -- qcare label: a failing server is a failure, not a judge without log-probs ----------------


def _qcare_server(body: Any, headers: dict[str, str]):
    """Decompositions answered; every log-prob (Yes/No) request fails with HTTP 500."""
    if body.get("logprobs"):
        return 500, {}, {"error": "CUDA out of memory"}
    text = json.dumps(body["messages"])
    if "sub-queries" in text:
        return 200, {}, _chat_reply(json.dumps({"subqueries": ["What is the capital?"]}))
    if "claims" in text:
        return 200, {}, _chat_reply(json.dumps({"claims": ["Paris is the capital."]}))
    return 200, {}, _chat_reply("Yes", _openai_logprobs({"Yes": math.log(0.9)}))


def test_qcare_label_fails_when_the_server_fails_the_log_prob_checks(tmp_path, capsys) -> None:
    out = tmp_path / "labelled.jsonl"
    with ScriptedServer(_serve(_qcare_server)) as server:
        args = ["label", _contexts(tmp_path), "-o", str(out), "--answers-from", "gen"]
        status = qcare_main([*args, "--judge", f"openai:m@{server.url}", "--max-retries", "0"])
    err = capsys.readouterr().err
    assert status == 1 and not out.exists()
    line = [line for line in err.splitlines() if ": failed: " in line]
    assert len(line) == 1 and line[0].endswith('HTTP 500: {"error": "CUDA out of memory"}')


def test_probe_reports_a_prompt_over_the_servers_context_as_a_failed_check(capsys) -> None:
    """A server refusing the probe's prompts as over its context: each check fails, listed,
    the probe still answers (status 0)."""
    said = {"message": "This model's maximum context length is 16 tokens. However, you ..."}
    with ScriptedServer(_serve(lambda body, headers: (400, {}, said))) as server:
        assert probe_main(["--judge", f"openai:m@{server.url}", "--max-retries", "0"]) == 0
    failed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("failed")]
    assert failed and all("maximum context length" in line for line in failed)
