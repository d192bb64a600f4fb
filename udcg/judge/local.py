"""A judge running a causal LM in-process with ``transformers`` (CPU or CUDA).

Abstention scoring does far less work than the reference one-prompt-at-a-time loop while
reading exactly the same token ids:

* the token prefix shared by every prompt (chat template, system message, ``Document:``) is run
  once per judge and its key/value cache reused for every batch;
* pairs that share a passage (the same passage judged for several questions) also share the
  passage's key/value cache: the passage runs once, only the question tails run per pair;
* variable-length suffixes are right-padded in length-sorted batches under a token budget, and
  read at each row's last real token (a causal mask keeps padding invisible to real tokens);
* the vocabulary projection runs only at the gathered positions, never over whole sequences;
* identical prompts are scored once.

Answer likelihoods (:meth:`TransformersJudge.answer_prob`) run on the same engine: each
acceptable answer is one row (prompt + answer tokens), rows of one passage share its key/value
cache (so several answers to one (question, passage) pair reuse the whole prompt), and the
vocabulary projection runs only at the positions that predict answer tokens.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import math
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.judge.base import AbstainMode, Judge, check_answer_inputs
from udcg.judge.prompts import ABSTAIN_MARKER, Messages, abstain_messages

log = logging.getLogger(__name__)

YES_WORDS = ("Yes", " Yes")
NO_WORDS = ("No", " No")
# Shared runs shorter than this are not worth a separate forward pass.
_MIN_SHARED_TOKENS = 8
_PREFIX_CACHE_SIZE = 4
# Cost model of one forward pass, in tokens: a fixed per-call cost, and small batches run as
# slowly as this many tokens (matrix products too thin to use the cores well).
_BATCH_OVERHEAD_TOKENS = 32
_SMALL_BATCH_TOKENS = 128
# Segment key/value caches held at once, in units of max_batch_tokens.
_SEGMENT_CHUNK_BATCHES = 4


@dataclass
class ForwardStats:
    """Token accounting of the forward passes of one call (for benchmarks and logs)."""

    rows: int = 0
    unique_rows: int = 0
    prompt_tokens: int = 0  # tokens of all prompts, as a one-at-a-time loop would run them
    computed_tokens: int = 0  # real tokens that went through the model
    padded_tokens: int = 0  # padding that went through the model
    batches: int = 0


def _common_prefix_len(a: Sequence[int], b: Sequence[int], limit: int | None = None) -> int:
    n = min(len(a), len(b)) if limit is None else min(len(a), len(b), limit)
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_texts(values: Sequence[Any], what: str) -> list[str]:
    if isinstance(values, str):
        raise UDCGInputError("expected a sequence of strings, got a single string", field=what)
    out = []
    for i, v in enumerate(values):
        if v is None:
            raise UDCGInputError("is None (use '' for an empty text)", field=f"{what}[{i}]")
        if not isinstance(v, str):
            raise UDCGInputError(f"expected a string, got {type(v).__name__}", field=f"{what}[{i}]")
        out.append(v)
    return out


class TransformersJudge(Judge):
    """Judge backed by a local ``transformers`` causal LM with a chat template.

    Parameters
    ----------
    model_id_or_path:
        Hub id or local directory (with ``gguf_file``: the directory holding that GGUF file).
    name:
        Key of the values this judge produces; defaults to the last path component.
    device:
        ``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
    dtype:
        ``torch`` dtype or its name; default float32 on CPU, bfloat16 on CUDA.
    batch_size:
        Most rows per forward pass; default 16 on CPU, 64 on CUDA.
    max_batch_tokens:
        Most (padded) new tokens per forward pass: rows per batch <=
        max_batch_tokens // longest row. Default 1024 on CPU (larger batches ran slower on a
        2-core AVX2 machine: activations fall out of cache), 16384 on CUDA.
    max_generate_tokens:
        The same bound for :meth:`generate` batches (prompt + new tokens per row). Decoding
        reads every weight once per step whatever the batch size, so wider batches pay off:
        default 8192 on CPU (``bench/bench_generate.py``: 47 s instead of 121 s at 1024 on 2
        idle cores, same outputs), 65536 on CUDA.
    max_passage_tokens:
        Truncation policy of :meth:`abstain_prob`: a passage longer than this many tokens (its own
        tokenization, no special tokens) is cut to its first ``max_passage_tokens`` tokens (the head
        is kept) before the prompt is built. Each cut is counted in ``n_truncated`` (cumulative over
        the judge's life) and logged. ``None`` disables truncation (the reference behaviour).
    gguf_file:
        Name of a GGUF file inside ``model_id_or_path`` to de-quantise and load.
    share_passages:
        Let pairs with the same passage share its key/value cache (exact; off only to measure).
    source_id:
        Identity of the weights for ``fingerprint`` instead of the (machine-specific) path.

    ``abstain_prob`` reads the same token ids as the reference loop (chat template rendered to
    text, then tokenised with the tokenizer's default special tokens), so ``first_token`` values
    equal the reference's up to floating-point reassociation.
    """

    def __init__(
        self,
        model_id_or_path: str | os.PathLike[str],
        name: str | None = None,
        device: str = "auto",
        dtype: Any = None,
        batch_size: int | None = None,
        max_passage_tokens: int | None = 512,
        gguf_file: str | None = None,
        *,
        max_batch_tokens: int | None = None,
        max_generate_tokens: int | None = None,
        share_passages: bool = True,
        source_id: str | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if max_passage_tokens is not None and max_passage_tokens < 1:
            raise UDCGInputError(
                f"must be >= 1 or None, got {max_passage_tokens}", field="max_passage_tokens"
            )
        source = str(model_id_or_path)
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if dtype is None:
            dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        elif isinstance(dtype, str):
            dtype = getattr(torch, dtype.removeprefix("torch."))
        self.dtype = dtype

        load_kw: dict[str, Any] = {}
        if gguf_file is not None:
            load_kw["gguf_file"] = gguf_file
        self.tokenizer = AutoTokenizer.from_pretrained(source, **load_kw)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **load_kw)
        self.model = model.to(self.device).eval()
        if self.tokenizer.chat_template is None:
            raise UDCGInputError(f"model {source!r} has no chat template")

        self.name = name or Path(source.rstrip("/")).name
        self.source = source
        self.gguf_file = gguf_file
        on_cuda = self.device.type == "cuda"
        self.batch_size = int(batch_size or (64 if on_cuda else 16))
        self.max_batch_tokens = int(max_batch_tokens or (16384 if on_cuda else 1024))
        self.max_generate_tokens = int(max_generate_tokens or (65536 if on_cuda else 8192))
        for what, value in (
            ("batch_size", self.batch_size),
            ("max_batch_tokens", self.max_batch_tokens),
            ("max_generate_tokens", self.max_generate_tokens),
        ):
            if value < 1:
                raise UDCGInputError(f"must be >= 1, got {value}", field=what)
        self.max_passage_tokens = max_passage_tokens
        self.share_passages = bool(share_passages)
        self.n_truncated = 0
        self.last_stats = ForwardStats()
        self._prefix_kv: OrderedDict[tuple[int, ...], list[tuple[Any, Any]]] = OrderedDict()
        self._abstain_prefix: tuple[int, ...] | None = None

        self._decoder = self.model.get_decoder()
        self._lm_head = self.model.get_output_embeddings()
        self._softcap = getattr(self.model.config, "final_logit_softcapping", None)
        params = inspect.signature(self._decoder.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

        marker = self.tokenizer.encode(ABSTAIN_MARKER, add_special_tokens=False)
        if not marker:
            raise UDCGInputError(f"the tokenizer of {source!r} maps {ABSTAIN_MARKER!r} to no token")
        self.marker_ids: list[int] = list(marker)
        self.yes_ids = self._single_token_ids(YES_WORDS)
        self.no_ids = self._single_token_ids(NO_WORDS)

        self._weights = self._weights_id(source_id)

    # ------------------------------------------------------------------ identity

    def _weights_id(self, source_id: str | None) -> str:
        """Backend + identity of the weights (path or id, GGUF name/size/hash)."""
        path = Path(self.source)
        if source_id is None:
            source_id = str(path.resolve()) if path.exists() else self.source
            if self.gguf_file is not None:
                gguf = path / self.gguf_file
                if gguf.is_file():
                    digest = _file_digest(gguf)[:16]
                    source_id += f"|gguf={self.gguf_file}:{gguf.stat().st_size}:{digest}"
                else:
                    source_id += f"|gguf={self.gguf_file}"
        return f"transformers|{source_id}"

    @property
    def fingerprint(self) -> str:  # type: ignore[override]
        """Backend, weights, dtype and truncation policy: what changes the values produced."""
        dtype = str(self.dtype).removeprefix("torch.")
        return f"{self._weights}|dtype={dtype}|max_passage_tokens={self.max_passage_tokens}"

    def __repr__(self) -> str:
        return f"TransformersJudge(name={self.name!r}, fingerprint={self.fingerprint!r})"

    def _single_token_ids(self, words: Sequence[str]) -> list[int]:
        ids = []
        for w in words:
            enc = self.tokenizer.encode(w, add_special_tokens=False)
            if len(enc) == 1 and enc[0] not in ids:
                ids.append(enc[0])
        if not ids:
            raise UDCGInputError(f"none of {list(words)} is a single token for this tokenizer")
        return ids

    # ------------------------------------------------------------------ prompts

    def _render(self, messages: Messages) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )

    def _encode(self, texts: list[str]) -> list[list[int]]:
        if not texts:
            return []
        return [list(x) for x in self.tokenizer(texts)["input_ids"]]

    def _truncate_passages(self, passages: list[str]) -> list[str]:
        limit = self.max_passage_tokens
        if limit is None:
            return passages
        out = list(passages)
        enc = self.tokenizer(passages, add_special_tokens=False)["input_ids"] if passages else []
        cut = 0
        for i, ids in enumerate(enc):
            if len(ids) > limit:
                out[i] = self.tokenizer.decode(ids[:limit])
                cut += 1
                log.debug("passage %d truncated from %d to %d tokens", i, len(ids), limit)
        if cut:
            self.n_truncated += cut
            log.info("%d of %d passages truncated to their first %d tokens", cut, len(out), limit)
        return out

    def _abstain_template_prefix(self) -> tuple[int, ...]:
        """Token ids that every abstention prompt starts with (template up to ``Document:``)."""
        if self._abstain_prefix is None:
            probes = [("who is a", "alpha beta"), ("what is b", "gamma delta")]
            ids = self._encode([self._render(abstain_messages(q, p)) for q, p in probes])
            self._abstain_prefix = tuple(ids[0][: _common_prefix_len(ids[0], ids[1])])
        return self._abstain_prefix

    # ------------------------------------------------------------------ public API

    def abstain_prob(
        self,
        questions: Sequence[str],
        passages: Sequence[str],
        mode: AbstainMode = "first_token",
    ) -> np.ndarray:
        """P(abstain) per (question, passage) pair under the reference prompt (see class doc).

        ``first_token``: next-token probability of the first token of NO-RESPONSE right after the
        generation prompt. ``sequence``: product of the teacher-forced probabilities of all its
        tokens. Returns float64 values in [0, 1]; passages over ``max_passage_tokens`` tokens are
        truncated to their head first.
        """
        questions = _check_texts(questions, "questions")
        passages = _check_texts(passages, "passages")
        if len(questions) != len(passages):
            raise UDCGInputError(
                f"{len(questions)} questions but {len(passages)} passages: "
                "pass one question per passage"
            )
        if mode not in ("first_token", "sequence"):
            raise UDCGInputError(f"unknown mode {mode!r}: use 'first_token' or 'sequence'")
        if not questions:
            self.last_stats = ForwardStats()
            return np.zeros(0, dtype=np.float64)

        passages = self._truncate_passages(passages)
        rows = self._encode(
            [self._render(abstain_messages(q, p)) for q, p in zip(questions, passages, strict=True)]
        )
        marker = self.marker_ids
        if mode == "first_token":
            n_out, targets = 1, [marker[0]]
        else:
            rows = [r + marker[:-1] for r in rows]
            n_out, targets = len(marker), marker
        prefix = self._abstain_template_prefix()

        import torch

        target_t = torch.tensor(targets, device=self.device)

        def reduce(hidden: Any, _rows: list[Any]) -> Any:  # [B, n_out, H] -> [B] log P(marker)
            logp = self._log_softmax(hidden)
            picked = logp.gather(-1, target_t.expand(logp.shape[0], -1).unsqueeze(-1))
            return picked.squeeze(-1).sum(-1)

        groups = passages if self.share_passages else None
        logp = self._score(rows, n_out, reduce, prefix=prefix, groups=groups)
        return np.exp(logp)

    def answer_prob(
        self,
        questions: Sequence[str],
        passages: Sequence[str],
        answers: Sequence[Sequence[str]],
    ) -> np.ndarray:
        """Max over acceptable answers of exp(mean token log-prob of the answer), teacher-forced
        as the assistant turn of the abstention prompt (see :meth:`Judge.answer_prob`).

        The answer's tokens are those of ``rendered prompt + answer`` after the prompt's own
        tokens (the text the chat template puts in the assistant turn, before its end-of-turn
        marker); a tokenizer that merges the answer into the prompt's last token is an error.
        Passages are truncated as in :meth:`abstain_prob`. Float64 values in [0, 1].
        """
        questions, passages, answers = check_answer_inputs(questions, passages, answers)
        if not questions:
            self.last_stats = ForwardStats()
            return np.zeros(0, dtype=np.float64)
        passages = self._truncate_passages(passages)
        prompts = [
            self._render(abstain_messages(q, p)) for q, p in zip(questions, passages, strict=True)
        ]
        flat = [(i, a) for i, options in enumerate(answers) for a in dict.fromkeys(options)]
        prompt_ids = self._encode(prompts)
        rows, targets = [], []
        for (i, answer), full in zip(
            flat, self._encode([prompts[i] + a for i, a in flat]), strict=True
        ):
            base = prompt_ids[i]
            if len(full) <= len(base) or full[: len(base)] != base:
                raise UDCGInputError(
                    f"the tokenizer merges answer {answer!r} into the end of the prompt, so its "
                    "tokens cannot be scored apart from the prompt",
                    field=f"answers[{i}]",
                )
            rows.append(base + full[len(base) : -1])
            targets.append(tuple(full[len(base) :]))
        width = max(len(t) for t in targets)

        import torch

        def reduce(hidden: Any, batch: list[tuple[int, ...]]) -> Any:
            # hidden [B, width, H]: row b predicts its n_b answer tokens at its last n_b slots
            n = torch.tensor([len(t) for t in batch])
            valid = torch.arange(width) >= (width - n).unsqueeze(1)
            target = torch.zeros((len(batch), width), dtype=torch.long)
            for b, t in enumerate(batch):
                target[b, width - len(t) :] = torch.tensor(t)
            valid, target = valid.to(self.device), target.to(self.device)
            logp = self._log_softmax(hidden[valid])  # vocabulary only where an answer is read
            picked = logp.gather(-1, target[valid].unsqueeze(-1)).squeeze(-1)
            owner = torch.arange(len(batch), device=self.device).unsqueeze(1).expand(-1, width)
            sums = torch.zeros(len(batch), device=self.device).index_add(0, owner[valid], picked)
            return sums / n.to(self.device)

        groups = [passages[i] for i, _ in flat] if self.share_passages else None
        mean_logp = self._score(
            rows,
            width,
            reduce,
            prefix=self._abstain_template_prefix(),
            groups=groups,
            row_data=targets,
        )
        best = np.zeros(len(questions), dtype=np.float64)
        np.maximum.at(best, [i for i, _ in flat], np.exp(mean_logp))
        return best

    def yes_prob(self, prompts: Sequence[Messages]) -> np.ndarray:
        """P(yes) / (P(yes) + P(no)) of the first answer token, with yes = {"Yes", " Yes"} and
        no = {"No", " No"} (the single-token forms of this tokenizer), read from the next-token
        log-probabilities after the chat template's generation prompt."""
        if not prompts:
            return np.zeros(0, dtype=np.float64)
        rows = self._encode([self._render(list(m)) for m in prompts])
        import torch

        yes = torch.tensor(self.yes_ids, device=self.device)
        no = torch.tensor(self.no_ids, device=self.device)

        def reduce(hidden: Any, _rows: list[Any]) -> Any:
            logp = self._log_softmax(hidden)[:, 0, :]
            margin = torch.logsumexp(logp[:, yes], -1) - torch.logsumexp(logp[:, no], -1)
            return torch.sigmoid(margin)  # P(yes)/(P(yes)+P(no)) without underflow

        return self._score(rows, 1, reduce, prefix=None, groups=None)

    def generate(self, prompts: Sequence[Messages], max_new_tokens: int = 64) -> list[str]:
        """Greedy completions (chat template, generation prompt), batched with left padding.
        Special tokens are removed from the returned text."""
        import torch

        if not prompts:
            return []
        rows = self._encode([self._render(list(m)) for m in prompts])
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        out: list[str] = [""] * len(rows)
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id
        with torch.inference_mode():
            batches = self._batches(
                order, lambda i: len(rows[i]) + max_new_tokens, self.max_generate_tokens
            )
            for batch in batches:
                width = max(len(rows[i]) for i in batch)
                ids = torch.full((len(batch), width), pad, dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for b, i in enumerate(batch):
                    ids[b, width - len(rows[i]) :] = torch.tensor(rows[i])
                    mask[b, width - len(rows[i]) :] = 1
                gen = self.model.generate(
                    input_ids=ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    pad_token_id=pad,
                )
                for b, i in enumerate(batch):
                    out[i] = self.tokenizer.decode(gen[b, width:], skip_special_tokens=True)
        return out

    # ------------------------------------------------------------------ engine

    def _log_softmax(self, hidden: Any) -> Any:
        import torch

        logits = self._lm_head(hidden).float()
        if self._softcap:
            logits = torch.tanh(logits / self._softcap) * self._softcap
        return torch.log_softmax(logits, dim=-1)

    def _batches(
        self, order: list[int], cost: Callable[[int], int], max_tokens: int | None = None
    ) -> Iterator[list[int]]:
        """Cut ``order`` (sorted by ascending ``cost``, a length) into consecutive batches.

        Dynamic programming over the cut points minimises the modelled time of all batches,
        ``max(rows x longest, _SMALL_BATCH_TOKENS) + _BATCH_OVERHEAD_TOKENS`` each (padding
        costs as much as real tokens; tiny batches and every forward call have a fixed cost),
        under ``batch_size`` rows and ``max_tokens`` (default ``max_batch_tokens``) padded tokens
        per batch."""
        max_tokens = max_tokens or self.max_batch_tokens
        lengths = [max(1, cost(i)) for i in order]
        n = len(lengths)
        best = [0.0] + [math.inf] * n
        cut = [0] * (n + 1)
        for end in range(1, n + 1):
            longest = lengths[end - 1]
            for rows in range(1, min(self.batch_size, end) + 1):
                tokens = rows * longest
                if rows > 1 and tokens > max_tokens:
                    break
                c = best[end - rows] + max(tokens, _SMALL_BATCH_TOKENS) + _BATCH_OVERHEAD_TOKENS
                if c < best[end]:
                    best[end], cut[end] = c, end - rows
        spans = []
        end = n
        while end > 0:
            spans.append((cut[end], end))
            end = cut[end]
        for lo, hi in reversed(spans):
            yield order[lo:hi]

    def _prefix_cache(self, prefix: tuple[int, ...], stats: ForwardStats) -> list[tuple[Any, Any]]:
        """Per-layer (keys, values) of ``prefix`` with batch size 1, computed once (LRU)."""
        import torch

        kv = self._prefix_kv.get(prefix)
        if kv is not None:
            self._prefix_kv.move_to_end(prefix)
            return kv
        ids = torch.tensor([prefix], device=self.device)
        out = self._decoder(input_ids=ids, use_cache=True)
        stats.computed_tokens += len(prefix)
        stats.batches += 1
        kv = self._cache_tensors(out)
        self._prefix_kv[prefix] = kv
        while len(self._prefix_kv) > _PREFIX_CACHE_SIZE:
            self._prefix_kv.popitem(last=False)
        return kv

    def _cache_tensors(self, out: Any) -> list[tuple[Any, Any]]:
        cache = getattr(out, "cache", None)
        if cache is None:
            cache = out.past_key_values
        return [(layer.keys, layer.values) for layer in cache.layers]

    def _make_cache(self, kv: list[tuple[Any, Any]]) -> Any:
        from transformers import DynamicCache

        return DynamicCache(ddp_cache_data=kv, config=self.model.config)

    def _score(
        self,
        rows: list[list[int]],
        n_out: int,
        reduce: Callable[[Any, list[Any]], Any],
        *,
        prefix: tuple[int, ...] | None,
        groups: Sequence[Any] | None,
        row_data: Sequence[Any] | None = None,
    ) -> np.ndarray:
        """Run every row and return ``reduce(hidden states at its last n_out positions, data)``,
        ``data`` being the batch rows' entries of ``row_data`` (hashable; None when not given).

        ``prefix``: token ids that rows are expected to start with (the per-call common prefix
        when None); ``groups``: rows with an equal key (e.g. the same passage) share the key/value
        cache of their common tokens after the prefix.
        """
        import torch

        stats = ForwardStats(rows=len(rows), prompt_tokens=sum(len(r) - n_out + 1 for r in rows))
        # identical rows (with identical data) are scored once
        data = [None] * len(rows) if row_data is None else list(row_data)
        unique: dict[tuple[tuple[int, ...], Any], int] = {}
        slot = [
            unique.setdefault((tuple(r), d), len(unique)) for r, d in zip(rows, data, strict=True)
        ]
        urows = [list(r) for r, _ in unique]
        udata = [d for _, d in unique]

        def read(hidden: Any, batch: list[int]) -> Any:
            return reduce(hidden, [udata[i] for i in batch])

        ukeys: list[Any] = [None] * len(urows)
        if groups is not None:
            for i, s in enumerate(slot):
                ukeys[s] = groups[i]
        stats.unique_rows = len(urows)

        if prefix is None:
            first = urows[0]
            plen = min(len(r) for r in urows) - n_out
            for r in urows[1:]:
                plen = _common_prefix_len(first, r, plen)
            prefix = tuple(first[:plen]) if plen >= _MIN_SHARED_TOKENS else ()
        plen = len(prefix)
        with_prefix = [
            i for i, r in enumerate(urows) if len(r) - plen >= n_out and tuple(r[:plen]) == prefix
        ]
        without = sorted(set(range(len(urows))) - set(with_prefix)) if plen else []
        if not plen:
            with_prefix = list(range(len(urows)))

        results: list[Any] = [None] * len(urows)
        with torch.inference_mode():
            if with_prefix:
                self._score_group(urows, with_prefix, prefix, ukeys, n_out, read, results, stats)
            if without:
                self._score_group(urows, without, (), ukeys, n_out, read, results, stats)
        values = torch.stack([results[s] for s in slot]).double().cpu().numpy()
        self.last_stats = stats
        return values

    def _score_group(
        self,
        rows: list[list[int]],
        members: list[int],
        prefix: tuple[int, ...],
        keys: list[Any],
        n_out: int,
        reduce: Callable[[Any, list[int]], Any],
        results: list[Any],
        stats: ForwardStats,
    ) -> None:
        plen = len(prefix)
        prefix_kv = self._prefix_cache(prefix, stats) if plen else None
        # units: (shared segment after the prefix, member rows); singletons have no segment
        by_key: dict[Any, list[int]] = {}
        singles: list[int] = []
        for i in members:
            if keys[i] is None:
                singles.append(i)
            else:
                by_key.setdefault(keys[i], []).append(i)
        units: list[tuple[list[int], list[int]]] = []
        for idx in by_key.values():
            if len(idx) < 2:
                singles.extend(idx)
                continue
            cap = min(len(rows[i]) for i in idx) - plen - n_out
            seg = len(rows[idx[0]]) - plen
            for i in idx[1:]:
                seg = _common_prefix_len(rows[idx[0]][plen:], rows[i][plen:], seg)
            seg = min(seg, cap)
            if seg >= _MIN_SHARED_TOKENS:
                units.append((rows[idx[0]][plen : plen + seg], idx))
            else:
                singles.extend(idx)

        # rows without a shared segment: tails straight after the prefix
        order = sorted(singles, key=lambda i: len(rows[i]))
        for batch in self._batches(order, lambda i: len(rows[i]) - plen):
            tails = [rows[i][plen:] for i in batch]
            out = self._forward_tails(prefix_kv, plen, None, [0] * len(batch), tails, n_out, stats)
            self._store(results, batch, reduce(out, batch))

        # rows sharing a segment: chunks of segments (sorted by length) run first, then the
        # tails of all their rows on top of them
        units.sort(key=lambda u: len(u[0]))
        budget = _SEGMENT_CHUNK_BATCHES * self.max_batch_tokens
        chunk: list[tuple[list[int], list[int]]] = []
        for unit in units:
            if chunk and len(unit[0]) * (len(chunk) + 1) > budget:
                self._score_chunk(rows, chunk, prefix_kv, plen, n_out, reduce, results, stats)
                chunk = []
            chunk.append(unit)
        if chunk:
            self._score_chunk(rows, chunk, prefix_kv, plen, n_out, reduce, results, stats)

    def _store(self, results: list[Any], batch: list[int], values: Any) -> None:
        for b, i in enumerate(batch):
            results[i] = values[b]

    def _score_chunk(
        self,
        rows: list[list[int]],
        chunk: list[tuple[list[int], list[int]]],
        prefix_kv: list[tuple[Any, Any]] | None,
        plen: int,
        n_out: int,
        reduce: Callable[[Any, list[int]], Any],
        results: list[Any],
        stats: ForwardStats,
    ) -> None:
        import torch

        segs = [seg for seg, _ in chunk]
        leads = [idx[0] for _, idx in chunk]
        width_all = max(len(seg) for seg in segs)
        store: list[tuple[Any, Any]] = []
        # pass 1: each unit's first row whole (segment + its own tail), keeping the segment's
        # keys/values for the unit's other rows
        by_length = sorted(range(len(chunk)), key=lambda u: len(rows[leads[u]]))
        for batch in self._batches(by_length, lambda u: len(rows[leads[u]]) - plen):
            rest = [rows[leads[u]][plen:] for u in batch]
            out, kv = self._forward_tails(
                prefix_kv, plen, None, [0] * len(batch), rest, n_out, stats, keep_kv=True
            )
            firsts = [leads[u] for u in batch]
            self._store(results, firsts, reduce(out, firsts))
            if not store:
                # zeros, not garbage: masked keys get weight 0, and 0 x NaN would still be NaN
                store = [
                    (
                        k.new_zeros((len(segs), k.shape[1], width_all, k.shape[-1])),
                        v.new_zeros((len(segs), v.shape[1], width_all, v.shape[-1])),
                    )
                    for k, v in kv
                ]
            for b, u in enumerate(batch):
                w = len(segs[u])  # the shared segment only; the rest stays zero
                for (sk, sv), (k, v) in zip(store, kv, strict=True):
                    sk[u, :, :w] = k[b, :, :w]
                    sv[u, :, :w] = v[b, :, :w]
        # pass 2: the other rows' tails on top of prefix + segment, sorted by tail length (tail
        # padding costs full forward work, segment padding only a little attention)
        unit_of = {i: u for u, (_, idx) in enumerate(chunk) for i in idx[1:]}
        order = sorted(unit_of, key=lambda i: len(rows[i]) - len(segs[unit_of[i]]))
        for batch in self._batches(order, lambda i: len(rows[i]) - plen - len(segs[unit_of[i]])):
            units = [unit_of[i] for i in batch]
            seg_lens = [len(segs[u]) for u in units]
            width = max(seg_lens)
            sel = torch.tensor(units, device=self.device)
            kv = [(k[sel, :, :width], v[sel, :, :width]) for k, v in store]
            tails = [rows[i][plen + len(segs[u]) :] for i, u in zip(batch, units, strict=True)]
            out = self._forward_tails(prefix_kv, plen, kv, seg_lens, tails, n_out, stats)
            self._store(results, batch, reduce(out, batch))

    def _right_pad(self, seqs: list[list[int]], width: int) -> tuple[Any, Any]:
        import torch

        pad = self.tokenizer.pad_token_id or 0
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for b, s in enumerate(seqs):
            ids[b, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[b, : len(s)] = 1
        return ids, mask

    def _forward_tails(
        self,
        prefix_kv: list[tuple[Any, Any]] | None,
        plen: int,
        seg_kv: list[tuple[Any, Any]] | None,
        seg_lens: list[int],
        tails: list[list[int]],
        n_out: int,
        stats: ForwardStats,
        keep_kv: bool = False,
    ) -> Any:
        """Hidden states at the last ``n_out`` real positions of each tail: [B, n_out, hidden]
        (with ``keep_kv``, also the tails' per-layer keys/values, [B, heads, longest, dim]).

        Key/value layout per row: [prefix | segment (right-padded) | tail (right-padded)]; the
        2-D attention mask hides both paddings and positions are the rows' true positions."""
        import torch

        n, width = len(tails), max(len(t) for t in tails)
        seg_width = max(seg_lens)
        ids, tail_mask = self._right_pad(tails, width)
        seg_mask = torch.zeros((n, seg_width), dtype=torch.long)
        for b, s in enumerate(seg_lens):
            seg_mask[b, :s] = 1
        mask = torch.cat([torch.ones((n, plen), dtype=torch.long), seg_mask, tail_mask], dim=1)
        pos = torch.arange(width).expand(n, -1) + (plen + torch.tensor(seg_lens)).unsqueeze(1)

        layers: list[tuple[Any, Any]] = []
        if prefix_kv is not None or seg_kv is not None:
            for layer in range(len(prefix_kv if prefix_kv is not None else seg_kv)):
                parts_k, parts_v = [], []
                if prefix_kv is not None:
                    k, v = prefix_kv[layer]
                    parts_k.append(k.expand(n, -1, -1, -1))
                    parts_v.append(v.expand(n, -1, -1, -1))
                if seg_kv is not None and seg_width:
                    k, v = seg_kv[layer]
                    parts_k.append(k)
                    parts_v.append(v)
                layers.append((torch.cat(parts_k, dim=2), torch.cat(parts_v, dim=2)))
        kwargs: dict[str, Any] = {}
        if layers:
            kwargs[self._cache_kw] = self._make_cache(layers)
        out = self._decoder(
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            position_ids=pos.to(self.device),
            use_cache=bool(layers) or keep_kv,
            **kwargs,
        )
        hidden = out.last_hidden_state
        lens = torch.tensor([len(t) for t in tails], device=self.device)
        at = (lens.unsqueeze(1) - n_out + torch.arange(n_out, device=self.device)).clamp_min(0)
        gathered = hidden.gather(1, at.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))
        real = sum(len(t) for t in tails)
        stats.batches += 1
        stats.computed_tokens += real
        stats.padded_tokens += n * width - real
        if keep_kv:
            past = plen + seg_width
            return gathered, [(k[:, :, past:], v[:, :, past:]) for k, v in self._cache_tensors(out)]
        return gathered
