"""A judge running a causal LM in-process with ``transformers`` (CPU or CUDA).

The model loads on the first call that needs it (the fingerprint needs no weights); prompts are
the reference abstention prompt rendered by the chat template, and probabilities are read from
hidden states that :class:`~udcg.judge.scoring_engine.ScoringEngine` computes in batches.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import numbers
import os
import re
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from udcg._lazy import require_transformers_torch
from udcg.errors import UDCGInputError
from udcg.judge.base import Judge, OnResult, check_texts
from udcg.judge.file_digest import file_sha256, folder_sha256
from udcg.judge.prompts import ABSTAIN_MARKER, Messages, abstain_messages
from udcg.judge.requests import RefusedRequest, Request, column
from udcg.judge.scoring_engine import ForwardStats, ScoringEngine, common_prefix_len, plan_batches
from udcg.judge.spec import local_key

log = logging.getLogger(__name__)

YES_WORDS = ("Yes", " Yes")
NO_WORDS = ("No", " No")
# warm-up: two questions on one passage, so both scoring passes (whole row, shared passage) run
WARM_UP_PASSAGE = (
    "The Danube flows from the Black Forest through ten countries, among them Austria and "
    "Hungary, and reaches the Black Sea in Romania after about 2,850 kilometres."
)
WARM_UP_QUESTIONS = ("Where does the Danube end?", "How long is the Danube?")
#: Names of torch's floating-point dtypes that ``dtype`` takes (``torch.`` prefix allowed).
FLOAT_DTYPES = ("float32", "float", "bfloat16", "float16", "half", "float64", "double")
_DTYPE_ALIASES = {"float": "float32", "half": "float16", "double": "float64"}


def _last_message(messages: Messages) -> str:
    """The content of the last message of a conversation (what names it in errors)."""
    return messages[-1]["content"] if messages else ""


def _single_token_ids(tokenizer: Any, words: Sequence[str]) -> list[int]:
    """The distinct ids of those ``words`` that are one token for ``tokenizer``."""
    encoded = [tokenizer.encode(w, add_special_tokens=False) for w in words]
    ids = list(dict.fromkeys(enc[0] for enc in encoded if len(enc) == 1))
    if not ids:
        raise UDCGInputError(f"none of {list(words)} is a single token for this tokenizer")
    return ids


def cuda_expected() -> bool:
    """Whether ``torch.cuda.is_available()`` will say yes, without importing torch: a CUDA build
    (torch's ``version.py``), ``CUDA_VISIBLE_DEVICES`` not empty/-1, an NVIDIA device node."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return False
    try:
        version = (Path(spec.origin).parent / "version.py").read_text(encoding="utf-8")
    except OSError:
        return False
    built = re.search(r"^cuda\b[^=]*=\s*(.+)$", version, re.MULTILINE)
    cuda_build = built is not None and built.group(1).strip() != "None"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "all").strip() not in ("", "-1")
    return cuda_build and visible and any(Path("/dev").glob("nvidia[0-9]*"))


def _model_part(key: str, doc: str) -> Any:
    return property(lambda self: self._load()[key], doc=f"{doc} (loads the model on first use).")


#: The settings that set which rows of each operation run together.
_BATCHED_BY = {
    "abstain_prob": ("batch_size", "max_batch_tokens", "share_passages"),
    "answer_prob": ("batch_size", "max_batch_tokens", "share_passages"),
    "yes_prob": ("batch_size", "max_batch_tokens"),
    "generate": ("batch_size", "max_generate_tokens"),
    "generate_json": ("batch_size", "max_generate_tokens"),
}


class TransformersJudge(Judge):
    """Judge backed by a local ``transformers`` causal LM with a chat template.

    Parameters:
        model_id_or_path: hub id or local directory (with ``gguf_file``: the directory of that
            GGUF file, de-quantised on load).
        name: key of the values it produces; default :func:`~udcg.judge.spec.local_key`.
        device: ``"auto"`` (CUDA when :func:`cuda_expected`, checked at load), ``"cpu"``,
            ``"cuda"``, ``"cuda:1"``...
        dtype: a floating-point ``torch`` dtype or its name (:data:`FLOAT_DTYPES`); default
            float32 (in bfloat16 a value moves with the other rows of its batch, by percents).
        batch_size: most rows per forward pass; default 16 on CPU, 64 on CUDA.
        max_batch_tokens: most padded new tokens per forward pass; default 1024 / 16384.
        max_generate_tokens: the same bound for :meth:`generate` (prompt + new tokens per row);
            default 8192 / 65536.
        max_passage_tokens: a longer passage is cut to its first that many tokens before the
            prompt is built (counted in ``n_truncated``, logged); ``None``: no cut.
        gguf_file: name of a GGUF file inside ``model_id_or_path``.
        share_passages: pairs with one passage share its key/value cache (exact; off only to
            measure).
        warm_up: run :meth:`warm_up` at the end of loading.
        source_id: identity of the weights in ``fingerprint`` instead of the local path (by
            default a local folder's path and the SHA-256 of the files transformers loads
            from it, :func:`~udcg.judge.file_digest.folder_sha256`; a hub id as given).

    ``loads`` counts model loads; ``last_stats`` is the
    :class:`~udcg.judge.scoring_engine.ForwardStats` of the latest scoring call. Token ids equal
    the reference loop's (template rendered to text, tokenised with default special tokens).
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
        self.source, self.gguf_file = str(model_id_or_path), gguf_file
        self.name = name or local_key(self.source)
        self._device_asked = device = str(device)
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
            raise UDCGInputError(
                f"must be auto, cpu, cuda or cuda:N, got {device!r}", field="device"
            )
        if device == "auto":
            device = "cuda" if cuda_expected() else "cpu"
        self._device_name, cuda = device, device.startswith("cuda")
        dtype = "float32" if dtype is None else dtype
        self._dtype_name = str(dtype).removeprefix("torch.")
        self._dtype_name = _DTYPE_ALIASES.get(self._dtype_name, self._dtype_name)
        if self._dtype_name not in FLOAT_DTYPES:
            raise UDCGInputError(
                f"must be a floating-point torch dtype ({', '.join(FLOAT_DTYPES)}), got {dtype!r}",
                field="dtype",
            )
        self.batch_size = int(batch_size if batch_size is not None else 64 if cuda else 16)
        self.max_batch_tokens = int(
            max_batch_tokens if max_batch_tokens is not None else 16384 if cuda else 1024
        )
        self.max_generate_tokens = int(
            max_generate_tokens if max_generate_tokens is not None else 65536 if cuda else 8192
        )
        for what in ("batch_size", "max_batch_tokens", "max_generate_tokens"):
            if getattr(self, what) < 1:
                raise UDCGInputError(f"must be >= 1, got {getattr(self, what)}", field=what)
        self.max_passage_tokens = max_passage_tokens
        self.share_passages = bool(share_passages)
        self.loads = 0
        self._cut: set[bytes] = set()  # digests of the distinct passages cut
        self.last_stats = ForwardStats()
        self._abstain_prefix: tuple[int, ...] | None = None
        self._loaded: dict[str, Any] | None = None
        self._warm_up = bool(warm_up)
        path = Path(self.source)  # the weights' identity: path or id, GGUF name/size/hash,
        if source_id is None:  # or a local folder's path and the hash of what loads from it
            source_id = str(path.resolve()) if path.exists() else self.source
            if gguf_file is not None:
                gguf = path / gguf_file
                source_id += f"|gguf={gguf_file}"
                if gguf.is_file():
                    source_id += f":{gguf.stat().st_size}:{file_sha256(gguf)[:16]}"
            elif path.is_dir():
                source_id += f"|files={folder_sha256(path)[:16]}"
        self._weights = f"transformers|{source_id}"

    def _load_weights(self) -> tuple[Any, Any]:
        """The tokenizer and the model (on the CPU) of ``source``."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        kw = {} if self.gguf_file is None else {"gguf_file": self.gguf_file}
        tokenizer = AutoTokenizer.from_pretrained(self.source, **kw)
        return tokenizer, AutoModelForCausalLM.from_pretrained(self.source, dtype=self.dtype, **kw)

    def _load(self) -> dict[str, Any]:
        """Load and check the tokenizer and model once, build the engine, warm it up."""
        if self._loaded is not None:
            return self._loaded
        require_transformers_torch(f"the judge {self.name!r}")
        import torch

        cuda = torch.cuda.is_available()
        if self._device_asked.startswith("cuda") and not cuda:
            raise UDCGInputError(
                f"device={self._device_asked}: torch says CUDA is not available here (a CPU "
                "build, or no visible GPU): pass device=cpu",
                field="device",
            )
        if self._device_asked == "auto" and cuda != (self._device_name == "cuda"):
            raise UDCGInputError(
                f"device=auto chose {self._device_name} before loading, but torch says CUDA is "
                f"{'' if cuda else 'not '}available: pass device=cpu or device=cuda",
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
        engine = ScoringEngine(model, device, tokenizer.pad_token_id or 0)
        engine.check_head(tokenizer.encode(WARM_UP_PASSAGE, add_special_tokens=False)[:16])
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

    tokenizer = _model_part("tokenizer", "The model's tokenizer")
    model = _model_part("model", "The causal LM, in eval mode on :attr:`device`")
    engine = _model_part("engine", "The :class:`ScoringEngine` over :attr:`model`")
    device = _model_part("device", "The ``torch.device`` the model runs on")
    marker_ids = _model_part("marker_ids", "Token ids of the abstention marker")
    yes_ids = _model_part("yes_ids", "Single-token ids of the Yes words")
    no_ids = _model_part("no_ids", "Single-token ids of the No words")

    @property
    def max_passage_tokens(self) -> int | None:
        """Tokens a passage is cut to for abstention and answer likelihood (None: uncut)."""
        return self._max_passage_tokens

    @max_passage_tokens.setter
    def max_passage_tokens(self, value: int | None) -> None:
        whole = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        if value is not None and not (whole and value >= 1):
            raise UDCGInputError(f"must be >= 1 or None, got {value!r}", field="max_passage_tokens")
        self._max_passage_tokens = None if value is None else int(value)

    @property
    def dtype(self) -> Any:
        """The ``torch`` dtype of the model's weights."""
        import torch

        return getattr(torch, self._dtype_name)

    @property
    def fingerprint(self) -> str:  # type: ignore[override]
        """Backend, weights, dtype and truncation policy: what changes the values produced."""
        policy = f"dtype={self._dtype_name}|max_passage_tokens={self.max_passage_tokens}"
        return f"{self._weights}|{policy}"

    def batch_settings(self, operations: Collection[str] | None = None) -> dict[str, Any]:
        """The limits and sharing that set which rows of ``operations`` (None: all) run
        together (see :meth:`_score`, :meth:`_generate`)."""
        ops = _BATCHED_BY if operations is None else operations
        wanted = {name for op in ops for name in _BATCHED_BY.get(op, ())}
        names = ("batch_size", "max_batch_tokens", "max_generate_tokens", "share_passages")
        return {name: getattr(self, name) for name in names if name in wanted}

    def __repr__(self) -> str:
        return f"TransformersJudge(name={self.name!r}, fingerprint={self.fingerprint!r})"

    def _render(self, messages: Messages) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )

    def _encode(self, texts: list[str]) -> list[list[int]]:
        """Token ids of rendered chat prompts: the template writes its special tokens, so none
        is added (a tokenizer that adds BOS would otherwise start with two)."""
        if not texts:
            return []
        return [list(x) for x in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def _abstain_prompts(self, questions: Sequence[str], passages: Sequence[str]) -> list[str]:
        pairs = zip(questions, passages, strict=True)
        return [self._render(abstain_messages(q, p)) for q, p in pairs]

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
                self._cut.add(hashlib.blake2b(passages[i].encode(), digest_size=16).digest())
                cut += 1
                log.debug("passage %d truncated from %d to %d tokens", i, len(ids), limit)
        if cut:
            log.info("%d of %d passages truncated to their first %d tokens", cut, len(out), limit)
        return out

    @property
    def n_truncated(self) -> int:
        """Distinct passages cut to ``max_passage_tokens`` so far (once, whatever the steps and
        questions that read them)."""
        return len(self._cut)

    @property
    def cut_passages(self) -> frozenset[bytes]:
        """Digests of the passages counted by :attr:`n_truncated` (the same in every process:
        Ray's workers' are joined)."""
        return frozenset(self._cut)

    def _abstain_template_prefix(self) -> tuple[int, ...]:
        """Token ids that every abstention prompt starts with (template up to ``Document:``)."""
        if self._abstain_prefix is None:
            a, b = self._encode(
                self._abstain_prompts(["who is a", "what is b"], ["alpha beta", "gamma delta"])
            )
            self._abstain_prefix = tuple(a[: common_prefix_len(a, b)])
        return self._abstain_prefix

    def _score(
        self, rows: list[list[int]], n_out: int, reduce: Any, passages: Any, **kw: Any
    ) -> np.ndarray:
        """``engine.score`` under this judge's limits, its stats kept in ``last_stats``. Rows
        with ``passages`` are abstention prompts (they start with the template prefix; those on
        one passage share its cache when ``share_passages``); other rows share their common
        prefix."""
        self._check_context(rows, 0, kw.pop("names"), kw.pop("items", None))
        limits = (self.batch_size, self.max_batch_tokens)
        prefix = None if passages is None else self._abstain_template_prefix()
        groups = passages if self.share_passages else None
        values, self.last_stats = self.engine.score(
            rows, n_out, reduce, limits, prefix=prefix, groups=groups, **kw
        )
        return values

    def _check_context(
        self,
        rows: list[list[int]],
        new_tokens: int,
        names: Sequence[str],
        items: Sequence[int] | None = None,
    ) -> None:
        """Refuse (:class:`~udcg.judge.requests.RefusedRequest`) a row that, with
        ``new_tokens`` to generate, is longer than the model's context
        (``max_position_embeddings``): its values would be made past it, unwarned. ``names[i]``:
        the question or message of row i, which the refusal quotes (the end of a message: the
        question, in udcg's prompts); ``items[i]`` the request it scores (default: i)."""
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if not isinstance(limit, int):
            return
        for i, (row, name) in enumerate(zip(rows, names, strict=True)):
            if len(row) + new_tokens > limit:
                also = f" and {new_tokens} to generate" if new_tokens else ""
                quoted = name if len(name) <= 80 else f"...{name[-77:]}"  # its question
                raise RefusedRequest(
                    f"the prompt of {quoted!r} is {len(row)} tokens{also}, over the context of"
                    f" {self.source!r} ({limit} tokens); shorten its texts (max_passage_tokens"
                    " cuts passages for abstention and answer likelihood)",
                    i if items is None else items[i],
                )

    def warm_up(self) -> None:
        """Score two short abstention pairs on one passage and discard the values: builds the
        prefix's key/value cache and pays the first passes' one-off costs now. Later values do
        not depend on it; ``last_stats`` and ``n_truncated`` are left as they were."""
        stats, truncated = self.last_stats, set(self._cut)
        try:
            self.abstain_prob(list(WARM_UP_QUESTIONS), [WARM_UP_PASSAGE] * len(WARM_UP_QUESTIONS))
        except RefusedRequest:  # not the user's text: the model's context is that short
            limit = self.model.config.max_position_embeddings
            raise UDCGInputError(
                f"{self.source!r} has a context of {limit} tokens, shorter than udcg's shortest"
                " abstention prompt (a one-line question and passage): it cannot judge"
            ) from None
        self.last_stats, self._cut = stats, truncated

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
        """P(abstain) per pair (see :meth:`Judge.abstain_prob`): float64 in [0, 1]."""
        questions = check_texts(questions, "questions")
        passages = check_texts(passages, "passages")
        if mode not in ("first_token", "sequence"):
            raise UDCGInputError(f"unknown mode {mode!r}: use 'first_token' or 'sequence'")
        passages = self._truncate_passages(passages)
        targets = self.marker_ids if mode == "sequence" else self.marker_ids[:1]
        # teacher forcing: the marker's tokens but its last, read at the last len(targets) slots
        rows = [r + targets[:-1] for r in self._encode(self._abstain_prompts(questions, passages))]
        import torch

        target_t = torch.tensor(targets, device=self.device)

        def reduce(hidden: Any, _rows: list[Any]) -> Any:  # [B, n_out, H] -> [B] log P(marker)
            return self.engine.log_softmax(hidden, target_t.expand(len(hidden), -1)).sum(-1)

        return np.exp(self._score(rows, len(targets), reduce, passages, names=questions))

    def _answer(
        self, questions: Sequence[str], passages: Sequence[str], answers: Sequence[Sequence[str]]
    ) -> np.ndarray:
        """Max over acceptable answers of exp(mean token log-prob of the answer) (see
        :meth:`Judge.answer_prob`): the tokens of ``rendered prompt + answer`` after the prompt's
        own; a tokenizer that merges the answer into the prompt's last token is an error."""
        passages = self._truncate_passages(passages)
        prompts = self._abstain_prompts(questions, passages)
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
            targets.append(full[len(base) :])
        width = max(len(t) for t in targets)
        # row b predicts its n_b answer tokens at its last n_b of ``width`` read positions
        padded = [(-1,) * (width - len(t)) + tuple(t) for t in targets]
        import torch

        def reduce(hidden: Any, batch: list[tuple[int, ...]]) -> Any:  # [B, width, H] -> [B]
            target = torch.tensor(batch, device=self.device)
            valid = target >= 0  # the vocabulary only where an answer token is read
            picked = self.engine.log_softmax(hidden[valid], target[valid])
            owner = valid.nonzero()[:, 0]
            sums = torch.zeros(len(batch), device=self.device).index_add(0, owner, picked)
            return sums / valid.sum(1)

        passages = [passages[i] for i, _ in flat]
        names, items = [questions[i] for i, _ in flat], [i for i, _ in flat]
        mean_logp = self._score(
            rows, width, reduce, passages, row_data=padded, names=names, items=items
        )
        best = np.zeros(len(questions), dtype=np.float64)
        np.maximum.at(best, [i for i, _ in flat], np.exp(mean_logp))
        return best

    def _yes(self, prompts: Sequence[Messages]) -> np.ndarray:
        """P(yes) / (P(yes) + P(no)) of the first answer token after the generation prompt, yes
        and no being the single-token forms of YES_WORDS and NO_WORDS."""
        rows = self._encode([self._render(list(m)) for m in prompts])
        import torch

        yes, no = (torch.tensor(ids, device=self.device) for ids in (self.yes_ids, self.no_ids))

        def reduce(hidden: Any, _rows: list[Any]) -> Any:
            logp = self.engine.log_softmax(hidden)[:, 0, :]
            margin = torch.logsumexp(logp[:, yes], -1) - torch.logsumexp(logp[:, no], -1)
            return torch.sigmoid(margin)  # P(yes)/(P(yes)+P(no)) without underflow

        return self._score(rows, 1, reduce, None, names=[_last_message(m) for m in prompts])

    def _generate(self, prompts: Sequence[Messages], max_new_tokens: int) -> list[str]:
        """Greedy completions, batched with left padding, special tokens removed."""
        import torch

        rows = self._encode([self._render(list(m)) for m in prompts])
        self._check_context(rows, max_new_tokens, [_last_message(m) for m in prompts])
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        out: list[str] = [""] * len(rows)
        tok = self.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        cost = lambda i: len(rows[i]) + max_new_tokens  # noqa: E731
        with torch.inference_mode():
            for batch in plan_batches(order, cost, self.batch_size, self.max_generate_tokens):
                width = max(len(rows[i]) for i in batch)
                ids = torch.tensor([[pad] * (width - len(rows[i])) + rows[i] for i in batch])
                mask = torch.tensor(
                    [[0] * (width - len(rows[i])) + [1] * len(rows[i]) for i in batch]
                )
                gen = self.model.generate(
                    input_ids=ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    pad_token_id=pad,
                )
                for b, i in enumerate(batch):
                    out[i] = tok.decode(gen[b, width:], skip_special_tokens=True)
        return out
