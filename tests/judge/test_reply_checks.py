"""What a reply must be to be read: of the judge's model (a dated version of it at most), one
choice of index 0, an echo that spells the scored text; online, in batch files and in probe."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.cli.test_batch import _result
from tests.judge.test_openai_backend import ScriptedServer, _chat_reply, _fast, _openai_logprobs
from udcg.cli.batch import main as batch_main
from udcg.errors import UDCGServiceError
from udcg.io.contexts.jsonl import Context, Passage, write_contexts
from udcg.judge.openai_backend import OpenAIJudge
from udcg.judge.openai_replies import ReplyError, echoed_continuation, first_choice, same_model

CHOICE = {"index": 0, "message": {"content": "NO"}}


@pytest.mark.parametrize(
    ("named", "model", "same"),
    [
        ("gpt-4o", "gpt-4o", True),
        ("gpt-4o-2024-08-06", "gpt-4o", True),
        ("gpt-4-0613", "gpt-4", True),
        ("gpt-4o-mini", "gpt-4o", False),
        ("gpt-4o-mini-2024-07-18", "gpt-4o", False),
        ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B", False),
        (None, "m", False),
    ],
)
def test_a_dated_version_is_the_same_model_a_longer_name_is_not(named, model, same) -> None:
    assert same_model(named, model) is same


def test_first_choice_refuses_another_model_and_other_choices() -> None:
    assert first_choice({"model": "m", "choices": [CHOICE]}, "m") == CHOICE
    assert first_choice({"choices": [CHOICE]}, "m") == CHOICE  # online: a reply may not say
    with pytest.raises(ReplyError, match='the reply is of model "m-mini"'):
        first_choice({"model": "m-mini", "choices": [CHOICE]}, "m")
    other = {**CHOICE, "index": 1}
    for choices in ([other, CHOICE], [CHOICE, other], [other]):
        with pytest.raises(ReplyError, match="not the one asked for"):
            first_choice({"model": "m", "choices": choices}, "m")


def _echo(tokens: list[str], logprobs: list[float]) -> dict:
    offsets = [sum(map(len, tokens[:i])) for i in range(len(tokens))]
    return {"logprobs": {"tokens": tokens, "token_logprobs": logprobs, "text_offset": offsets}}


def test_an_echo_must_spell_the_scored_text() -> None:
    prompt = "Q: who? A:"
    good = _echo(["Q", ":", " who", "?", " A", ":", " Jane", " Austen"], [0.0] * 6 + [-1.0, -0.5])
    picked = echoed_continuation(good, prompt, " Jane Austen")
    assert [(t, lp) for t, lp, _ in picked] == [(" Jane", -1.0), (" Austen", -0.5)]
    foreign = _echo(["x" * len(t) for t in good["logprobs"]["tokens"]], [0.0] * 6 + [-1.0, -0.5])
    with pytest.raises(ReplyError, match="do not spell the scored text"):
        echoed_continuation(foreign, prompt, " Jane Austen")
    split = _echo(["Q: who? A:", " caf", "bytes:\\xc3", "bytes:\\xa9"], [0.0, -1.0, -0.5, -0.1])
    split["logprobs"]["text_offset"] = [0, 10, 14, 14]  # the two pieces of one character
    assert len(echoed_continuation(split, prompt, " café")) == 3  # byte pieces aside


@pytest.mark.parametrize(
    ("logprob", "alternative", "message"),
    [
        (10**400, -1.0, r"invalid log-prob 1(0{19})\.\.\."),
        (-1.0, math.nan, r"invalid log-prob nan of ' Paris'"),
        (-1.0, 10**400, r"invalid log-prob 1(0{19})\.\.\. of ' Paris'"),
    ],
)
def test_an_echoed_log_prob_must_be_a_log_prob(logprob, alternative, message) -> None:
    """A number too large for a float, or a NaN among the alternatives, is a reply error (the
    bound is kept), never a traceback or an alternative compared as if it agreed."""
    echo = _echo(["Q: who? A:", " Jane"], [0.0, logprob])
    echo["logprobs"]["top_logprobs"] = [None, {" Paris": alternative}]
    with pytest.raises(ReplyError, match=message):
        echoed_continuation(echo, "Q: who? A:", " Jane")


@pytest.mark.parametrize(
    "tokens, offsets",
    [
        ([" Jane"], [10]),  # the answer's last token left out
        ([" Jane", " Jane", " Austen"], [10, 10, 15]),  # a token twice
        ([" Jane", "\ufffd"], [10, 15]),  # a byte piece where the text is ASCII
        ([" Jane", "bytes:\\x41"], [10, 15]),
        ([" Jane", "\ufffd", " Austen"], [10, 15, 15]),  # a piece standing for nothing
        ([" Jane", " Austen", ""], [10, 15, 21]),
    ],
)
def test_an_echo_must_spell_the_whole_scored_text_once(tokens, offsets) -> None:
    """Each token right is not enough: together, in turn, they spell the text."""
    echo = _echo(["Q: who? A:", *tokens], [0.0] + [-1.0] * len(tokens))
    echo["logprobs"]["text_offset"] = [0, *offsets]
    with pytest.raises(ReplyError, match="do not spell the scored text"):
        echoed_continuation(echo, "Q: who? A:", " Jane Austen")


def test_llama_cpp_python_echoes_of_split_characters_are_read() -> None:
    """llama-cpp-python drops the bytes of a split character (``errors="ignore"``): ' М' comes
    back as ' ' then '' (a real reply of SmolLM2-135M, llama_cpp 0.2.60)."""
    prompt = "Question: Which city? Answer:"
    tokens = [prompt, " ", "", "о", "ск", "в", "а"]
    echo = _echo(tokens, [0.0, -11.0, -3.5, -2.6, -1.5, -0.04, -1.7])
    echo["logprobs"]["text_offset"] = [0, 29, 30, 31, 32, 34, 35]
    picked = echoed_continuation(echo, prompt, " Москва")
    assert [t for t, _, _ in picked] == tokens[1:]


def test_echo_offsets_that_go_back_are_refused() -> None:
    echo = _echo(["Q: who? A:", " Jane", "!", " Austen"], [0.0, -1.0, -2.0, -0.5])
    echo["logprobs"]["text_offset"] = [0, 10, 30, 15]
    with pytest.raises(ReplyError, match="goes back"):
        echoed_continuation(echo, "Q: who? A:", " Jane Austen")


def test_the_online_judge_refuses_a_reply_of_another_model() -> None:
    def reply(path, body, headers):
        top = {"NO": math.log(0.4), "Yes": math.log(0.3)}
        return 200, {}, {**_chat_reply("NO", _openai_logprobs(top)), "model": "llama-3-8b"}

    with ScriptedServer(reply) as server:
        judge = _fast(server.url, abstain_token="NO", max_retries=0)
        with pytest.raises(UDCGServiceError, match='the reply is of model "llama-3-8b"'):
            judge.abstain_prob(["Q?"], ["P."])


def test_batch_import_refuses_a_reply_of_a_lookalike_or_unnamed_model(tmp_path, capsys) -> None:
    write_contexts(tmp_path / "in.jsonl", [Context("q1", [Passage(text="A.")], question="Q?")])
    judge = ["--judge", "openai:m@http://127.0.0.1:9/v1", "--judge-option", "abstain_token=NO"]
    cache = ["--cache", str(tmp_path / "c.sqlite")]
    export = ["export", str(tmp_path / "in.jsonl"), str(tmp_path / "req.jsonl"), "--steps"]
    assert batch_main([*export, "abstain", *judge, *cache]) == 0
    (call,) = (json.loads(line) for line in (tmp_path / "req.calls.jsonl").open())
    calls = ["--calls", str(tmp_path / "req.calls.jsonl")]
    for model in ("m-mini", None):
        results = tmp_path / "results.jsonl"
        results.write_text(json.dumps(_result(call["custom_id"], {"NO": -0.5}, model=model)))
        assert batch_main(["import", str(results), *calls, *judge, *cache]) == 1
        err = capsys.readouterr().err
        assert f"the reply is of model {json.dumps(model)}, the request was exported" in err
    good = _result(call["custom_id"], {"NO": -0.5}, model="m-2024-05-13")
    results.write_text(json.dumps(good))
    assert batch_main(["import", str(results), *calls, *judge, *cache]) == 0


def test_probe_does_not_count_a_reply_without_text_as_json_output(capsys) -> None:
    from tests.cli.test_probe import _probe, _vllm_like

    def no_text(path, body, headers):
        if body is not None and ("response_format" in body or "max_tokens" in body):
            if not body.get("logprobs") and not body.get("echo"):
                return 200, {}, {"choices": [{"index": 0, "message": {"content": None}}]}
        return _vllm_like(path, body, headers)

    with ScriptedServer(no_text) as server:
        status, report, _ = _probe(capsys, server.url)
    assert status == 0
    assert report["steps"]["outcomes"] == "no"
    assert report["steps"]["Q-CARE generate_json"] == "no"


def test_json_output_off_and_a_template_tokenizer_s_content_are_in_the_keys(tmp_path) -> None:
    """``structured_output=off`` asks other requests than ``auto``: its generate_json values
    are keyed apart. A local template tokenizer is fingerprinted by its files, so an edited
    chat template (same path) is another judge."""
    url = "http://127.0.0.1:9/v1"
    assert _fast(url).key_settings("generate_json") == {}
    off = _fast(url, structured_output="off").key_settings("generate_json")
    assert off == {"structured_output": "off"}
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}')
    before = _fast(url, template_tokenizer=str(folder)).fingerprint
    assert str(folder.resolve()) in before
    (folder / "tokenizer_config.json").write_text('{"chat_template": "Q: {{ messages }}"}')
    assert _fast(url, template_tokenizer=str(folder)).fingerprint != before
    hub = _fast(url, template_tokenizer="org/tokenizer").fingerprint
    assert '"template_tokenizer":"org/tokenizer"' in hub


class _AtMost:
    def __init__(self, n: int) -> None:
        self.n = n

    def check(self, value):
        return value[: self.n]

    @classmethod
    def keep(cls, value):
        return value


def test_a_bound_validator_and_a_value_json_changes_are_not_cached() -> None:
    """A validator bound to an instance has no stable name (its result depends on the
    instance); a value whose JSON reads back as another value is returned, not stored."""
    from udcg.judge.cache import FORMS
    from udcg.judge.requests import validator_id
    from udcg.judge.structured import JSONResult

    assert validator_id(_AtMost(1).check) is None
    assert validator_id(_AtMost.keep) == f"{__name__}:_AtMost.keep"
    store = FORMS["generate_json"][0]
    for changed in ({0: "a"}, ("a", "b"), {"k": (1, 2)}):
        assert store(JSONResult(value=changed, attempts=1, raw=["x"]), False) is None
    kept = store(JSONResult(value={"k": [1, 2.5, None]}, attempts=1, raw=["x"]), False)
    assert kept == {"value": {"k": [1, 2.5, None]}, "attempts": 1, "raw": ["x"]}


def test_the_operations_refuse_a_single_string_none_and_one_conversation(tmp_path) -> None:
    """Inputs are checked before any key is built: a string is not split into characters,
    None is not the text 'None', one conversation is not a list of conversations."""
    from udcg.errors import UDCGInputError
    from udcg.judge import load_judge

    path = tmp_path / "pre.jsonl"
    path.write_text(json.dumps({"question": "q", "passage": "p", "abstain_prob": 0.5}) + "\n")
    judge = load_judge(f"precomputed:{path}")
    with pytest.raises(UDCGInputError, match="field 'questions': expected a sequence"):
        judge.abstain_prob("Who?", "Doc!")
    with pytest.raises(UDCGInputError, match=r"field 'questions\[0\]': is None"):
        judge.abstain_prob([None], ["p"])
    with pytest.raises(UDCGInputError, match=r"field 'passages\[0\]': expected a string, got int"):
        judge.abstain_prob(["q"], [3])
    conversation = [{"role": "system", "content": "s"}, {"role": "user", "content": "Is it?"}]
    with pytest.raises(UDCGInputError, match=r"field 'prompts\[0\]': expected a list of chat"):
        judge.yes_prob(conversation)
    with pytest.raises(UDCGInputError, match="only provides stored probabilities"):
        judge.yes_prob([conversation])  # checked, then refused by this backend


def test_on_result_hears_of_every_item_of_a_judge_that_does_not_stream(tmp_path) -> None:
    from udcg.judge import Judge, load_judge
    from udcg.judge.cached import CachedJudge
    from udcg.judge.requests import Request

    path = tmp_path / "pre.jsonl"
    rows = [{"question": "q", "passage": p, "abstain_prob": v} for p, v in (("a", 0.2), ("b", 0.7))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    heard: list[tuple[int, float, bool]] = []
    values = load_judge(f"precomputed:{path}").abstain_prob(
        ["q", "q", "q"], ["b", "a", "b"], on_result=lambda *item: heard.append(item)
    )
    assert sorted(heard) == [(0, 0.7, False), (1, 0.2, False), (2, 0.7, False)]
    assert values.tolist() == [0.7, 0.2, 0.7]
    heard.clear()

    class Echo(Judge):
        name = fingerprint = "echo"

        def generate(self, prompts, max_new_tokens=64):
            return ['{"a": 1}'] * len(prompts)

    def free(value):  # no stable name: runs uncached, and is still heard of
        return value

    judge = CachedJudge(Echo(), tmp_path / "c.sqlite")
    with pytest.warns(UserWarning, match="no stable name"):
        out = judge.run(
            [
                Request(
                    "generate_json",
                    {"messages": []},
                    {"validate": free, "max_new_tokens": 8, "retries": 0},
                )
            ],
            on_result=lambda *i: heard.append(i),
        )
    assert [i for i, _, _ in heard] == [0] and out[0].value.value == {"a": 1}


def test_a_filtered_reply_is_no_answer() -> None:
    from udcg.judge.openai_replies import message_text

    assert message_text({"message": {"content": ""}, "finish_reason": "stop"}) == ""
    for reason in ("content_filter", "abort", "error", {"type": "abort", "message": "too long"}):
        with pytest.raises(ReplyError, match="stopped the reply"):
            message_text({"message": {"content": ""}, "finish_reason": reason})


def test_an_echo_of_another_prompt_is_refused_and_special_tokens_may_be_dropped() -> None:
    """A proxy answering every echo with the first prompt's reply: the answer's tokens are
    right, the prompt before them is another one."""
    sent = "<s>user: who wrote Emma?\nassistant:"
    scores = [0.0] * 7 + [-1.0, -0.5, -0.1]
    tokens = ["<s>", "user", ":", " who", " wrote", " Emma", "?\nassistant:", " Jane", " Austen"]
    echo = _echo([*tokens, "<gen>"], scores)
    assert len(echoed_continuation(echo, sent, " Jane Austen", 1, ["<s>"])) == 2
    dropped = _echo(["", *tokens[1:], "<gen>"], scores)  # llama-cpp-python: no text for <s>
    assert len(echoed_continuation(dropped, sent, " Jane Austen", 1, ["<s>"])) == 2
    # a tokenizer that normalises (NFC: the e and its combining accent echo as one character)
    decomposed = sent.replace("Emma", "Emme\u0301")
    normalised = _echo([*tokens[:5], " Emmé", *tokens[6:], "<gen>"], scores)
    assert len(echoed_continuation(normalised, decomposed, " Jane Austen", 1, ["<s>"])) == 2
    # the same tokenizer on an answer sent decomposed: placed by its composed length
    answer = _echo([*tokens[:7], " Caf", "é", "<gen>"], scores)
    assert [t for t, _, _ in echoed_continuation(answer, sent, " Cafe\u0301", 1)] == [" Caf", "é"]
    other = _echo([*tokens[:5], " Persuasion", *tokens[6:], "<gen>"], scores)
    with pytest.raises(ReplyError, match="another prompt than the one sent"):
        echoed_continuation(other, sent, " Jane Austen", 1, ["<s>"])
    # in another script: characters split over tokens are not compared, the others are
    russian = "<s>user: кто написал Эмму?\nassistant:"
    pieces = [
        "<s>",
        "user",
        ":",
        " кто",
        " написал",
        " Э",
        "bytes:\\xd0",
        "\ufffd",
        "?\nassistant:",
    ]
    scored = [0.0] * 9 + [-1.0, -0.5, -0.1]
    echo = _echo([*pieces, " Jane", " Austen", "<gen>"], scored)
    assert len(echoed_continuation(echo, russian, " Jane Austen", 1, ["<s>"])) == 2
    asked = _echo([*pieces[:3], " кто", " читал", *pieces[5:], " Jane", " Austen", "<gen>"], scored)
    with pytest.raises(ReplyError, match="another prompt than the one sent"):
        echoed_continuation(asked, russian, " Jane Austen", 1, ["<s>"])
    # a character whose letters are ASCII (the Kelvin sign: K), split into pieces; and Hangul,
    # one syllable split, the next one's letters starting with its own
    for sent, split, kept in (("<s>at 373 \u212a?", "\u212a", ["<s>", "at", " 373 "]),
                              ("<s>\uac00\uac01?", "\uac00", ["<s>"])):  # fmt: skip
        tokens = [*kept, "", "bytes:\\xe2", "\ufffd", *sent[sent.index(split) + 1 :]]
        echo = _echo([*tokens, " Jane", " Austen", "<gen>"], [0.0] * len(tokens) + [-1, -0.5, -0.1])
        assert len(echoed_continuation(echo, sent, " Jane Austen", 1, ["<s>"])) == 2, sent


def test_a_piped_precomputed_file_is_refused_on_ray_from_python(tmp_path) -> None:
    """Each Ray worker would open the pipe again: refused at once, not after start_timeout."""
    import os

    from udcg.errors import UDCGInputError
    from udcg.judge import open_judge
    from udcg.judge.ray_engine import RayOptions

    fifo = tmp_path / "values"
    os.mkfifo(fifo)
    with pytest.raises(UDCGInputError, match="each Ray worker opens the precomputed file again"):
        open_judge(f"precomputed:{fifo}", "mine", engine=RayOptions(workers=2))


def test_bound_marks_follow_their_values_when_indexed() -> None:
    import numpy as np

    from udcg.judge.base import judge_values, upper_bounds

    values = judge_values([0.9, 0.1, 0.5], upper_bound=[False, True, False])
    for picked in (values[np.argsort(values)], values[::-1], values[1:], values[values < 0.6]):
        marked = {float(v) for v, b in zip(picked, upper_bounds(picked), strict=True) if b}
        assert marked == {0.1}
    assert upper_bounds(values[[0, 2]]).tolist() == [False, False]


def test_bound_marks_follow_their_values_when_sorted_or_assigned() -> None:
    import numpy as np

    from udcg.judge.base import judge_values, upper_bounds

    values = judge_values([0.9, 0.1, 0.5], upper_bound=[False, True, False])
    values.sort()
    assert values.tolist() == [0.1, 0.5, 0.9] and upper_bounds(values).tolist() == [1, 0, 0]
    copy = np.sort(judge_values([0.9, 0.1], upper_bound=[True, False]))
    assert upper_bounds(copy).tolist() == [False, True]
    values[:] = values[::-1]
    assert upper_bounds(values).tolist() == [False, False, True]
    values[2] = 0.3  # a plain number is no bound
    assert upper_bounds(values).tolist() == [False, False, False]
    original = judge_values([0.9, 0.1], upper_bound=[True, False])
    for other in (original.copy(), original * 1.0, np.sort(original)):
        other[0] = 0.5
    assert upper_bounds(original).tolist() == [True, False]  # copies keep their own marks


def test_the_embedded_copy_never_replaces_a_folder_or_file_udcg_did_not_make(tmp_path) -> None:
    """``cache_dir`` names the converted copy's own folder: one holding other files, or a file,
    is refused before anything is converted or moved; an empty or new folder is taken."""
    pytest.importorskip("transformers")
    from udcg.errors import UDCGInputError
    from udcg.judge.embedded import EmbeddedJudge

    mine = tmp_path / "mine"
    (mine / "other-tool").mkdir(parents=True)
    (mine / "other-tool" / "data.txt").write_text("keep me")
    with pytest.raises(UDCGInputError, match="holds files udcg did not write"):
        EmbeddedJudge(cache_dir=mine)
    assert (mine / "other-tool" / "data.txt").read_text() == "keep me"
    afile = tmp_path / "hostname"
    afile.write_text("vm")
    with pytest.raises(UDCGInputError, match="is a file"):
        EmbeddedJudge(cache_dir=afile)
    assert afile.read_text() == "vm"
    with pytest.raises(UDCGInputError, match="field 'cache_dir': must be a folder path, got int"):
        EmbeddedJudge(cache_dir=5)
    (tmp_path / "empty").mkdir()
    assert EmbeddedJudge(cache_dir=tmp_path / "empty").name == "smollm2-135m"  # no load yet


def test_an_option_changed_after_wrapping_changes_the_cache_keys(tmp_path) -> None:
    """The cache wrapper reads the wrapped judge's fingerprint when it builds a key, not once."""
    pytest.importorskip("transformers")
    from udcg.judge.cached import CachedJudge
    from udcg.judge.embedded import EmbeddedJudge

    inner = EmbeddedJudge(warm_up=False)
    judge = CachedJudge(inner, tmp_path / "c.sqlite")
    before = judge.fingerprint
    inner.max_passage_tokens = 4
    assert judge.fingerprint == inner.fingerprint != before


@pytest.mark.parametrize(("scaling", "supported"), [(8.0, False), (1.0, True)])
def test_a_model_that_scales_its_logits_is_refused_as_a_local_judge(
    tmp_path, scaling, supported
) -> None:
    """Granite divides its logits by ``logits_scaling`` after the head: the batched scorer's
    values would be off, so loading refuses it; unscaled, it scores as a plain forward does."""
    torch = pytest.importorskip("torch")
    from transformers import GraniteConfig, GraniteForCausalLM

    from tests.judge.test_openai_backend import _tiny_model
    from udcg.errors import UDCGInputError
    from udcg.judge import load_judge

    model = _tiny_model(tmp_path, GraniteConfig, GraniteForCausalLM, logits_scaling=scaling)
    with torch.no_grad():
        model.lm_head.weight.mul_(40)  # confident enough for the scale to show
    model.save_pretrained(tmp_path)
    judge = load_judge(str(tmp_path), warm_up=False, device="cpu")
    if supported:
        assert 0.0 <= judge.abstain_prob(["the question ?"], ["a document"])[0] <= 1.0
    else:
        with pytest.raises(UDCGInputError, match="not supported as a local judge"):
            judge.abstain_prob(["the question ?"], ["a document"])


def test_a_folder_judge_s_additional_chat_templates_are_in_its_fingerprint(tmp_path) -> None:
    from udcg.judge.file_digest import folder_sha256

    (tmp_path / "config.json").write_text("{}")
    before = folder_sha256(tmp_path)
    (tmp_path / "additional_chat_templates").mkdir()
    (tmp_path / "additional_chat_templates" / "default.jinja").write_text("{{ messages }}")
    assert folder_sha256(tmp_path) != before


@pytest.mark.parametrize("option", ["batch_size", "max_batch_tokens", "max_generate_tokens"])
def test_a_zero_batch_limit_is_refused_not_replaced_by_the_default(option) -> None:
    pytest.importorskip("transformers")
    from udcg.errors import UDCGInputError
    from udcg.judge.local import TransformersJudge

    with pytest.raises(UDCGInputError, match=f"field '{option}': must be >= 1, got 0"):
        TransformersJudge("some/model", **{option: 0})


def test_reply_model_names_the_model_a_server_answers_under() -> None:
    """An Azure deployment answers requests for ``my-deployment`` as ``gpt-4o-2024-05-13``:
    refused by default with the remedy named, read with ``reply_model``, which is part of the
    fingerprint."""

    def reply(path, body, headers):
        top = {"NO": math.log(0.4), "Yes": math.log(0.3)}
        return 200, {}, {**_chat_reply("NO", _openai_logprobs(top)), "model": "gpt-4o-2024-05-13"}

    with ScriptedServer(reply) as server:
        plain = OpenAIJudge("my-deployment", server.url, abstain_token="NO", max_retries=0)
        with pytest.raises(UDCGServiceError, match="needs the judge option reply_model=NAME"):
            plain.abstain_prob(["Q?"], ["P."])
        named = OpenAIJudge(
            "my-deployment", server.url, abstain_token="NO", max_retries=0, reply_model="gpt-4o"
        )
        assert named.abstain_prob(["Q?"], ["P."])[0] == pytest.approx(0.4)
    assert '"reply_model":"gpt-4o"' in named.fingerprint and "reply_model" not in plain.fingerprint


@pytest.mark.parametrize("text", ["", "Sure, the answer is yes."])
def test_probe_counts_json_output_only_when_the_reply_is_json(capsys, text) -> None:
    from tests.cli.test_probe import _probe, _vllm_like

    def prose(path, body, headers):
        if body is not None and "response_format" in body:
            return 200, {}, _chat_reply(text, None)
        return _vllm_like(path, body, headers)

    with ScriptedServer(prose) as server:
        status, report, _ = _probe(capsys, server.url)
    assert status == 0 and report["json_output"] == "not JSON"
    assert report["steps"]["Q-CARE generate_json"].startswith("no (the reply to a JSON request")


def _exported(tmp_path, model: str) -> tuple[Path, list[str], list[str], dict]:
    """One context's abstention exported for ``openai:MODEL``: the contexts file, the judge and
    cache arguments, and the one call."""
    contexts = tmp_path / "in.jsonl"
    write_contexts(contexts, [Context("q1", [Passage("d1", text="A.")], question="Q?")])
    judge = [f"--judge=openai:{model}@http://127.0.0.1:9/v1", "--judge-option=abstain_token=NO"]
    cache = ["--cache", str(tmp_path / "c.sqlite")]
    export = ["export", str(contexts), str(tmp_path / "req.jsonl"), "--steps", "abstain"]
    assert batch_main([*export, *judge, *cache]) == 0
    (call,) = (json.loads(line) for line in (tmp_path / "req.calls.jsonl").open())
    return contexts, judge, cache, call


def test_results_of_a_deployment_import_with_reply_model_under_its_keys(tmp_path, capsys) -> None:
    """Exported for the deployment ``dep``, answered by ``gpt-4o-2024-05-13``: refused without
    ``reply_model``; with it, imported under the keys of the judge with ``reply_model``, which
    then answers from the cache alone."""
    from udcg.cli.annotate import main as annotate_main

    contexts, judge, cache, call = _exported(tmp_path, "dep")
    results = tmp_path / "results.jsonl"
    results.write_text(
        json.dumps(_result(call["custom_id"], {"NO": -0.5}, model="gpt-4o-2024-05-13"))
    )
    imported = ["import", str(results), "--calls", str(tmp_path / "req.calls.jsonl"), *cache]
    assert batch_main([*imported, *judge]) == 1
    assert "need the judge option reply_model=NAME" in capsys.readouterr().err
    checked = [*judge, "--judge-option", "reply_model=gpt-4o"]
    assert batch_main([*imported, *checked]) == 0
    assert "imported 1 results" in capsys.readouterr().out
    out = tmp_path / "out.jsonl"
    args = [str(contexts), "-o", str(out), "--steps", "abstain", *checked, *cache]
    assert annotate_main(args) == 0  # the server (port 9) is never asked
    (line,) = (json.loads(text) for text in out.open())
    assert line["passages"][0]["abstain_prob"] == {"dep": pytest.approx(math.exp(-0.5))}


def test_a_server_judge_s_fingerprinted_settings_are_fixed_once_built(tmp_path) -> None:
    """``top_logprobs`` set after loading (on the judge or the cache wrapper) would store values
    of 2 log-probs under the key of 20: refused in one line."""
    from udcg.errors import UDCGInputError
    from udcg.judge import open_judge

    judge = open_judge("openai:m@http://127.0.0.1:9/v1", cache=tmp_path / "c.sqlite")
    for target in (judge, judge.inner):
        with pytest.raises(UDCGInputError, match="field 'top_logprobs': is fixed when the judge"):
            target.top_logprobs = 2
    judge.inner.max_concurrency = 4  # not in the fingerprint: free to change


def test_probe_counts_fenced_json_as_json_output(capsys) -> None:
    """generate_json reads a fenced block first: such a reply is JSON output."""
    from tests.cli.test_probe import _probe, _vllm_like

    def fenced(path, body, headers):
        if body is not None and "response_format" in body:
            return 200, {}, _chat_reply('```json\n{"answer": "yes"}\n```', None)
        return _vllm_like(path, body, headers)

    with ScriptedServer(fenced) as server:
        status, report, _ = _probe(capsys, server.url)
    assert status == 0 and report["json_output"] == "accepted"


def test_a_server_judge_s_extra_body_cannot_change_inside_either() -> None:
    judge = OpenAIJudge("m", "http://127.0.0.1:9/v1", extra_body={"top_k": 1, "x": {"y": 2}})
    judge.extra_body["top_k"] = 5  # a copy
    judge.extra_body["x"]["y"] = 3
    assert judge.extra_body == {"top_k": 1, "x": {"y": 2}}


def test_batch_import_writes_the_manifest_annotate_would(tmp_path, capsys) -> None:
    """``batch import -o`` records its judge, so ``compare`` can tell it from another model
    under the same key; a file without a manifest beside one with it is warned about."""
    from udcg.io.joins.utilities import read_utility_file
    from udcg.io.manifests import manifest_path, recorded_judges

    contexts, judge, cache, call = _exported(tmp_path, "m")
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps(_result(call["custom_id"], {"NO": -0.5}, model="m")))
    out = tmp_path / "out.jsonl"
    calls = ["--calls", str(tmp_path / "req.calls.jsonl"), "--steps", "abstain"]
    imported = ["import", str(results), *calls, "--contexts", str(contexts), "-o", str(out)]
    assert batch_main([*imported, *judge, *cache]) == 0
    fingerprint = OpenAIJudge("m", "http://127.0.0.1:9/v1", abstain_token="NO").fingerprint
    assert recorded_judges(out) == {"m": {"abstain": fingerprint}}
    assert json.loads(manifest_path(out).read_text())["steps"] == ["abstain"]
    assert read_utility_file(out, "abstain_prob", "m").fingerprint == fingerprint
