"""The judge's label key for every spec form, and the check of backend options."""

from __future__ import annotations

from pathlib import Path

import pytest

from udcg.errors import UDCGInputError
from udcg.judge import judge_key, load_judge
from udcg.judge.options import backend_of, check_options
from udcg.judge.precomputed import PrecomputedJudge

KEYS = [
    ("smollm2-135m", "smollm2-135m"),
    ("HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    ("/models/qwen-7b/", "/models/qwen-7b"),
    ("openai:Qwen/Qwen2.5-7B@http://h:8000/v1", "Qwen/Qwen2.5-7B"),
    ("openai:m@http://127.0.0.1:9", "m"),
    ("precomputed:runs/llama3.jsonl.gz", "llama3"),
    ("precomputed:probs.jsonl", "probs"),
]


@pytest.mark.parametrize(("spec", "key"), KEYS)
def test_the_key_is_the_spec_without_connection_details(spec: str, key: str) -> None:
    assert judge_key(spec) == key
    assert judge_key(key) == key  # a key names itself
    assert judge_key(spec, "mine") == "mine"


@pytest.mark.parametrize(
    ("spec", "name", "field", "message"),
    [
        ("openai:m", None, "judge", "expected openai:MODEL@BASE_URL"),
        ("openai:@http://h/v1", None, "judge", "expected openai:MODEL@BASE_URL"),
        ("precomputed:", None, "judge", "expected precomputed:FILE"),
        ("", None, "judge", "non-empty judge spec"),
        ("m", " ", "judge_name", "non-empty string"),
    ],
)
def test_malformed_specs_and_names(spec: str, name: str | None, field: str, message: str) -> None:
    with pytest.raises(UDCGInputError, match=message) as err:
        judge_key(spec, name)
    assert err.value.field == field


def test_backends_name_their_labels_by_the_key(tmp_path: Path) -> None:
    probs = tmp_path / "llama3.jsonl"
    probs.write_text('{"question": "q", "passage": "p", "abstain_prob": 0.5}\n')
    for spec in (f"precomputed:{probs}", "openai:Qwen/Qwen2.5-7B@http://h:8000/v1"):
        assert load_judge(spec).name == judge_key(spec)
        assert load_judge(spec, name="mine").name == "mine"
    assert PrecomputedJudge(probs).name == "llama3"  # the class alone: the same key


def test_local_judges_name_their_labels_by_the_key() -> None:
    from udcg.judge.embedded import embedded_cache_dir

    embedded = load_judge("smollm2-135m")
    assert embedded.name == "smollm2-135m"
    copy = f"{embedded_cache_dir()}/"  # the converted copy, as a local path
    assert load_judge(copy, device="cpu").name == judge_key(copy) == str(embedded_cache_dir())


def test_unknown_options_name_the_ones_the_backend_takes() -> None:
    with pytest.raises(UDCGInputError) as err:
        check_options("openai:m@http://h/v1", {"timeout": 5, "batch_size": 8})
    assert err.value.field == "batch_size"
    assert str(err.value) == (
        "field 'batch_size': not an option of the openai judge; its options: abstain_token, "
        "api_key_env, backoff, connect_timeout, deadline, exact_bounds, extra_body, max_backoff, "
        "max_concurrency, max_retries, reply_model, server_id, structured_output, "
        "template_tokenizer, timeout, top_logprobs"
    )
    with pytest.raises(UDCGInputError, match="its options: none") as err:
        check_options("precomputed:p.jsonl", {"timeout": 5}, prefix="judge_options.")
    assert err.value.field == "judge_options.timeout"
    with pytest.raises(UDCGInputError, match="set with judge_name"):
        check_options("smollm2-135m", {"name": "x"})
    embedded = set(backend_of("smollm2-135m").parameters)
    assert {"batch_size", "device", "cache_dir"} <= embedded
    assert not embedded & {"gguf_file", "source_id", "name"}  # set by the embedded loader
    assert "gguf_file" in backend_of("org/model").parameters


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": "abc"}, "must be a number, got 'abc'"),
        ({"max_retries": 1.5}, "must be an integer, got 1.5"),
        ({"max_retries": True}, "must be an integer, got True"),
        ({"template_tokenizer": 3}, "must be a string or null, got 3"),
    ],
)
def test_option_values_of_the_wrong_type(options: dict, message: str) -> None:
    with pytest.raises(UDCGInputError, match=message):
        check_options("openai:m@http://h/v1", options)
    with pytest.raises(UDCGInputError, match=message):
        load_judge("openai:m@http://h/v1", **options)


def test_option_values_of_the_right_type() -> None:
    check_options("openai:m@http://h/v1", {"timeout": 5, "extra_body": {"a": 1}, "server_id": None})
    check_options("smollm2-135m", {"share_passages": False, "batch_size": None, "dtype": "float32"})
    with pytest.raises(UDCGInputError, match="must be true or false, got 1"):
        check_options("smollm2-135m", {"share_passages": 1})
