"""YesNoChecker's ``auto`` mode: only a judge without log-probs falls back to text; a failing
judge fails, and labels of one run never mix the two routes because a call failed."""

from __future__ import annotations

import numpy as np
import pytest

from tests.judge.test_openai_backend import ScriptedServer, _chat_reply, _fast
from udcg.errors import UDCGServiceError
from udcg.qcare.labels.checks import YesNoChecker

PROMPT = [[{"role": "system", "content": "s"}, {"role": "user", "content": "Does it? #fr"}]]


def test_a_server_failure_is_not_a_judge_without_log_probs(tag_judge) -> None:
    class Failing(tag_judge):
        def yes_prob(self, prompts):
            raise UDCGServiceError("http://h/v1/chat/completions: HTTP 500: out of memory")

    checker = YesNoChecker(Failing())
    with pytest.raises(UDCGServiceError, match="HTTP 500"):
        checker(PROMPT, "coverage")
    assert checker.text_reason is None and checker.counts["text"] == 0


def test_log_probs_lost_after_the_first_call_fail_instead_of_mixing_routes(tag_judge) -> None:
    class Lost(tag_judge):
        def yes_prob(self, prompts):
            if self.calls["coverage"]:
                raise NotImplementedError("no log-probs")
            self.calls["coverage"] += len(prompts)
            return np.full(len(prompts), 0.9)

    checker = YesNoChecker(Lost())
    assert checker(PROMPT, "coverage") == ([0.9], [True])
    with pytest.raises(NotImplementedError):
        checker(PROMPT, "coverage")
    assert checker.counts == {"logprobs": 1}


def test_a_server_without_log_probs_falls_back_to_text_replies() -> None:
    """What transformers serve does: a chat reply without log-probs. ``auto`` says why and
    labels by the replies' first word; ``logprobs`` refuses as a failing service."""

    def reply(path, body, headers):
        return 200, {}, _chat_reply("Yes, it does.")

    with ScriptedServer(reply) as server:
        auto = YesNoChecker(_fast(server.url, abstain_token="NO"))
        assert auto(PROMPT, "coverage") == ([None], [True])
        assert "NoLogprobsError" in auto.text_reason and "no log-probs" in auto.text_reason
        assert auto.counts["text"] == 1 and not auto.counts["logprobs"]
        strict = YesNoChecker(_fast(server.url, abstain_token="NO"), mode="logprobs")
        with pytest.raises(UDCGServiceError, match="no log-probs"):
            strict(PROMPT, "coverage")
