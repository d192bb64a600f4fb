"""Batched forward passes of a causal LM that read hidden states at each row's last positions.

:meth:`ScoringEngine.score` reads exactly what one plain forward pass per row would, with less
work: the prefix common to all rows runs once (key/value cache kept in a small LRU); rows with an
equal key (e.g. one passage) share the cache of their common tokens after it; tails run
right-padded in length-sorted batches under a token budget; ``reduce`` sees only the gathered
positions (no vocabulary projection over whole sequences); identical rows run once.
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

from udcg.errors import UDCGInputError

MIN_SHARED_TOKENS = 8  # shorter shared runs are not worth a separate forward pass
PREFIX_CACHE_SIZE = 4
# cost model of a forward pass, in tokens: a fixed per-call cost; small batches cost as much
BATCH_OVERHEAD_TOKENS = 32
SMALL_BATCH_TOKENS = 128
SEGMENT_CHUNK_BATCHES = 4  # segment key/value caches held at once, in max_batch_tokens units

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
    """Cut ``order`` (ascending ``cost``, a length) into consecutive batches minimising the sum
    of ``max(rows x longest, SMALL_BATCH_TOKENS) + BATCH_OVERHEAD_TOKENS`` (dynamic programming)
    under ``max_rows`` rows and ``max_tokens`` padded tokens per batch (one row may exceed it)."""
    lengths = [max(1, cost(i)) for i in order]
    n = len(lengths)
    best, cut = [0.0] + [math.inf] * n, [0] * (n + 1)
    for end in range(1, n + 1):
        longest = lengths[end - 1]
        for rows in range(1, min(max_rows, end) + 1):
            tokens = rows * longest
            if rows > 1 and tokens > max_tokens:
                break
            c = best[end - rows] + max(tokens, SMALL_BATCH_TOKENS) + BATCH_OVERHEAD_TOKENS
            if c < best[end]:
                best[end], cut[end] = c, end - rows
    spans, end = [], n
    while end > 0:
        spans.append((cut[end], end))
        end = cut[end]
    for lo, hi in reversed(spans):
        yield order[lo:hi]


@dataclass
class _Group:
    """The rows of one :meth:`ScoringEngine.score` call that start with one prefix."""

    rows: list[list[int]]
    keys: list[Any]
    n_out: int
    reduce: Reduce
    results: list[Any]
    stats: ForwardStats
    limits: tuple[int, int]  # most rows, most padded new tokens per forward pass
    plen: int
    prefix_kv: KeyValues | None

    def read(self, batch: list[int], hidden: Any) -> None:
        values = self.reduce(hidden, batch)
        for b, i in enumerate(batch):
            self.results[i] = values[b]

    def batches(self, order: list[int], cost: Callable[[int], int]) -> Iterator[list[int]]:
        return plan_batches(order, cost, *self.limits)


class ScoringEngine:
    """Scores token rows with ``model`` (a ``transformers`` causal LM) on ``device``."""

    def __init__(self, model: Any, device: Any, pad_token_id: int) -> None:
        self.model, self.device, self.pad_token_id = model, device, pad_token_id
        self._decoder = model.get_decoder()
        params = inspect.signature(self._decoder.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._prefix_kv: OrderedDict[tuple[int, ...], KeyValues] = OrderedDict()

    def log_softmax(self, hidden: Any, targets: Any = None) -> Any:
        """Next-token log-probabilities (float32) from hidden states [..., H]; with ``targets``
        (token ids [...]), only theirs."""
        import torch

        logits = self.model.get_output_embeddings()(hidden).float()
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        logp = torch.log_softmax(logits, dim=-1)
        return logp if targets is None else logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)

    def check_head(self, ids: list[int]) -> None:
        """Refuse a model whose own forward turns hidden states into logits otherwise than
        :meth:`log_softmax` does (a logit scale or multiplier, as Granite and Cohere apply):
        the log-probabilities of one plain forward over ``ids`` must agree within 1e-3."""
        import torch

        with torch.inference_mode():
            input_ids = torch.tensor([ids], device=self.device)
            own = torch.log_softmax(self.model(input_ids=input_ids).logits[0, -1].float(), dim=-1)
            hidden = self._decoder(input_ids=input_ids).last_hidden_state  # as score() reads it
            ours = self.log_softmax(hidden[0, -1])
        gap = float((own - ours).abs().max())
        if not gap <= 1e-3:
            raise UDCGInputError(
                f"{type(self.model).__name__} turns hidden states into logits in a way the batched"
                f" scorer does not reproduce (log-probabilities differ by {gap:.3g} on one"
                " forward pass): this model is not supported as a local judge; serve it and"
                " use an openai: judge"
            )

    def score(
        self,
        rows: list[list[int]],
        n_out: int,
        reduce: Reduce,
        limits: tuple[int, int],
        *,
        prefix: tuple[int, ...] | None,
        groups: Sequence[Any] | None,
        row_data: Sequence[Any] | None = None,
    ) -> tuple[np.ndarray, ForwardStats]:
        """``reduce(hidden states at the last n_out positions, row_data entries)`` per batch,
        for every (non-empty) row as float64, and the call's token accounting. ``limits``: most
        rows and most padded new tokens per forward pass; ``prefix``: what rows start with
        (None: their common prefix); rows with an equal ``groups`` key share the cache of their
        common tokens after it."""
        import torch

        stats = ForwardStats(rows=len(rows), prompt_tokens=sum(len(r) - n_out + 1 for r in rows))
        data = [None] * len(rows) if row_data is None else list(row_data)
        unique: dict[tuple[tuple[int, ...], Any], int] = {}  # identical rows are scored once
        slot = [
            unique.setdefault((tuple(r), d), len(unique)) for r, d in zip(rows, data, strict=True)
        ]
        urows, udata = [list(r) for r, _ in unique], [d for _, d in unique]
        read: Reduce = lambda hidden, batch: reduce(hidden, [udata[i] for i in batch])  # noqa: E731
        ukeys = {s: None if groups is None else groups[i] for i, s in enumerate(slot)}
        stats.unique_rows = len(urows)
        if prefix is None:
            first = urows[0]
            plen = min(len(r) for r in urows) - n_out
            for r in urows[1:]:
                plen = common_prefix_len(first, r, plen)
            prefix = tuple(first[:plen]) if plen >= MIN_SHARED_TOKENS else ()
        plen = len(prefix)
        fits = [not plen or (len(r) - plen >= n_out and tuple(r[:plen]) == prefix) for r in urows]
        results: list[Any] = [None] * len(urows)
        with torch.inference_mode():
            for start, fit in ((prefix, True), ((), False)):
                members = [i for i, f in enumerate(fits) if f == fit]
                if members:
                    kv = self._prefix_cache(start, stats) if start else None
                    group = _Group(
                        urows, ukeys, n_out, read, results, stats, limits, len(start), kv
                    )
                    self._score_group(group, members)
        values = torch.stack([results[s] for s in slot]).double().cpu().numpy()
        return values, stats

    def _prefix_cache(self, prefix: tuple[int, ...], stats: ForwardStats) -> KeyValues:
        """Per-layer (keys, values) of ``prefix`` with batch size 1, computed once (LRU)."""
        import torch

        if prefix in self._prefix_kv:
            self._prefix_kv.move_to_end(prefix)
        else:
            ids = torch.tensor([prefix], device=self.device)
            out = self._forward(stats, input_ids=ids, use_cache=True)
            stats.computed_tokens += len(prefix)
            self._prefix_kv[prefix] = self._cache_tensors(out)
            while len(self._prefix_kv) > PREFIX_CACHE_SIZE:
                self._prefix_kv.popitem(last=False)
        return self._prefix_kv[prefix]

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

    def _score_group(self, g: _Group, members: list[int]) -> None:
        rows, plen = g.rows, g.plen
        # units: (length of the segment shared after the prefix, member rows); rows without a
        # key, or whose key's rows share too little after the prefix (or alone), are singles
        by_key: dict[Any, list[int]] = {}
        for i in members:
            by_key.setdefault(g.keys[i], []).append(i)
        singles = by_key.pop(None, [])
        units: list[tuple[int, list[int]]] = []
        for idx in by_key.values():
            head = rows[idx[0]][plen:]
            seg = min(len(rows[i]) for i in idx) - plen - g.n_out  # each row reads after it
            for i in idx[1:]:
                seg = common_prefix_len(head, rows[i][plen:], seg)
            if len(idx) > 1 and seg >= MIN_SHARED_TOKENS:
                units.append((seg, idx))
                g.stats.shared_rows += len(idx) - 1
            else:
                singles.extend(idx)

        # rows without a shared segment: tails straight after the prefix
        order = sorted(singles, key=lambda i: len(rows[i]))
        for batch in g.batches(order, lambda i: len(rows[i]) - plen):
            tails = [rows[i][plen:] for i in batch]
            g.read(batch, self._forward_tails(g, None, [0] * len(batch), tails))
        # rows sharing a segment: chunks of segments (by length), then their rows' tails on top
        units.sort(key=lambda u: u[0])
        budget = SEGMENT_CHUNK_BATCHES * g.limits[1]
        chunk: list[tuple[int, list[int]]] = []
        for unit in units:
            if chunk and unit[0] * (len(chunk) + 1) > budget:
                self._score_chunk(g, chunk)
                chunk = []
            chunk.append(unit)
        if chunk:
            self._score_chunk(g, chunk)

    def _score_chunk(self, g: _Group, chunk: list[tuple[int, list[int]]]) -> None:
        import torch

        rows, plen = g.rows, g.plen
        segs = [seg for seg, _ in chunk]
        leads = [idx[0] for _, idx in chunk]
        width_all = max(segs)
        store: KeyValues = []
        # pass 1: each unit's first row whole (segment + its own tail), keeping the segment's
        # keys/values for the unit's other rows
        by_length = sorted(range(len(chunk)), key=lambda u: len(rows[leads[u]]))
        for batch in g.batches(by_length, lambda u: len(rows[leads[u]]) - plen):
            rest = [rows[leads[u]][plen:] for u in batch]
            out, kv = self._forward_tails(g, None, [0] * len(batch), rest, keep_kv=True)
            g.read([leads[u] for u in batch], out)
            if not store:  # zeros, not garbage: masked keys get weight 0, but 0 x NaN is NaN
                shape = lambda t: (len(segs), t.shape[1], width_all, t.shape[-1])  # noqa: E731
                store = [(k.new_zeros(shape(k)), v.new_zeros(shape(v))) for k, v in kv]
            for b, u in enumerate(batch):
                w = segs[u]  # the shared segment only; the rest stays zero
                for (sk, sv), (k, v) in zip(store, kv, strict=True):
                    sk[u, :, :w] = k[b, :, :w]
                    sv[u, :, :w] = v[b, :, :w]
        # pass 2: the other rows' tails on top of prefix + segment, sorted by tail length (tail
        # padding costs full forward work, segment padding only a little attention)
        unit_of = {i: u for u, (_, idx) in enumerate(chunk) for i in idx[1:]}
        order = sorted(unit_of, key=lambda i: len(rows[i]) - segs[unit_of[i]])
        for batch in g.batches(order, lambda i: len(rows[i]) - plen - segs[unit_of[i]]):
            units = [unit_of[i] for i in batch]
            seg_lens = [segs[u] for u in units]
            width = max(seg_lens)
            sel = torch.tensor(units, device=self.device)
            kv = [(k[sel, :, :width], v[sel, :, :width]) for k, v in store]
            tails = [rows[i][plen + s :] for i, s in zip(batch, seg_lens, strict=True)]
            g.read(batch, self._forward_tails(g, kv, seg_lens, tails))

    def _forward_tails(
        self,
        g: _Group,
        seg_kv: KeyValues | None,
        seg_lens: list[int],
        tails: list[list[int]],
        keep_kv: bool = False,
    ) -> Any:
        """Hidden states at the last ``n_out`` real positions of each tail: [B, n_out, hidden]
        (with ``keep_kv``, also the tails' per-layer keys/values, [B, heads, longest, dim]).
        Keys/values per row: [prefix | segment (right-padded) | tail (right-padded)]; the 2-D
        mask hides both paddings; positions are the rows' true positions."""
        import torch

        n, width, seg_width = len(tails), max(len(t) for t in tails), max(seg_lens)
        ids = torch.tensor([t + [self.pad_token_id] * (width - len(t)) for t in tails])
        plen, lens, seg = g.plen, torch.tensor([len(t) for t in tails]), torch.tensor(seg_lens)
        real = [torch.arange(seg_width) < seg[:, None], torch.arange(width) < lens[:, None]]
        mask = torch.cat([torch.ones((n, plen), dtype=torch.bool), *real], dim=1).long()
        pos = torch.arange(width).expand(n, -1) + (plen + seg).unsqueeze(1)
        sources = (
            []
            if g.prefix_kv is None
            else [[(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in g.prefix_kv]]
        )
        if seg_kv is not None and seg_width:
            sources.append(seg_kv)
        # per layer: (keys, values) of the sources concatenated along the tokens
        layers = [
            (torch.cat([k for k, _ in kvs], dim=2), torch.cat([v for _, v in kvs], dim=2))
            for kvs in zip(*sources, strict=True)
        ]
        kwargs: dict[str, Any] = {}
        if layers:
            from transformers import DynamicCache

            kwargs[self._cache_kw] = DynamicCache(ddp_cache_data=layers, config=self.model.config)
        out = self._forward(
            g.stats,
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            position_ids=pos.to(self.device),
            use_cache=bool(layers) or keep_kv,
            **kwargs,
        )
        hidden = out.last_hidden_state
        at = lens.to(self.device).unsqueeze(1) - g.n_out + torch.arange(g.n_out, device=self.device)
        gathered = hidden.gather(1, at.clamp_min(0).unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))
        real = sum(len(t) for t in tails)
        g.stats.computed_tokens += real
        g.stats.padded_tokens += n * width - real
        if keep_kv:
            past = plen + seg_width
            return gathered, [(k[:, :, past:], v[:, :, past:]) for k, v in self._cache_tensors(out)]
        return gathered
