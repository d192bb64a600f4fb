"""YesNoChecker's ``auto`` mode: only a judge without log-probs falls back to text; a failing
judge fails, and labels of one run never mix the two routes because a call failed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.judge.test_openai_backend import ScriptedServer, _chat_reply, _fast
from udcg.errors import UDCGServiceError
from udcg.judge import Judge
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


def test_a_bounded_yes_no_value_keeps_its_label_and_writes_no_probability() -> None:
    """Top-2 log-probs without No: P(Yes)/(P(Yes)+P(No)) is only a lower bound of at least 0.5,
    so the hard label (Yes) holds and the soft value is None, counted as a bound; a reply with
    both tokens gives the exact value."""
    import math

    from tests.judge.test_openai_backend import _openai_logprobs

    tops = {
        "Does it? #fr": {"Yes": math.log(0.6), "The": math.log(0.3)},
        "Does it? #ex": {"Yes": math.log(0.6), "No": math.log(0.2)},
    }

    def reply(path, body, headers):
        top = tops[body["messages"][-1]["content"]]
        return 200, {}, _chat_reply("Yes", _openai_logprobs(top))

    exact = [[{"role": "system", "content": "s"}, {"role": "user", "content": "Does it? #ex"}]]
    with ScriptedServer(reply) as server:
        checker = YesNoChecker(_fast(server.url, abstain_token="NO", top_logprobs=2))
        soft, hard = checker(PROMPT + exact, "coverage")
    assert hard == [True, True]
    assert soft[0] is None and soft[1] == pytest.approx(0.75)
    assert checker.counts["bounds"] == 1 and checker.counts["logprobs"] == 2


def test_qcare_label_writes_a_bound_as_null_and_warns(tmp_path, monkeypatch, capsys) -> None:
    from udcg.cli import qcare
    from udcg.io.contexts.jsonl import read_contexts, write_contexts
    from udcg.io.contexts.model import Context, Passage
    from udcg.judge import Judge
    from udcg.judge.base import judge_values

    class Bounded(Judge):
        name, fingerprint = "bounded", "bounded-v1"

        def yes_prob(self, prompts):
            return judge_values([0.7] * len(prompts), upper_bound=[True] * len(prompts))

    monkeypatch.setattr("udcg.judge.load_judge", lambda spec, **options: Bounded())
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    ctx = Context("q", [Passage("d", text="Paris.")], question="Capital?", subqueries=["Capital?"])
    write_contexts(inp, [ctx])
    assert qcare.main(["label", str(inp), "-o", str(out), "--judge", "x"]) == 0
    (labelled,) = read_contexts(out)
    assert labelled.passages[0].covers == [True]
    assert labelled.passages[0].extra["covers_prob"] == [None]
    err = capsys.readouterr().err
    assert "1 of 1 Yes/No log-prob labels were only bounded" in err, err


def test_retries_are_checked_before_the_judge_and_count_alike(tmp_path, capsys) -> None:
    """``--retries -1`` is one line before any judge call; ``--retries 1`` asks an unusable
    Yes/No text reply once more, as it asks a malformed decomposition once more."""
    from udcg.cli import qcare

    assert qcare.main(["label", "in.jsonl", "-o", str(tmp_path / "o.jsonl"), "--retries", "-1",
                       "--judge", "precomputed:nothing.jsonl"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "field 'retries': must be a non-negative integer, got -1" in err
    assert len(err.strip().splitlines()) == 1

    class Unsure(Judge):
        name, fingerprint = "unsure", "unsure-v1"
        calls = 0

        def generate(self, prompts, max_new_tokens=64):
            Unsure.calls += len(prompts)
            return ["Maybe."] * len(prompts)

    checker = YesNoChecker(Unsure(), mode="text", retries=1)
    assert checker(PROMPT, "coverage") == ([None], [None])
    assert Unsure.calls == 2 and checker.counts["retried"] == 1


def test_the_record_says_how_yes_no_was_read_and_score_warns_on_mixed_sources(
    tmp_path, capsys, tag_judge
) -> None:
    """A file whose contexts were labelled by text and by log-probs (or by two judges) is
    scored with one warning naming each source; one source alone, no warning."""
    from udcg.cli import qcare
    from udcg.io.contexts.jsonl import read_contexts, write_contexts
    from udcg.io.contexts.model import Context, Passage
    from udcg.qcare.labels.label import label_contexts

    ctx = Context("q", [Passage("d", text="Paris #fr")], question="capital #fr")
    (by_text,), _ = label_contexts([ctx], tag_judge(logprobs=False))
    (by_logprobs,), _ = label_contexts([replace(ctx, qid="q2")], tag_judge())
    assert by_text.extra["qcare_labels"]["checks"] == ["text"]
    assert by_logprobs.extra["qcare_labels"]["checks"] == ["logprobs"]
    mixed, single = tmp_path / "mixed.jsonl", tmp_path / "single.jsonl"
    write_contexts(mixed, [by_text, by_logprobs])
    write_contexts(single, [by_logprobs])
    assert qcare.main(["score", str(single)]) == 0
    assert "several sources" not in capsys.readouterr().err
    assert qcare.main(["score", str(mixed)]) == 0
    err = capsys.readouterr().err
    assert "the labels come from several sources (judge tag (logprobs): 1 contexts;" in err
    assert "judge tag (text): 1 contexts)" in err
    assert len(list(read_contexts(mixed))) == 2
    # one key, two fingerprints (the model on another server): two sources as well
    record = {**by_logprobs.extra["qcare_labels"], "fingerprint": "tag-elsewhere"}
    elsewhere = replace(by_logprobs, qid="q3", extra={**by_logprobs.extra, "qcare_labels": record})
    write_contexts(mixed, [by_logprobs, elsewhere])
    assert qcare.main(["score", str(mixed)]) == 0
    assert "judge tag [tag-elsewhere] (logprobs): 1 contexts" in capsys.readouterr().err


def test_the_record_keeps_the_route_of_labels_an_own_later_run_keeps(tag_judge) -> None:
    """Run 1 labels answer g1 by text; run 2 by the same judge labels g2 from log-probs and
    keeps g1's labels: the record names both routes. Relabelling g1 itself names only the
    route that labels remain from."""
    from udcg.io.contexts.model import Context, Passage
    from udcg.qcare.labels.label import label_contexts

    outcomes = {"g1": {"answer": "Paris #fr"}, "g2": {"answer": "Paris #fr"}}
    ctx = Context("q", [Passage("d", text="Paris #fr")], question="capital #fr", outcomes=outcomes)
    (first,), _ = label_contexts([ctx], tag_judge(logprobs=False), answers_from="g1")
    (both,), _ = label_contexts([first], tag_judge(), answers_from="g2")
    (again,), _ = label_contexts([first], tag_judge(), answers_from="g1")
    assert first.extra["qcare_labels"]["checks"] == ["text"]
    assert both.extra["qcare_labels"]["checks"] == ["logprobs", "text"]
    assert again.extra["qcare_labels"]["checks"] == ["logprobs"]


def test_label_sources_name_records_of_any_json_shape() -> None:
    from udcg.io.contexts.model import Context
    from udcg.io.contexts.sources import RECORD, label_sources

    records = [{"judge": ["j"], "fingerprint": {"a": 1}, "checks": "text"}, {"judge": "j"}]
    sources = label_sources([Context(f"q{i}", extra={RECORD: r}) for i, r in enumerate(records)])
    assert sources == {"judge ['j'] (routes not recorded)": 1, "judge j (routes not recorded)": 1}
