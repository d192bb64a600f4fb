"""RayJudge against the single-process judge built from the same spec: the same values, bound
masks, name and fingerprint, on a local Ray instance (2 CPUs, started once for the module);
a worker killed in the middle of a request changes nothing in the output (restarted by Ray, or
past its restarts, its pieces sent to the other worker), the workers never open the cache, and a
rerun answers from it."""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.judge.test_openai_backend import ScriptedServer
from udcg.errors import UDCGInputError, UDCGServiceError
from udcg.judge import load_judge
from udcg.judge.base import upper_bounds
from udcg.judge.cached import CachedJudge
from udcg.judge.ray_engine import RayJudge, RayOptions, engine_options, ray_options

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _digest(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


class ChatServer(ScriptedServer):
    """A loopback OpenAI-compatible chat server, deterministic per prompt: generation replies
    ``reply-<hash>``, log-prob requests give Yes/No log-probs from the hash (``No`` left out of
    the top tokens for every third hash: an upper bound). Each request waits ``delay`` s; the
    chat requests after the first ``hold_from`` wait until ``release`` is set (``held``: how
    many wait); ``chats`` counts the chat requests received."""

    def __init__(self, delay: float = 0.0, hold_from: float = math.inf) -> None:
        self.delay, self.hold_from, self.held = delay, hold_from, 0
        self.release = threading.Event()
        super().__init__(self._answer)
        self.start()

    def _answer(self, path: str, body: Any, headers: dict[str, str]) -> Any:
        if body is None:
            return 200, {}, {"object": "list", "data": [{"id": "m"}]}
        if self.chats > self.hold_from and not self.release.is_set():
            with self.lock:
                self.held += 1
            self.release.wait()
        time.sleep(self.delay)
        return 200, {}, self.reply(body)

    @property
    def chats(self) -> int:
        return self.chat_requests()

    @staticmethod
    def reply(body: dict[str, Any]) -> dict[str, Any]:
        h = _digest(json.dumps(body["messages"]))
        logprobs = None
        if body.get("logprobs"):
            top = {"Yes": -(h % 97) / 20 - 0.75, "Other": -9.0}  # a distribution: sum <= 1
            if h % 3:
                top["No"] = -(h % 89) / 20 - 0.75
            logprobs = {
                "content": [
                    {
                        "token": "Yes",
                        "logprob": top["Yes"],
                        "top_logprobs": [{"token": t, "logprob": v} for t, v in top.items()],
                    }
                ]
            }
        message = {"role": "assistant", "content": f"reply-{h}"}
        return {"choices": [{"index": 0, "message": message, "logprobs": logprobs}]}


def _prompts(n: int) -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": f"is passage {i} relevant?"}] for i in range(n)]


@pytest.fixture
def precomputed(tmp_path: Path) -> tuple[str, list[str], list[str]]:
    rng = random.Random(0)
    questions = [f"question {i % 5}" for i in range(23)]
    passages = [f"passage {i}" for i in range(23)]
    rows = [
        {"question": q, "passage": p, "abstain_prob": rng.random(), "answer_prob": rng.random()}
        for q, p in zip(questions, passages, strict=True)
    ]
    path = tmp_path / "llama3.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return f"precomputed:{path}", questions, passages


def test_precomputed_values_and_identity_match_the_single_process_judge(precomputed) -> None:
    spec, questions, passages = precomputed
    local = load_judge(spec)
    judge = RayJudge(spec, engine=RayOptions(workers=2, piece_size=3))
    try:
        assert (
            (judge.name, judge.fingerprint)
            == (local.name, local.fingerprint)
            == (
                "llama3",
                local.fingerprint,
            )
        )
        seen: dict[int, float] = {}
        out = judge.abstain_prob(
            questions, passages, on_result=lambda i, v, b: seen.setdefault(i, v)
        )
        expected = local.abstain_prob(questions, passages)
        assert np.array_equal(out, expected) and not upper_bounds(out).any()
        assert seen == dict(enumerate(expected.tolist()))  # once per item, the same value
        answers = [["x"]] * len(questions)
        assert np.array_equal(
            judge.answer_prob(questions, passages, answers),
            local.answer_prob(questions, passages, answers),
        )
        assert len(judge.abstain_prob([], [])) == 0
    finally:
        judge.close()


def test_an_error_in_a_worker_is_raised_as_itself(precomputed) -> None:
    spec, questions, _ = precomputed
    judge = RayJudge(spec, engine=RayOptions(workers=1))
    try:
        with pytest.raises(UDCGInputError, match="no precomputed"):
            judge.abstain_prob(questions[:2], ["unknown passage", "another"])
    finally:
        judge.close()
    with pytest.raises(UDCGInputError, match="no such file"):
        RayJudge("precomputed:/nonexistent/file.jsonl", engine=RayOptions(workers=1))


def test_a_pool_of_servers_gives_the_single_server_results_and_fingerprint() -> None:
    first, second = ChatServer(), ChatServer()
    try:
        spec = f"openai:m@{first.url}"
        engine = RayOptions(workers=3, servers=(first.url, second.url), piece_size=2)
        judge = RayJudge(spec, options={"max_concurrency": 2}, engine=engine)
        local = load_judge(spec, max_concurrency=2)
        assert (judge.name, judge.fingerprint) == (local.name, local.fingerprint)
        prompts = _prompts(17)
        bounds: dict[int, bool] = {}
        with pytest.warns(UserWarning, match="upper bound"):
            expected = local.yes_prob(prompts)
        out = judge.yes_prob(prompts, on_result=lambda i, v, b: bounds.setdefault(i, b))
        assert np.array_equal(out, expected)
        assert np.array_equal(upper_bounds(out), upper_bounds(expected))
        assert upper_bounds(out).any() and not upper_bounds(out).all()
        assert [bounds[i] for i in range(17)] == upper_bounds(expected).tolist()
        assert judge.generate(prompts, max_new_tokens=4) == local.generate(prompts, 4)
        assert first.chats > 0 and second.chats > 0  # both servers of the pool were used
        judge.close()
    finally:
        first.close()
        second.close()


def _kill_in_a_request(server: ChatServer, pid: int) -> threading.Thread:
    """A thread that SIGKILLs process ``pid`` once both workers wait in a request of
    ``server`` (its own included), then lets the held requests go on."""

    def kill() -> None:
        while server.held < 2:
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        server.release.set()

    killer = threading.Thread(target=kill)
    killer.start()
    return killer


def _open_files(pid: int) -> set[str]:
    """The files process ``pid`` holds open."""
    fds = Path(f"/proc/{pid}/fd")
    return {os.path.realpath(fd) for fd in fds.iterdir()}


def _replies(prompts: list[list[dict[str, str]]]) -> list[str]:
    return [ChatServer.reply({"messages": p})["choices"][0]["message"]["content"] for p in prompts]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_a_worker_killed_in_a_request_is_restarted_and_the_driver_alone_writes_the_cache(
    tmp_path,
) -> None:
    server = ChatServer(delay=0.02, hold_from=4)
    try:
        spec = f"openai:m@{server.url}"
        options = {"max_concurrency": 1}
        engine = RayOptions(workers=2, piece_size=2, in_flight=1)
        prompts = _prompts(24)
        ray_judge = RayJudge(spec, options=options, engine=engine)
        victim = ray_judge.pids[0]
        killer = _kill_in_a_request(server, victim)
        cached = CachedJudge(ray_judge, tmp_path / "judge.sqlite")
        assert cached.generate(prompts, max_new_tokens=4) == _replies(prompts)
        killer.join()
        assert server.chats > len(prompts)  # the killed worker's request was sent again
        pids = [ray.get(actor.identity.remote())[2] for actor in ray_judge.actors]
        assert pids[0] != victim and pids[1] == ray_judge.pids[1]  # restarted by Ray
        cache_files = {str(path.resolve()) for path in tmp_path.iterdir()}
        assert any(name.endswith("judge.sqlite") for name in cache_files)
        assert all(not (_open_files(pid) & cache_files) for pid in pids)
        assert _open_files(os.getpid()) & cache_files  # the driver's own connection
        ray_judge.close()

        rerun = CachedJudge(load_judge(spec, **options), tmp_path / "judge.sqlite")
        before = server.chats
        assert rerun.generate(prompts, max_new_tokens=4) == _replies(prompts)
        assert rerun.cache.hits == len(prompts) and server.chats == before
    finally:
        server.close()


def test_the_pieces_of_a_worker_past_its_restarts_go_to_the_live_ones() -> None:
    server = ChatServer(delay=0.02, hold_from=4)
    try:
        engine = RayOptions(workers=2, piece_size=2, in_flight=2, max_restarts=0)
        judge = RayJudge(f"openai:m@{server.url}", options={"max_concurrency": 1}, engine=engine)
        prompts = _prompts(20)
        killer = _kill_in_a_request(server, judge.pids[0])
        seen: list[int] = []
        assert judge.generate(prompts, 4, on_result=lambda i, v, b: seen.append(i)) == (
            _replies(prompts)
        )
        killer.join()
        assert sorted(seen) == list(range(20))  # each item reported once
        assert server.chats > len(prompts)
        with pytest.raises(ray.exceptions.RayActorError):  # ActorDiedError from Ray 2.11
            ray.get(judge.actors[0].identity.remote())
        assert judge.generate(prompts[:5], 4) == _replies(prompts[:5])  # the live one
        assert judge.key_settings("yes_prob") == {"unlisted": "min(last,rest)"}
        ray.kill(judge.actors[1], no_restart=True)
        with pytest.raises(UDCGServiceError, match="every Ray worker of judge 'm' died"):
            judge.generate(prompts[:5], 4)
        judge.close()
    finally:
        server.close()


class FirstHeldServer(ChatServer):
    """A :class:`ChatServer` that holds the request of prompt 0 until ``release`` is set."""

    def _answer(self, path: str, body: Any, headers: dict[str, str]) -> Any:
        if body is not None and body["messages"] == _prompts(1)[0]:
            self.release.wait(timeout=30)
        return super()._answer(path, body, headers)


def test_a_slow_piece_holds_back_no_other() -> None:
    server = FirstHeldServer()
    try:
        engine = RayOptions(workers=2, piece_size=1, in_flight=1)
        judge = RayJudge(f"openai:m@{server.url}", options={"max_concurrency": 1}, engine=engine)
        prompts = _prompts(8)
        seen: list[int] = []
        came_back = threading.Event()

        def release_once_the_rest_came_back() -> None:
            deadline = time.monotonic() + 15
            while len(seen) < len(prompts) - 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            if sorted(seen) == list(range(1, len(prompts))):
                came_back.set()
            server.release.set()

        releaser = threading.Thread(target=release_once_the_rest_came_back)
        releaser.start()
        out = judge.generate(prompts, 4, on_result=lambda i, v, b: seen.append(i))
        releaser.join()
        judge.close()
        assert out == _replies(prompts)
        # the other worker ran pieces 1-7 while piece 0 waited, and each came back at once
        assert came_back.is_set() and seen[-1] == 0
    finally:
        server.close()


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"workers": 0}, "ray.workers"),
        ({"gpus_per_worker": -1}, "ray.gpus_per_worker"),
        ({"servers": "http://a"}, "ray.servers"),
        ({"address": ""}, "ray.address"),
        ({"nodes": 3}, "ray.nodes"),
    ],
)
def test_a_wrong_ray_option_names_its_field(values: dict[str, Any], field: str) -> None:
    with pytest.raises(UDCGInputError, match=re.escape(f"field '{field}'")):
        ray_options(values, "ray.")


def test_engine_options() -> None:
    assert engine_options("local", {"workers": 2}) is None
    assert engine_options("ray", {"servers": ["http://a/v1"]}) == RayOptions(
        servers=("http://a/v1",)
    )
    with pytest.raises(UDCGInputError, match="field 'engine'"):
        engine_options("spark", {})


def test_evaluate_settings_check_the_engine_and_open_a_ray_judge(precomputed, tmp_path) -> None:
    from udcg.pipeline.benchmark import connect_judge
    from udcg.pipeline.settings import EvaluateSettings

    spec, questions, passages = precomputed
    with pytest.raises(UDCGInputError, match=r"field 'ray\.workers'"):
        EvaluateSettings(judge=spec, engine="ray", ray={"workers": 0})
    with pytest.raises(UDCGInputError, match="field 'ray'"):
        EvaluateSettings(judge=spec, engine="ray", ray=[1])
    settings = EvaluateSettings(
        judge=spec, engine="ray", ray={"workers": 1}, judge_cache=str(tmp_path / "c.sqlite")
    )
    judge = connect_judge(settings)
    assert isinstance(judge.inner, RayJudge) and len(judge.inner.actors) == 1
    assert np.array_equal(
        judge.abstain_prob(questions, passages), load_judge(spec).abstain_prob(questions, passages)
    )
    judge.inner.close()


def _tokenizer_server(first_token: str) -> ScriptedServer:
    """A server whose tokenizer says the first token of NO-RESPONSE is ``first_token``."""

    def reply(path: str, body: Any, headers: dict[str, str]) -> Any:
        if path == "/tokenize":
            return 200, {}, {"tokens": [3, 4] if body["prompt"] else []}
        if path == "/detokenize":
            return 200, {}, {"prompt": first_token}
        return 200, {}, {"object": "list", "data": [{"id": "m"}]}

    return ScriptedServer(reply).start()


def test_the_workers_resolved_abstain_token_is_in_the_key_and_must_agree() -> None:
    servers = [_tokenizer_server("N"), _tokenizer_server("N"), _tokenizer_server("NO")]
    try:
        spec = f"openai:m@{servers[0].url}"
        agree = RayOptions(workers=2, servers=(servers[0].url, servers[1].url))
        judge = RayJudge(spec, engine=agree)
        bound = {"unlisted": "min(last,rest)"}
        assert judge.key_settings("abstain_prob") == {"abstain_token": "N", **bound}
        assert judge.key_settings("yes_prob") == bound
        judge.close()
        differ = RayOptions(workers=2, servers=(servers[0].url, servers[2].url))
        judge = RayJudge(spec, engine=differ)
        with pytest.raises(UDCGInputError, match="resolve abstain_prob differently"):
            judge.key_settings("abstain_prob")
        judge.close()
    finally:
        for server in servers:
            server.close()


def test_a_local_model_on_ray_records_its_batching_and_counts_cut_passages(
    tmp_path: Path, precomputed
) -> None:
    from tests.judge.test_openai_backend import _tiny_chat_model

    _tiny_chat_model(tmp_path)
    options = {"batch_size": 3, "max_passage_tokens": 2}
    local = load_judge(str(tmp_path), **options)
    judge = RayJudge(str(tmp_path), options=options, engine=RayOptions(workers=2, piece_size=2))
    try:  # the rows that run together: the pieces, then the model's batches
        assert judge.batch_settings() == {
            "engine": "ray", "piece_size": 2, **local.batch_settings()
        }  # fmt: skip
        assert local.batch_settings()["batch_size"] == 3
        # of the operations a run calls only (abstention: no generation limit)
        abstain = local.batch_settings(["abstain_prob"])
        engine = {"engine": "ray", "piece_size": 2}
        assert judge.batch_settings(["abstain_prob"]) == {**engine, **abstain}
        assert "max_generate_tokens" not in abstain and judge.batch_settings([]) == {}
        # passages cut on either worker are counted once each, as one process counts them
        passages = ["the answer is a world", "hello", "the question of the world", "a"] * 2
        questions = [f"question {i} ?" for i in range(len(passages))]
        local.abstain_prob(questions, passages)
        judge.abstain_prob(questions, passages)
        assert judge.max_passage_tokens == 2
        assert judge.n_truncated == local.n_truncated == 2
    finally:
        judge.close()
    judge = RayJudge(precomputed[0], engine=RayOptions(workers=1))
    try:  # values that do not move with the batch: nothing recorded, as in one process
        assert judge.batch_settings() == {} == load_judge(precomputed[0]).batch_settings()
    finally:
        judge.close()


class PeakServer(ChatServer):
    """A :class:`ChatServer` that counts the chat requests it holds at once (``peak``)."""

    def __init__(self, delay: float) -> None:
        self.now = self.peak = 0
        super().__init__(delay=delay)

    def _answer(self, path: str, body: Any, headers: dict[str, str]) -> Any:
        if body is None:
            return super()._answer(path, body, headers)
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            return super()._answer(path, body, headers)
        finally:
            with self.lock:
                self.now -= 1


def test_each_server_actor_keeps_its_max_concurrency_in_flight() -> None:
    server = PeakServer(delay=0.1)
    try:
        engine = RayOptions(workers=2)  # default pieces: a call's items over the 4 slots
        judge = RayJudge(f"openai:m@{server.url}", options={"max_concurrency": 12}, engine=engine)
        prompts = _prompts(96)
        assert judge.generate(prompts, 4) == _replies(prompts)
        judge.close()
        # pieces of 8 would hold each actor to 8 requests in flight, 16 in all
        assert 16 < server.peak <= 2 * 12
    finally:
        server.close()
