"""A judge running a causal LM in-process with ``transformers`` (CPU or CUDA).

:class:`TransformersJudge` loads the model on the first call that needs it (its fingerprint
needs no weights, so a run the cache answers whole never loads it), builds and tokenises the
prompts (the reference abstention prompt, rendered by the model's chat template) and reads each
operation's probabilities from hidden states that
:class:`~udcg.judge.scoring_engine.ScoringEngine` computes in batches, sharing the key/value
caches of common prefixes and passages.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.judge.base import Judge, OnResult
from udcg.judge.file_digest import file_sha256
from udcg.judge.prompts import ABSTAIN_MARKER, Messages, abstain_messages
from udcg.judge.requests import Request, column
from udcg.judge.scoring_engine import (
    ForwardStats,
    ScoringEngine,
    common_prefix_len,
    plan_batches,
)
from udcg.judge.spec import local_key

log = logging.getLogger(__name__)

YES_WORDS = ("Yes", " Yes")
NO_WORDS = ("No", " No")
# warm-up pairs: two questions on one passage, so both the whole-row and the shared-passage
# passes of the scoring engine run
WARM_UP_PASSAGE = (
    "The Danube flows from the Black Forest through ten countries, among them Austria and "
    "Hungary, and reaches the Black Sea in Romania after about 2,850 kilometres."
)
WARM_UP_QUESTIONS = ("Where does the Danube end?", "How long is the Danube?")


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


def _single_token_ids(tokenizer: Any, words: Sequence[str]) -> list[int]:
    """The distinct ids of those ``words`` that are one token for ``tokenizer``."""
    ids = []
    for w in words:
        enc = tokenizer.encode(w, add_special_tokens=False)
        if len(enc) == 1 and enc[0] not in ids:
            ids.append(enc[0])
    if not ids:
        raise UDCGInputError(f"none of {list(words)} is a single token for this tokenizer")
    return ids


def cuda_expected() -> bool:
    """Whether ``torch.cuda.is_available()`` will say yes, read without importing torch (seconds
    of start-up): a CUDA build of torch (its ``version.py``), a visible device
    (``CUDA_VISIBLE_DEVICES``) and an NVIDIA device node. The judge checks the answer when it
    loads its model."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return False
    try:
        version = (Path(spec.origin).parent / "version.py").read_text(encoding="utf-8")
    except OSError:
        return False
    built = re.search(r"^cuda\b[^=]*=\s*(.+)$", version, re.MULTILINE)
    if built is None or built.group(1).strip() == "None":
        return False
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return any(Path("/dev").glob("nvidia[0-9]*"))


class TransformersJudge(Judge):
    """Judge backed by a local ``transformers`` causal LM with a chat template.

    Parameters
    ----------
    model_id_or_path:
        Hub id or local directory (with ``gguf_file``: the directory holding that GGUF file).
    name:
        Key of the values this judge produces; defaults to the id or path as given
        (:func:`~udcg.judge.spec.local_key`).
    device:
        ``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
    dtype:
        ``torch`` dtype or its name; default float32 on CPU, bfloat16 on CUDA.
    batch_size:
        Most rows per forward pass; default 16 on CPU, 64 on CUDA.
    max_batch_tokens:
        Most (padded) new tokens per forward pass: rows per batch <=
        max_batch_tokens // longest row. Default 1024 on CPU (larger batches let activations
        fall out of the CPU caches), 16384 on CUDA.
    max_generate_tokens:
        The same bound for :meth:`generate` batches (prompt + new tokens per row). Decoding
        reads every weight once per step whatever the batch size, so wider batches pay off:
        default 8192 on CPU, 65536 on CUDA.
    max_passage_tokens:
        Truncation policy of :meth:`abstain_prob`: a passage longer than this many tokens (its own
        tokenization, no special tokens) is cut to its first ``max_passage_tokens`` tokens (the head
        is kept) before the prompt is built. Each cut is counted in ``n_truncated`` (cumulative over
        the judge's life) and logged. ``None`` disables truncation (the reference behaviour).
    gguf_file:
        Name of a GGUF file inside ``model_id_or_path`` to de-quantise and load.
    share_passages:
        Let pairs with the same passage share its key/value cache (exact; off only to measure).
    warm_up:
        Run :meth:`warm_up` at the end of loading, so that the first scoring call does not pay
        the one-off costs of the first forward passes.
    source_id:
        Identity of the weights for ``fingerprint`` instead of the (machine-specific) path.

    The tokenizer and the model load on first use (a scoring call, :meth:`probe`, or the
    ``tokenizer``/``model``/``engine`` attributes); ``loads`` counts the loads. ``fingerprint``
    needs neither, nor ``torch``: with ``device="auto"`` the device is foreseen
    (:func:`cuda_expected`) and checked when the model loads.

    ``abstain_prob`` reads the same token ids as the reference loop (chat template rendered to
    text, then tokenised with the tokenizer's default special tokens), so ``first_token`` values
    equal the reference's up to floating-point reassociation. ``last_stats`` holds the token
    accounting (:class:`~udcg.judge.scoring_engine.ForwardStats`) of the latest scoring call.
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
        warm_up: bool = True,
    ) -> None:
        if max_passage_tokens is not None and max_passage_tokens < 1:
            raise UDCGInputError(
                f"must be >= 1 or None, got {max_passage_tokens}", field="max_passage_tokens"
            )
        source = str(model_id_or_path)
        device = str(device)
        self._device_asked = device
        if device == "auto":
            device = "cuda" if cuda_expected() else "cpu"
        self._device_name = device
        on_cuda = device.startswith("cuda")
        if dtype is None:
            dtype = "bfloat16" if on_cuda else "float32"
        self._dtype_name = str(dtype).removeprefix("torch.")

        self.name = name or local_key(source)
        self.source = source
        self.gguf_file = gguf_file
        self._limits = {
            "batch_size": int(batch_size or (64 if on_cuda else 16)),
            "max_batch_tokens": int(max_batch_tokens or (16384 if on_cuda else 1024)),
            "max_generate_tokens": int(max_generate_tokens or (65536 if on_cuda else 8192)),
        }
        for what, value in self._limits.items():
            if value < 1:
                raise UDCGInputError(f"must be >= 1, got {value}", field=what)
        self.max_generate_tokens = self._limits["max_generate_tokens"]
        self.max_passage_tokens = max_passage_tokens
        self.share_passages = bool(share_passages)
        self.n_truncated = 0
        self.last_stats = ForwardStats()
        self.loads = 0
        self._abstain_prefix: tuple[int, ...] | None = None
        self._loaded: dict[str, Any] | None = None
        self._warm_up = bool(warm_up)
        self._weights = self._weights_id(source_id)

    # ------------------------------------------------------------------ loading

    def _load_weights(self) -> tuple[Any, Any]:
        """The tokenizer and the model (on the CPU) of ``source``."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        load_kw: dict[str, Any] = {}
        if self.gguf_file is not None:
            load_kw["gguf_file"] = self.gguf_file
        tokenizer = AutoTokenizer.from_pretrained(self.source, **load_kw)
        model = AutoModelForCausalLM.from_pretrained(self.source, dtype=self.dtype, **load_kw)
        return tokenizer, model

    def _load(self) -> dict[str, Any]:
        """Load the tokenizer and the model once (the first call that needs them), check them,
        build the scoring engine and warm it up (``warm_up``)."""
        if self._loaded is not None:
            return self._loaded
        import torch

        if self._device_asked == "auto" and torch.cuda.is_available() != (
            self._device_name == "cuda"
        ):
            raise UDCGInputError(
                f"device=auto chose {self._device_name} before loading, but torch says CUDA is "
                f"{'' if torch.cuda.is_available() else 'not '}available: pass device=cpu or "
                "device=cuda",
                field="device",
            )
        tokenizer, model = self._load_weights()
        self.loads += 1
        if tokenizer.chat_template is None:
            raise UDCGInputError(f"model {self.source!r} has no chat template")
        device = torch.device(self._device_name)
        model = model.to(device).eval()
        marker = tokenizer.encode(ABSTAIN_MARKER, add_special_tokens=False)
        if not marker:
            raise UDCGInputError(
                f"the tokenizer of {self.source!r} maps {ABSTAIN_MARKER!r} to no token"
            )
        engine = ScoringEngine(
            model,
            device,
            pad_token_id=tokenizer.pad_token_id or 0,
            batch_size=self._limits["batch_size"],
            max_batch_tokens=self._limits["max_batch_tokens"],
        )
        self._loaded = {
            "tokenizer": tokenizer,
            "model": model,
            "device": device,
            "engine": engine,
            "marker_ids": list(marker),
            "yes_ids": _single_token_ids(tokenizer, YES_WORDS),
            "no_ids": _single_token_ids(tokenizer, NO_WORDS),
        }
        if self._warm_up:
            self.warm_up()
        return self._loaded

    def probe(self) -> None:
        """Load the model now (the cache calls this before the first call it cannot answer)."""
        self._load()

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer (loads the model on first use)."""
        return self._load()["tokenizer"]

    @property
    def model(self) -> Any:
        """The causal LM, in eval mode on :attr:`device` (loaded on first use)."""
        return self._load()["model"]

    @property
    def engine(self) -> ScoringEngine:
        """The scoring engine over :attr:`model` (loads the model on first use)."""
        return self._load()["engine"]

    @property
    def device(self) -> Any:
        """The ``torch.device`` the model runs on (loads the model on first use)."""
        return self._load()["device"]

    @property
    def dtype(self) -> Any:
        """The ``torch`` dtype of the model's weights."""
        import torch

        return getattr(torch, self._dtype_name)

    @property
    def marker_ids(self) -> list[int]:
        """Token ids of the abstention marker (loads the model on first use)."""
        return self._load()["marker_ids"]

    @property
    def yes_ids(self) -> list[int]:
        """Single-token ids of the Yes words (loads the model on first use)."""
        return self._load()["yes_ids"]

    @property
    def no_ids(self) -> list[int]:
        """Single-token ids of the No words (loads the model on first use)."""
        return self._load()["no_ids"]

    def _set_limit(self, what: str, value: int) -> None:
        self._limits[what] = value
        if self._loaded is not None:
            setattr(self._loaded["engine"], what, value)

    @property
    def batch_size(self) -> int:
        """Most rows per forward pass (scoring and :meth:`generate`)."""
        return self._limits["batch_size"]

    @batch_size.setter
    def batch_size(self, value: int) -> None:
        self._set_limit("batch_size", value)

    @property
    def max_batch_tokens(self) -> int:
        """Most (padded) new tokens per scoring forward pass."""
        return self._limits["max_batch_tokens"]

    @max_batch_tokens.setter
    def max_batch_tokens(self, value: int) -> None:
        self._set_limit("max_batch_tokens", value)

    # ------------------------------------------------------------------ identity

    def _weights_id(self, source_id: str | None) -> str:
        """Backend + identity of the weights (path or id, GGUF name/size/hash)."""
        path = Path(self.source)
        if source_id is None:
            source_id = str(path.resolve()) if path.exists() else self.source
            if self.gguf_file is not None:
                gguf = path / self.gguf_file
                if gguf.is_file():
                    digest = file_sha256(gguf)[:16]
                    source_id += f"|gguf={self.gguf_file}:{gguf.stat().st_size}:{digest}"
                else:
                    source_id += f"|gguf={self.gguf_file}"
        return f"transformers|{source_id}"

    @property
    def fingerprint(self) -> str:  # type: ignore[override]
        """Backend, weights, dtype and truncation policy: what changes the values produced."""
        dtype = self._dtype_name
        return f"{self._weights}|dtype={dtype}|max_passage_tokens={self.max_passage_tokens}"

    def __repr__(self) -> str:
        return f"TransformersJudge(name={self.name!r}, fingerprint={self.fingerprint!r})"

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
            self._abstain_prefix = tuple(ids[0][: common_prefix_len(ids[0], ids[1])])
        return self._abstain_prefix

    # ------------------------------------------------------------------ public API

    def warm_up(self) -> None:
        """Score two short abstention pairs that share a passage and discard the values.

        Builds the abstention prefix's key/value cache (kept for later calls) and pays the
        one-off costs of the first forward passes (thread pool start, first allocations, lazy
        set-up of the attention paths) now rather than in the first real call. Values of later
        calls do not depend on it; ``last_stats`` and ``n_truncated`` are left as they were.
        """
        stats, truncated = self.last_stats, self.n_truncated
        self.abstain_prob(list(WARM_UP_QUESTIONS), [WARM_UP_PASSAGE] * len(WARM_UP_QUESTIONS))
        self.last_stats, self.n_truncated = stats, truncated

    def compute(self, op: str, requests: list[Request], on_result: OnResult | None) -> Any:
        """The values of one call of ``op`` (see :meth:`Judge.compute`)."""
        params = requests[0].params
        if op == "yes_prob":
            return self._yes(column(requests, "messages"))
        if op == "generate":
            return self._generate(column(requests, "messages"), params["max_new_tokens"])
        if op == "generate_json":
            return super().compute(op, requests, on_result)
        questions, passages = column(requests, "question"), column(requests, "passage")
        if op == "abstain_prob":
            return self._abstain(questions, passages, params["mode"])
        return self._answer(questions, passages, column(requests, "answers"))

    def _abstain(self, questions: Sequence[str], passages: Sequence[str], mode: str) -> np.ndarray:
        """P(abstain) per (question, passage) pair under the reference prompt (see class doc).

        ``first_token``: next-token probability of the first token of NO-RESPONSE right after the
        generation prompt. ``sequence``: product of the teacher-forced probabilities of all its
        tokens. Returns float64 values in [0, 1]; passages over ``max_passage_tokens`` tokens are
        truncated to their head first.
        """
        questions = _check_texts(questions, "questions")
        passages = _check_texts(passages, "passages")
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
            logp = self.engine.log_softmax(hidden)
            picked = logp.gather(-1, target_t.expand(logp.shape[0], -1).unsqueeze(-1))
            return picked.squeeze(-1).sum(-1)

        groups = passages if self.share_passages else None
        logp, self.last_stats = self.engine.score(rows, n_out, reduce, prefix=prefix, groups=groups)
        return np.exp(logp)

    def _answer(
        self, questions: Sequence[str], passages: Sequence[str], answers: Sequence[Sequence[str]]
    ) -> np.ndarray:
        """Max over acceptable answers of exp(mean token log-prob of the answer), teacher-forced
        as the assistant turn of the abstention prompt (see :meth:`Judge.answer_prob`).

        The answer's tokens are those of ``rendered prompt + answer`` after the prompt's own
        tokens (the text the chat template puts in the assistant turn, before its end-of-turn
        marker); a tokenizer that merges the answer into the prompt's last token is an error.
        Passages are truncated as in :meth:`abstain_prob`. Float64 values in [0, 1].
        """
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
            logp = self.engine.log_softmax(hidden[valid])  # vocabulary only where an answer is read
            picked = logp.gather(-1, target[valid].unsqueeze(-1)).squeeze(-1)
            owner = torch.arange(len(batch), device=self.device).unsqueeze(1).expand(-1, width)
            sums = torch.zeros(len(batch), device=self.device).index_add(0, owner[valid], picked)
            return sums / n.to(self.device)

        groups = [passages[i] for i, _ in flat] if self.share_passages else None
        mean_logp, self.last_stats = self.engine.score(
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

    def _yes(self, prompts: Sequence[Messages]) -> np.ndarray:
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
            logp = self.engine.log_softmax(hidden)[:, 0, :]
            margin = torch.logsumexp(logp[:, yes], -1) - torch.logsumexp(logp[:, no], -1)
            return torch.sigmoid(margin)  # P(yes)/(P(yes)+P(no)) without underflow

        values, self.last_stats = self.engine.score(rows, 1, reduce, prefix=None, groups=None)
        return values

    def _generate(self, prompts: Sequence[Messages], max_new_tokens: int) -> list[str]:
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
            batches = plan_batches(
                order,
                lambda i: len(rows[i]) + max_new_tokens,
                self.batch_size,
                self.max_generate_tokens,
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
