"""``udcg probe``: against the real llama-cpp-python server of the tests and scripted fakes of a
vLLM-like server and a chat-only server without log-probs."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.judge.test_openai_backend import (
    ScriptedServer,
    _chat_reply,
    _openai_logprobs,
    transformers_server,  # noqa: F401 (a fixture)
)
from tests.local_servers import servers
from udcg.cli.probe import main
from udcg.judge.openai_replies import unlisted_logprob

EXACT_STEPS = {
    "abstention first_token": "exact",
    "abstention sequence": "no (local backend only)",
    "answer_likelihood": "untested (pass --template-tokenizer)",
    "relevance llm": "exact",
    "outcomes": "yes",
    "Q-CARE generate_json": "yes (JSON output)",
}


def _probe(capsys, url: str, *extra: str) -> tuple[int, Any, str]:
    """(status, the JSON report or None, stderr) of ``udcg probe --format json``."""
    status = main(["--judge", f"openai:m@{url}", "--format", "json", "--max-retries", "0", *extra])
    out, err = capsys.readouterr()
    return status, json.loads(out) if out else None, err


def _vllm_like(path: str, body: Any, headers: dict[str, str]) -> tuple[int, dict, Any]:
    """Models, chat log-probs with NO, Yes and No in the top 20, /tokenize, echo, JSON output."""
    if body is None and path == "/v1/models":
        return 200, {}, {"object": "list", "data": [{"id": "m"}]}
    if path == "/tokenize":
        ids = {"NO-RESPONSE": [7, 8, 9], "": []}[body["prompt"]]
        return 200, {}, {"tokens": ids}
    if path == "/detokenize":
        return 200, {}, {"prompt": "NO"}
    if path == "/v1/completions":
        assert body["echo"] is True
        tokens = ["The", " capital", " of", " France", " is", " Paris"]
        logprobs = {
            "tokens": tokens,
            "token_logprobs": [None, -3.0, -0.5, -1.0, -0.2, -0.7],
            "text_offset": [sum(map(len, tokens[:i])) for i in range(len(tokens))],
        }
        return 200, {}, {"choices": [{"text": "", "logprobs": logprobs}]}
    if "response_format" in body:
        return 200, {}, _chat_reply('{"answer": "yes"}')
    top = {"NO": math.log(0.4), "Yes": math.log(0.3), "No": math.log(0.2), "The": math.log(0.1)}
    return 200, {}, _chat_reply("NO", _openai_logprobs(top))


def test_probe_of_a_vllm_like_server_finds_every_step_exact(capsys):
    with ScriptedServer(_vllm_like) as server:
        status, report, err = _probe(capsys, server.url)
    assert status == 0 and err == ""
    assert report["steps"] == EXACT_STEPS
    assert report["models"] == ["m"] and report["model_listed"] is True
    assert (
        report["abstain_token"] == "NO" and report["abstain_token_source"] == "tokenizer endpoint"
    )
    assert report["abstain_logprob"] == pytest.approx(math.log(0.4))
    assert report["top_logprobs_returned"] == 4 and report["echo_logprobs"] is True
    assert report["errors"] == {}


def test_a_log_prob_of_minus_infinity_is_written_as_null_in_strict_json(capsys):
    """JSON has no infinity: a probability of 0 (log-prob -inf) is null, not ``-Infinity``."""

    def zero(path, body, headers):
        if path == "/v1/chat/completions" and "response_format" not in body:
            top = {"NO": -math.inf, "Yes": -math.inf, "No": 0.0}
            return 200, {}, _chat_reply("No", _openai_logprobs(top))
        return _vllm_like(path, body, headers)

    with ScriptedServer(zero) as server:
        assert main(["--judge", f"openai:m@{server.url}", "--format", "json"]) == 0
    out = capsys.readouterr().out

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in {out}")

    report = json.loads(out, parse_constant=refuse)
    assert report["abstain_in_top"] is True and report["abstain_logprob"] is None
    assert report["smallest_top_logprob"] is None


def _chat_only(path: str, body: Any, headers: dict[str, str]) -> tuple[int, dict, Any]:
    """What transformers serve answers: no log-probs, no /completions, no tokenizer, and (here)
    a refusal of response_format."""
    if body is None:
        return 200, {}, {"object": "list", "data": [{"id": "other"}]}
    if path != "/v1/chat/completions":
        return 404, {}, {"detail": "Not Found"}
    if "response_format" in body:
        return 400, {}, {"error": "response_format is not supported"}
    return 200, {}, _chat_reply("hello")


def test_probe_of_a_chat_only_server_says_which_steps_it_cannot_serve(capsys):
    with ScriptedServer(_chat_only) as server:
        status, report, _ = _probe(capsys, server.url)
        assert main(["--judge", f"openai:m@{server.url}", "--max-retries", "0"]) == 0
    text = capsys.readouterr().out
    assert status == 0
    steps = report["steps"]
    assert steps["abstention first_token"] == "no (no log-probs)"
    assert steps["answer_likelihood"] == "no" and steps["outcomes"] == "yes"
    assert steps["Q-CARE generate_json"] == "yes (JSON by prompt; response_format refused)"
    assert report["model_listed"] is False and report["abstain_token_source"] == "assumed"
    assert set(report["errors"]) == {"abstention", "relevance", "echo", "json_output"}
    assert "listed by /v1/models: NO (check the model name)" in text
    assert "| m | no (no log-probs) | no (local backend only) | no |" in text


def test_probe_of_an_unreachable_server_or_a_local_spec_is_one_line(capsys):
    url = f"http://127.0.0.1:{servers.free_port()}/v1"
    status, report, err = _probe(capsys, url)
    assert status == 2 and report is None
    assert err == (
        f"udcg probe: error: field 'judge': the server at {url} does not answer"
        " (connection refused)\n"
    )
    assert main(["--judge", "smollm2-135m"]) == 2
    assert "probes a server judge" in capsys.readouterr().err
    assert main(["--judge", f"openai:m@{url}", "--cache", "x.sqlite"]) == 2
    assert "--cache do not apply" in capsys.readouterr().err


def test_probe_of_the_local_llama_cpp_python_server(llama_server, capsys):
    status = main(["--judge", f"openai:smollm2@{llama_server}", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0 and report["model_listed"] is True
    assert report["chat_logprobs"] and report["top_logprobs_returned"] == 20
    assert (
        report["abstain_token"] == "NO" and report["abstain_token_source"] == "tokenizer endpoint"
    )
    # the steps follow what was found, whichever side of the top 20 the token falls
    first = report["steps"]["abstention first_token"]
    assert first == ("exact" if report["abstain_in_top"] else "upper bound (token outside top 20)")
    assert report["echo_logprobs"] is True and report["json_output"] == "accepted", report["errors"]
    assert report["steps"]["outcomes"] == "yes" and report["errors"] == {}


def test_probe_of_transformers_serve(transformers_server, capsys):  # noqa: F811
    url, model = transformers_server
    status = main(["--judge", f"openai:{model}@{url}", "--format", "json", "--max-retries", "0"])
    report = json.loads(capsys.readouterr().out)
    # what the server's own list says: transformers 5.24 lists a model served from a folder;
    # 5.20 lists the Hugging Face cache only, and answers 500 without one
    try:
        with urllib.request.urlopen(f"{url}/models") as reply:
            listed = model in {m["id"] for m in json.load(reply)["data"]}
    except urllib.error.HTTPError as error:
        listed = None
        assert report["errors"]["models"] == f"HTTP {error.code}: no model list in the reply"
    assert status == 0 and report["model_listed"] is listed
    assert report["chat_logprobs"] is False and report["generate"] is True
    assert report["steps"]["abstention first_token"] == "no (no log-probs)"
    assert report["steps"]["outcomes"] == "yes" and report["echo_logprobs"] is False


def test_the_report_names_a_refused_reply_and_the_bound_annotate_stores() -> None:
    """A reply refused for another model is not 'no log-probs'; the bound printed is the one
    the judge stores (min(last listed, 1 - their sum)), not the last listed log-prob."""
    from udcg.cli.probe import _text
    from udcg.judge.openai_probe import ServerReport

    base = {"url": "http://h/v1", "model": "other", "top_logprobs_asked": 20}
    refused = ServerReport(**base, errors={"abstention": 'the reply is of model "m"'})
    assert refused.steps()["abstention first_token"] == "no (failed check: abstention)"
    assert "chat log-probs    not read (failed check: abstention)" in _text(refused)
    none = ServerReport(**base, errors={"abstention": "no log-probs"}, no_logprobs=True)
    assert none.steps()["abstention first_token"] == "no (no log-probs)"
    top = {"Yes": math.log(0.6), "No": math.log(0.4)}  # they sum to 1: nothing is left
    bounded = ServerReport(
        **base, chat_logprobs=True, abstain_in_top=False, abstain_token="NO",
        abstain_token_source="given", smallest_top_logprob=min(top.values()),
        abstain_bound=unlisted_logprob(top),
    )  # fmt: skip
    assert "outside the top log-probs (bound: log-prob -inf)" in _text(bounded)
