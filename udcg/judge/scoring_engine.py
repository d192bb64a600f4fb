"""Batched forward passes of a causal LM that read hidden states at each row's last positions.

:meth:`ScoringEngine.score` runs rows of token ids and reads exactly what one plain forward pass
per row would, with far less work:

* the token prefix shared by every row (e.g. chat template and system message) is run once and
  its key/value cache kept (a small LRU) for later calls;
* rows that share a key (e.g. the same passage judged for several questions) also share the
  key/value cache of their common tokens after the prefix: those run once, only the tails run
  per row;
* variable-length tails are right-padded in length-sorted batches under a token budget and read
  at each row's last real tokens (a causal mask keeps padding invisible to real tokens);
* the caller's ``reduce`` sees only the gathered positions, so the vocabulary projection never
  runs over whole sequences;
* identical rows are run once.
"""

from __future__ import annotations

import inspect
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# Shared runs shorter than this are not worth a separate forward pass.
MIN_SHARED_TOKENS = 8
PREFIX_CACHE_SIZE = 4
# Cost model of one forward pass, in tokens: a fixed per-call cost, and small batches run as
# slowly as this many tokens (matrix products too thin to use the cores well).
BATCH_OVERHEAD_TOKENS = 32
SMALL_BATCH_TOKENS = 128
# Segment key/value caches held at once, in units of max_batch_tokens.
SEGMENT_CHUNK_BATCHES = 4

KeyValues = list[tuple[Any, Any]]  # per layer: (keys, values), [batch, heads, tokens, dim]
Reduce = Callable[[Any, list[Any]], Any]  # (hidden [B, n_out, H], batch entries) -> [B]


@dataclass
class ForwardStats:
    """Token accounting of the forward passes of one call (for benchmarks and logs)."""

    rows: int = 0
    unique_rows: int = 0
    prompt_tokens: int = 0  # tokens of all prompts, as a one-at-a-time loop would run them
    computed_tokens: int = 0  # real tokens that went through the model
    padded_tokens: int = 0  # padding that went through the model
    batches: int = 0
    shared_rows: int = 0  # rows that ran only their tail on another row's passage cache
    forward_s: float = 0.0  # wall seconds in forward calls (on CUDA: until kernels are queued)


def common_prefix_len(a: Sequence[int], b: Sequence[int], limit: int | None = None) -> int:
    """Length of the common start of ``a`` and ``b`` (at most ``limit``)."""
    n = min(len(a), len(b)) if limit is None else min(len(a), len(b), limit)
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def plan_batches(
    order: list[int], cost: Callable[[int], int], max_rows: int, max_tokens: int
) -> Iterator[list[int]]:
    """Cut ``order`` (sorted by ascending ``cost``, a length) into consecutive batches.

    Dynamic programming over the cut points minimises the modelled time of all batches,
    ``max(rows x longest, SMALL_BATCH_TOKENS) + BATCH_OVERHEAD_TOKENS`` each (padding costs as
    much as real tokens; tiny batches and every forward call have a fixed cost), under
    ``max_rows`` rows and ``max_tokens`` padded tokens per batch (a single row may exceed it)."""
    lengths = [max(1, cost(i)) for i in order]
    n = len(lengths)
    best = [0.0] + [math.inf] * n
    cut = [0] * (n + 1)
    for end in range(1, n + 1):
        longest = lengths[end - 1]
        for rows in range(1, min(max_rows, end) + 1):
            tokens = rows * longest
            if rows > 1 and tokens > max_tokens:
                break
            c = best[end - rows] + max(tokens, SMALL_BATCH_TOKENS) + BATCH_OVERHEAD_TOKENS
            if c < best[end]:
                best[end], cut[end] = c, end - rows
    spans = []
    end = n
    while end > 0:
        spans.append((cut[end], end))
        end = cut[end]
    for lo, hi in reversed(spans):
        yield order[lo:hi]


def _store(results: list[Any], batch: list[int], values: Any) -> None:
    for b, i in enumerate(batch):
        results[i] = values[b]


class ScoringEngine:
    """Scores token rows with ``model`` (a ``transformers`` causal LM) on ``device``.

    ``batch_size`` bounds the rows and ``max_batch_tokens`` the padded new tokens of one forward
    pass; both may be changed between calls. ``pad_token_id`` fills the padding (never read).
    """

    def __init__(
        self, model: Any, device: Any, pad_token_id: int, batch_size: int, max_batch_tokens: int
    ) -> None:
        self.model = model
        self.device = device
        self.pad_token_id = pad_token_id
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self._decoder = model.get_decoder()
        self._lm_head = model.get_output_embeddings()
        self._softcap = getattr(model.config, "final_logit_softcapping", None)
        params = inspect.signature(self._decoder.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._prefix_kv: OrderedDict[tuple[int, ...], KeyValues] = OrderedDict()

    def log_softmax(self, hidden: Any) -> Any:
        """Next-token log-probabilities (float32) from hidden states [..., H]."""
        import torch

        logits = self._lm_head(hidden).float()
        if self._softcap:
            logits = torch.tanh(logits / self._softcap) * self._softcap
        return torch.log_softmax(logits, dim=-1)

    def score(
        self,
        rows: list[list[int]],
        n_out: int,
        reduce: Reduce,
        *,
        prefix: tuple[int, ...] | None,
        groups: Sequence[Any] | None,
        row_data: Sequence[Any] | None = None,
    ) -> tuple[np.ndarray, ForwardStats]:
        """``reduce(hidden states at its last n_out positions, data)`` of every row (float64),
        ``data`` being the batch rows' entries of ``row_data`` (hashable; None when not given),
        and the token accounting of the call. ``rows`` must not be empty.

        ``prefix``: token ids that rows are expected to start with (the rows' common prefix
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
                plen = common_prefix_len(first, r, plen)
            prefix = tuple(first[:plen]) if plen >= MIN_SHARED_TOKENS else ()
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
        return values, stats

    def _batches(self, order: list[int], cost: Callable[[int], int]) -> Iterator[list[int]]:
        return plan_batches(order, cost, self.batch_size, self.max_batch_tokens)

    def _prefix_cache(self, prefix: tuple[int, ...], stats: ForwardStats) -> KeyValues:
        """Per-layer (keys, values) of ``prefix`` with batch size 1, computed once (LRU)."""
        import torch

        kv = self._prefix_kv.get(prefix)
        if kv is not None:
            self._prefix_kv.move_to_end(prefix)
            return kv
        ids = torch.tensor([prefix], device=self.device)
        out = self._forward(stats, input_ids=ids, use_cache=True)
        stats.computed_tokens += len(prefix)
        kv = self._cache_tensors(out)
        self._prefix_kv[prefix] = kv
        while len(self._prefix_kv) > PREFIX_CACHE_SIZE:
            self._prefix_kv.popitem(last=False)
        return kv

    def _forward(self, stats: ForwardStats, **inputs: Any) -> Any:
        """One forward pass of the decoder, counted and timed in ``stats``."""
        t0 = time.perf_counter()
        out = self._decoder(**inputs)
        stats.forward_s += time.perf_counter() - t0
        stats.batches += 1
        return out

    @staticmethod
    def _cache_tensors(out: Any) -> KeyValues:
        cache = getattr(out, "cache", None)
        if cache is None:
            cache = out.past_key_values
        return [(layer.keys, layer.values) for layer in cache.layers]

    def _make_cache(self, kv: KeyValues) -> Any:
        from transformers import DynamicCache

        return DynamicCache(ddp_cache_data=kv, config=self.model.config)

    def _score_group(
        self,
        rows: list[list[int]],
        members: list[int],
        prefix: tuple[int, ...],
        keys: list[Any],
        n_out: int,
        reduce: Reduce,
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
                seg = common_prefix_len(rows[idx[0]][plen:], rows[i][plen:], seg)
            seg = min(seg, cap)
            if seg >= MIN_SHARED_TOKENS:
                units.append((rows[idx[0]][plen : plen + seg], idx))
                stats.shared_rows += len(idx) - 1
            else:
                singles.extend(idx)

        # rows without a shared segment: tails straight after the prefix
        order = sorted(singles, key=lambda i: len(rows[i]))
        for batch in self._batches(order, lambda i: len(rows[i]) - plen):
            tails = [rows[i][plen:] for i in batch]
            out = self._forward_tails(prefix_kv, plen, None, [0] * len(batch), tails, n_out, stats)
            _store(results, batch, reduce(out, batch))

        # rows sharing a segment: chunks of segments (sorted by length) run first, then the
        # tails of all their rows on top of them
        units.sort(key=lambda u: len(u[0]))
        budget = SEGMENT_CHUNK_BATCHES * self.max_batch_tokens
        chunk: list[tuple[list[int], list[int]]] = []
        for unit in units:
            if chunk and len(unit[0]) * (len(chunk) + 1) > budget:
                self._score_chunk(rows, chunk, prefix_kv, plen, n_out, reduce, results, stats)
                chunk = []
            chunk.append(unit)
        if chunk:
            self._score_chunk(rows, chunk, prefix_kv, plen, n_out, reduce, results, stats)

    def _score_chunk(
        self,
        rows: list[list[int]],
        chunk: list[tuple[list[int], list[int]]],
        prefix_kv: KeyValues | None,
        plen: int,
        n_out: int,
        reduce: Reduce,
        results: list[Any],
        stats: ForwardStats,
    ) -> None:
        import torch

        segs = [seg for seg, _ in chunk]
        leads = [idx[0] for _, idx in chunk]
        width_all = max(len(seg) for seg in segs)
        store: KeyValues = []
        # pass 1: each unit's first row whole (segment + its own tail), keeping the segment's
        # keys/values for the unit's other rows
        by_length = sorted(range(len(chunk)), key=lambda u: len(rows[leads[u]]))
        for batch in self._batches(by_length, lambda u: len(rows[leads[u]]) - plen):
            rest = [rows[leads[u]][plen:] for u in batch]
            out, kv = self._forward_tails(
                prefix_kv, plen, None, [0] * len(batch), rest, n_out, stats, keep_kv=True
            )
            firsts = [leads[u] for u in batch]
            _store(results, firsts, reduce(out, firsts))
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
            _store(results, batch, reduce(out, batch))

    def _right_pad(self, seqs: list[list[int]], width: int) -> tuple[Any, Any]:
        import torch

        ids = torch.full((len(seqs), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for b, s in enumerate(seqs):
            ids[b, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[b, : len(s)] = 1
        return ids, mask

    def _forward_tails(
        self,
        prefix_kv: KeyValues | None,
        plen: int,
        seg_kv: KeyValues | None,
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

        layers: KeyValues = []
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
        out = self._forward(
            stats,
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
        stats.computed_tokens += real
        stats.padded_tokens += n * width - real
        if keep_kv:
            past = plen + seg_width
            return gathered, [(k[:, :, past:], v[:, :, past:]) for k, v in self._cache_tensors(out)]
        return gathered
