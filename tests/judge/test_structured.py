"""generate_json against a scripted fake judge: extraction, validation, bounded retries."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from udcg.judge.base import Judge
from udcg.judge.prompts import Messages
from udcg.judge.structured import RETRY_MESSAGE, extract_json, generate_json


class ScriptedJudge(Judge):
    """Answers prompt ``i`` (its first user message's text) with its next scripted reply."""

    name = "scripted"
    fingerprint = "fake|scripted"

    def __init__(self, script: dict[str, list[str]]) -> None:
        self.script = {k: list(v) for k, v in script.items()}
        self.calls: list[list[Messages]] = []

    def abstain_prob(self, questions, passages, mode="first_token") -> np.ndarray:
        raise NotImplementedError

    def yes_prob(self, prompts: Sequence[Messages]) -> np.ndarray:
        raise NotImplementedError

    def generate(self, prompts: Sequence[Messages], max_new_tokens: int = 64) -> list[str]:
        self.calls.append([list(p) for p in prompts])
        return [self.script[p[0]["content"]].pop(0) for p in prompts]


def ask(key: str) -> Messages:
    return [{"role": "user", "content": key}]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": 1}', {"a": 1}),
        ('Sure! Here it is: {"a": [1, 2]} Hope it helps {"b": 2}', {"a": [1, 2]}),
        ('```json\n{"claims": ["x", "y"]}\n```', {"claims": ["x", "y"]}),
        ('text {not json} then ```JSON\n[1, 2]\n``` and {"late": 1}', [1, 2]),
        ('```\n{"plain": "fence"}\n```', {"plain": "fence"}),
        ('[{"a": "brace } in a string"}]', [{"a": "brace } in a string"}]),
        ('{"broken": } but then ["ok"]', ["ok"]),
        ('```json\n{"unterminated": \n``` fallback {"x": 0}', {"x": 0}),
    ],
)
def test_extract_json(text, value):
    assert extract_json(text) == value


@pytest.mark.parametrize("text", ["", "no json here", "just 42", '"a string"', "{oops"])
def test_extract_json_rejects(text):
    with pytest.raises(ValueError, match="no JSON"):
        extract_json(text)


def test_extract_json_rejects_nesting_python_cannot_decode_and_lone_surrogates():
    with pytest.raises(ValueError, match="no JSON"):
        extract_json("[" * 5000)
    with pytest.raises(ValueError, match=r"at claims\[1\] holds a lone surrogate"):
        extract_json('Sure: {"claims": ["a", "b\\ud800"]}')
    assert extract_json('{"claims": ["\\ud83d\\ude00"]}') == {"claims": ["\U0001f600"]}


def test_a_deeply_nested_reply_is_a_failed_retried_answer():
    deep = "[" * 1000
    judge = ScriptedJudge({"a": [deep, '{"ok": 1}'], "b": [deep, '["\\udfff"]']})
    good, bad = generate_json(judge, [ask("a"), ask("b")], retries=1)
    assert (good.value, good.attempts) == ({"ok": 1}, 2)
    assert not bad.ok and bad.attempts == 2 and bad.raw == [deep, '["\\udfff"]']
    assert "lone surrogate" in bad.error


def test_retries_only_failed_prompts_with_feedback():
    judge = ScriptedJudge(
        {
            "a": ['{"ok": true}'],
            "b": ["I cannot answer", '```json\n{"ok": 1}\n```'],
            "c": ["nope", "still nope", "[]"],
        }
    )
    out = judge.generate_json([ask("a"), ask("b"), ask("c")], retries=2)
    assert [r.ok for r in out] == [True, True, True]
    assert [r.value for r in out] == [{"ok": True}, {"ok": 1}, []]
    assert [r.attempts for r in out] == [1, 2, 3]
    assert out[2].raw == ["nope", "still nope", "[]"]
    # call 1: all three; call 2: b and c; call 3: c alone
    assert [len(c) for c in judge.calls] == [3, 2, 1]
    retry = judge.calls[1][0]
    assert retry[0] == {"role": "user", "content": "b"}
    assert retry[1] == {"role": "assistant", "content": "I cannot answer"}
    assert retry[2]["role"] == "user"
    assert retry[2]["content"] == RETRY_MESSAGE.format(
        error="no JSON object or array found in the reply"
    )
    assert len(judge.calls[2][0]) == 5  # two failed turns appended


def test_failures_are_returned_not_raised():
    judge = ScriptedJudge({"x": ["a", "b", "c"], "y": ['{"v": 1}']})
    out = generate_json(judge, [ask("x"), ask("y")], retries=2)
    assert not out[0].ok
    assert out[0].value is None
    assert out[0].attempts == 3
    assert out[0].raw == ["a", "b", "c"]
    assert "no JSON" in out[0].error
    assert out[1].ok and out[1].value == {"v": 1}


def test_validator_rejects_replaces_and_catches_lookup_errors():
    def validate(value):
        if not isinstance(value, dict):
            raise ValueError("expected an object")
        return {"n": int(value["n"])}  # KeyError on a missing key counts as invalid

    judge = ScriptedJudge(
        {
            "p": ["[1]", '{"m": 1}', '{"n": "3"}'],
            "q": ['{"m": 2}', '{"m": 2}', '{"m": 2}'],
        }
    )
    out = generate_json(judge, [ask("p"), ask("q")], validate=validate, retries=2)
    assert out[0].ok and out[0].value == {"n": 3} and out[0].attempts == 3
    q = judge.calls[1][1][-1]["content"]
    assert "ValueError: expected an object" in judge.calls[1][0][-1]["content"]
    assert "KeyError" in q
    assert not out[1].ok and out[1].attempts == 3
    assert out[1].error.startswith("invalid value: KeyError")


def test_retries_zero_and_empty_input():
    judge = ScriptedJudge({"x": ["nothing"]})
    out = generate_json(judge, [ask("x")], retries=0)
    assert out[0].error is not None and out[0].attempts == 1
    assert generate_json(judge, [], retries=2) == []
    with pytest.raises(ValueError, match="retries"):
        generate_json(judge, [ask("x")], retries=-1)


def test_validator_bugs_propagate():
    def broken(value):
        raise RuntimeError("bug in the validator")

    judge = ScriptedJudge({"x": ["{}"]})
    with pytest.raises(RuntimeError, match="bug in the validator"):
        generate_json(judge, [ask("x")], validate=broken)


def test_backend_returning_wrong_count_is_an_error():
    class Short(ScriptedJudge):
        def generate(self, prompts, max_new_tokens=64):
            return []

    with pytest.raises(RuntimeError, match="0 replies for 1 prompts"):
        generate_json(Short({}), [ask("x")])


def test_a_refused_retry_names_its_item_in_the_whole_call() -> None:
    """A retry asks again for the failed items only; a refusal of one of them (its
    conversation grown over the model's context) names its position in the whole call."""
    from udcg.judge.requests import RefusedRequest

    class Refusing(Judge):
        name, fingerprint = "refusing", "refusing-v1"

        def generate(self, prompts: Sequence[Messages], max_new_tokens: int = 64) -> list[str]:
            if len(prompts) == 3:
                return ['{"a": 1}', "not JSON", '{"a": 3}']
            raise RefusedRequest("over the context", item=0)  # the retry of item 1 only

    with pytest.raises(RefusedRequest) as info:
        generate_json(Refusing(), [[{"role": "user", "content": str(i)}] for i in range(3)])
    assert info.value.item == 1
