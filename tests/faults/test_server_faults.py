"""Fault injection against the OpenAI-compatible judge: a tokenizer endpoint that fails, a
server that accepts connections and never answers, and option values that must be one line.

Loopback servers only: the scripted server of tests/judge/test_openai_backend.py, and
:class:`BlackHole`, which answers ``GET /v1/models`` (so the judge's probe passes) and holds
every other request open without a byte of reply.
"""

from __future__ import annotations

import importlib.util
import json
import math
import socket
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.judge.test_openai_backend import ScriptedServer, _chat_reply, _fast, _openai_logprobs
from udcg.cli.annotate import main as annotate_main
from udcg.cli.qcare import main as qcare_main
from udcg.errors import UDCGInputError, UDCGWarning
from udcg.io.contexts.jsonl import Context, Passage, write_contexts
from udcg.judge.cached import CachedJudge
from udcg.judge.openai_backend import JudgeServerError, OpenAIJudge
from udcg.judge.ray_engine import ray_options

# -- finding 6: the abstention token is part of the cache key -----------------------------------

#: First-token log-probs of every abstention prompt: "NO" and "N" have different probabilities,
#: so a value computed with one token differs from a value computed with the other.
TOP = {"NO": math.log(0.6), "N": math.log(0.25), "The": math.log(0.1)}


def _tokenizer_server(state: dict[str, Any]):
    """Chat replies with :data:`TOP`; ``/tokenize`` says the marker's first token is ``N``
    while ``state["tokenizer"]`` is ``"up"``, fails with HTTP 500 while it is ``"down"``, and
    fails ``state["fail_first"]`` times before answering."""

    def reply(path: str, body: Any, headers: dict[str, str]):
        if path.endswith("/chat/completions"):
            return 200, {}, _chat_reply(logprobs=_openai_logprobs(TOP))
        if path == "/tokenize":
            if state["tokenizer"] == "down" or state.get("fail_first", 0) > 0:
                state["fail_first"] = state.get("fail_first", 0) - 1
                return 500, {}, {"error": "tokenizer crashed"}
            ids = {"NO-RESPONSE": [5, 6, 7], "": []}[body["prompt"]]
            return 200, {}, {"tokens": ids}
        if path == "/detokenize":
            return 200, {}, {"prompt": {5: "N"}[body["tokens"][0]]}
        return 404, {}, {"detail": "Not Found"}

    return reply


def test_values_computed_with_a_guessed_token_are_not_read_back_once_the_tokenizer_answers(
    tmp_path: Path,
) -> None:
    state = {"tokenizer": "down"}
    cache = tmp_path / "judge.sqlite"
    with ScriptedServer(_tokenizer_server(state)) as server:
        first = CachedJudge(_fast(server.url), cache)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            guessed = first.abstain_prob(["q1", "q2"], ["p1", "p2"])
        np.testing.assert_allclose(guessed, [0.6, 0.6])  # the "NO" token
        first.cache.close()
        asked = server.chat_requests()

        state["tokenizer"] = "up"
        second = CachedJudge(_fast(server.url), cache)
        values = second.abstain_prob(["q1", "q2"], ["p1", "p2"])
        np.testing.assert_allclose(values, [0.25, 0.25])  # the "N" token, asked again
        assert server.chat_requests() == asked + 2
        # a third run with the same tokenizer answer reads the second run's values
        third = CachedJudge(_fast(server.url), cache)
        np.testing.assert_allclose(third.abstain_prob(["q1"], ["p1"]), [0.25])
        assert server.chat_requests() == asked + 2


def test_a_rerun_the_cache_answers_whole_needs_no_server_for_the_token(tmp_path: Path) -> None:
    """The token a run resolved is recorded with the cache: with the server gone, a rerun the
    cache answers whole keys its items with it and makes no request; a miss is the probe's
    one-line error."""
    cache = tmp_path / "judge.sqlite"
    with ScriptedServer(_tokenizer_server({"tokenizer": "up"})) as server:
        url = server.url
        online = CachedJudge(_fast(url), cache).abstain_prob(["q1", "q2"], ["p1", "p2"])
    np.testing.assert_allclose(online, [0.25, 0.25])  # the "N" token
    rerun = CachedJudge(_fast(url, max_retries=0), cache)
    np.testing.assert_array_equal(rerun.abstain_prob(["q1", "q2"], ["p1", "p2"]), online)
    assert rerun.inner_calls == 0
    assert (rerun.cache.hits, rerun.cache.misses) == (2, 0)
    with pytest.raises(UDCGInputError, match="does not answer"):
        rerun.abstain_prob(["q3"], ["p3"])


def test_the_tokenizer_is_retried_before_the_token_is_guessed() -> None:
    state = {"tokenizer": "up", "fail_first": 1}
    with ScriptedServer(_tokenizer_server(state)) as server:
        judge = _fast(server.url, max_retries=2)
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # no guess; the retry notice aside
            warnings.filterwarnings("ignore", message=".*attempt 1 of 3", category=UDCGWarning)
            assert judge.abstain_token_text() == "N"
        assert judge.stats["retries"] == 1
        assert judge.key_settings("abstain_prob") == {
            "abstain_token": "N",
            "unlisted": "min(last,rest)",
        }


def test_a_guessed_token_is_one_warning_line_once_per_judge() -> None:
    with ScriptedServer(_tokenizer_server({"tokenizer": "down"})) as server:
        judge = _fast(server.url, max_retries=0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            judge.abstain_prob(["q1"], ["p1"])
            judge.abstain_prob(["q2"], ["p2"])
        guesses = [w for w in caught if "assuming the first token" in str(w.message)]
        assert len(guesses) == 1 and issubclass(guesses[0].category, UDCGWarning)
        assert "\n" not in str(guesses[0].message)
        assert "cached under that token" in str(guesses[0].message)


# -- finding 14: bounded, visible waits ---------------------------------------------------------


class BlackHole:
    """A loopback server that accepts every connection and reads its request: ``GET
    /v1/models`` is answered (HTTP 200), any other request is held open, unanswered, until
    :meth:`close`. ``held`` counts the requests held."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.held = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> BlackHole:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(0.05)
        data = b""
        with conn:
            while b"\r\n\r\n" not in data and not self._stop.is_set():
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    continue
                if not chunk:
                    return
                data += chunk
            if data.startswith(b"GET "):
                body = json.dumps({"object": "list", "data": [{"id": "m"}]}).encode()
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                    + body
                )
                return
            self.held += 1
            self._stop.wait()


def test_a_server_that_never_answers_fails_at_the_deadline_with_a_notice_per_retry() -> None:
    with BlackHole() as hole:
        judge = OpenAIJudge(
            "m", hole.url, timeout=0.2, max_retries=5, backoff=0.05, max_backoff=0.05,
            deadline=1.0, max_concurrency=4,
        )  # fmt: skip
        start = time.monotonic()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(JudgeServerError, match=r"within the deadline of 1 s") as err:
                judge.generate([[{"role": "user", "content": f"x{i}"}] for i in range(4)])
        elapsed = time.monotonic() - start
    assert elapsed < 10.0, elapsed  # bounded (minutes before); wide for a loaded machine
    assert "timed out after" in str(err.value) and "/chat/completions" in str(err.value)
    notices = [str(w.message) for w in caught if issubclass(w.category, UDCGWarning)]
    # four requests failing together: one line per attempt number, not one per request
    assert notices and notices[0].endswith("s") and len(notices) == len(set(notices))
    assert "attempt 1 of 6 failed (timed out after 0.2 s); next attempt in" in notices[0]
    assert len(notices) <= 5 and all("\n" not in n for n in notices)


def _contexts(path: Path) -> Path:
    write_contexts(
        path, [Context("q1", [Passage(text="Paris.")], question="Capital?", answers=["Paris"])]
    )
    return path


def test_annotate_against_a_server_that_never_answers_says_so_and_stops(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    contexts = _contexts(tmp_path / "in.jsonl")
    with BlackHole() as hole:
        start = time.monotonic()
        status = annotate_main(
            [
                str(contexts), "-o", str(tmp_path / "out.jsonl"), "--steps", "abstain",
                "--judge", f"openai:m@{hole.url}", "--judge-option", "abstain_token=NO",
                "--timeout", "0.2", "--deadline", "1", "--judge-option", "backoff=0.05",
                "--cache", str(tmp_path / "c.sqlite"),
            ]
        )  # fmt: skip
        elapsed = time.monotonic() - start
        assert hole.held >= 2
    err = capsys.readouterr().err.splitlines()
    assert status == 1 and elapsed < 15.0, (status, elapsed, err)  # was minutes
    assert err[0].startswith("udcg annotate: warning: ") and "attempt 1 of 6 failed" in err[0]
    assert err[-1].startswith("udcg annotate: failed: ") and "deadline of 1 s" in err[-1]
    assert not any("Traceback" in line for line in err)


# -- finding 12: option values that are one line, exit 2 ----------------------------------------


BAD_OPTIONS = [
    (["--timeout", "nan"], "field 'timeout': must be a finite number > 0 of seconds, got nan"),
    (["--timeout", "inf"], "field 'timeout': must be a finite number > 0 of seconds, got inf"),
    (["--timeout", "-1"], "field 'timeout': must be a finite number > 0 of seconds, got -1.0"),
    (["--deadline", "0"], "field 'deadline': must be a finite number > 0 of seconds, got 0.0"),
    (["--judge-option", "extra_body=notjson"], "field 'extra_body': must be a JSON object"),
    (["--judge-option", "extra_body=[1]"], "field 'extra_body': must be a JSON object"),
    (["--max-new-tokens", "0"], "field '--max-new-tokens': must be a positive integer, got 0"),
    (["--max-new-tokens", "-1"], "field '--max-new-tokens': must be a positive integer, got -1"),
]
BAD_URLS = [
    ("http://[::1:8000/v1", "Invalid IPv6 URL"),
    ("http://127.0.0.1:99999/v1", "Port out of range"),
    ("http://127.0.0.1:port/v1", "Port could not be cast"),
]


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS)
def test_bad_judge_values_are_one_line_before_any_request(
    options: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    contexts = _contexts(tmp_path / "in.jsonl")
    with ScriptedServer(lambda *_: (500, {}, {})) as server:
        status = annotate_main(
            [
                str(contexts), "-o", str(tmp_path / "out.jsonl"), "--steps", "abstain,outcomes",
                "--judge", f"openai:m@{server.url}", "--cache", str(tmp_path / "c.sqlite"),
                *options,
            ]
        )  # fmt: skip
        assert server.requests == []
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith("udcg annotate: error: ") and message in err


@pytest.mark.parametrize(("url", "message"), BAD_URLS)
def test_a_judge_url_that_does_not_parse_is_one_line(
    url: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    contexts = _contexts(tmp_path / "in.jsonl")
    out = str(tmp_path / "out.jsonl")
    judge = ["--judge", f"openai:m@{url}", "--cache", str(tmp_path / "c.sqlite")]
    assert annotate_main([str(contexts), "-o", out, *judge]) == 2
    assert qcare_main(["label", str(contexts), "-o", out, *judge]) == 2
    for line, prog in zip(capsys.readouterr().err.splitlines(), ("annotate", "qcare"), strict=True):
        assert line.startswith(f"udcg {prog}: error: field 'base_url': must be an http(s) URL")
        assert message in line
    with pytest.raises(UDCGInputError, match=message):
        OpenAIJudge("m", url)


@pytest.mark.skipif(
    importlib.util.find_spec("grpc") is not None, reason="the Ray client extra is installed"
)
def test_a_ray_client_address_without_the_client_extra_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(UDCGInputError, match=r'pip install "ray\[client\]"'):
        ray_options({"address": "ray://127.0.0.1:10001"})
    contexts = _contexts(tmp_path / "in.jsonl")
    status = annotate_main(
        [
            str(contexts), "-o", str(tmp_path / "out.jsonl"), "--judge", "openai:m@http://127.0.0.1:9",
            "--engine", "ray", "--ray-address", "ray://127.0.0.1:10001",
        ]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1
    assert err.startswith("udcg annotate: error: field '--ray-address': ray://127.0.0.1:10001")
    assert 'pip install "ray[client]"' in err


def test_batch_export_without_a_token_on_a_server_that_never_answers_is_bounded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from udcg.cli.batch import main as batch_main

    contexts = _contexts(tmp_path / "in.jsonl")
    with BlackHole() as hole:
        start = time.monotonic()
        status = batch_main(
            [
                "export", str(contexts), str(tmp_path / "req.jsonl"), "--steps", "abstain",
                "--judge", f"openai:m@{hole.url}", "--timeout", "0.2", "--deadline", "0.5",
                "--judge-option", "backoff=0.05", "--cache", str(tmp_path / "c.sqlite"),
            ]
        )  # fmt: skip
        elapsed = time.monotonic() - start
    err = capsys.readouterr().err.splitlines()
    assert status == 2 and elapsed < 15.0, (status, elapsed, err)  # was 121 s
    assert any("/tokenize: attempt 1 of 6 failed (timed out after 0.2 s)" in line for line in err)
    assert err[-1].startswith("udcg batch export: error: field 'abstain_token': the first token")
