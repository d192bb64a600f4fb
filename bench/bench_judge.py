"""Abstention probabilities on NQ: the reference one-pair-at-a-time loop against
``TransformersJudge.abstain_prob``, same model (embedded SmolLM2-135M-Instruct, float32 or
``--dtype``), at several job sizes in one run.

    HF_HUB_OFFLINE=1 python bench/bench_judge.py --pairs 50 80 200 500 --json /tmp/bench_judge.json

Pairs: consecutive NQ-open questions, each with its own gold passage and with the next question's
gold passage (so every passage is judged for two questions); ``--unshared``: each question with
its own gold passage only (every pair a distinct passage). What is timed is what a user runs:
one ``judge.abstain_prob(questions, passages)`` call on a loaded judge, against the reference loop
over the same pairs. Loading the judge (``load_embedded_judge``, its warm-up included) is common
to both and reported on its own.

Every size runs ``--rounds`` rounds, each on its own fresh slice of ``size`` pairs (no pair is
scored twice in the run); every round runs each method once on its slice, the method order
alternating from round to round (over all sizes), so a noisy shared CPU weighs on both alike.
Throughput is pairs / wall time summed over the size's rounds; the per-round speed-ups and the
ratio of process CPU times (less sensitive to other processes on the machine) are shown too.
Before the rounds, the first ``abstain_prob`` call of the process is timed on its own slice and
the same pairs are scored again: the difference is what a cold first call pays.

Breakdown of the batched time: seconds inside forward passes (the rest is tokenisation, batch
planning and key/value copies), padding share (padding tokens / tokens run), and the passage
sharing hit rate (rows that ran only their tail on top of another row's passage cache).

FLOPs are estimated as 2 x (non-embedding parameters) x (tokens run through the model), the
vocabulary projection left out (the reference computes it at every position, the batched path
only at the read positions).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

NQ = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "nq-open-oracle.jsonl.gz"
REFERENCE, BATCHED = "reference loop", "abstain_prob"


def load_pairs(path: Path, n_questions: int, unshared: bool = False) -> tuple[list[str], list[str]]:
    """Question-major pairs: question i with gold i, then with gold i+1 (wrapping); with
    ``unshared``, question i with gold i only (every passage judged once)."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for _, line in zip(range(n_questions), fh, strict=False)]
    if len(rows) < n_questions:
        raise SystemExit(f"{path} has {len(rows)} questions, this run needs {n_questions}")
    questions = [r["question"] for r in rows]
    golds = [r["ctxs"][0]["text"] for r in rows]
    if unshared:
        return questions, golds
    qs, ps = [], []
    for i, q in enumerate(questions):
        qs += [q, q]
        ps += [golds[i], golds[(i + 1) % len(golds)]]
    return qs, ps


def reference_loop(judge, questions: list[str], passages: list[str]) -> tuple[np.ndarray, int]:
    """The reference: per pair, template to text, tokenize, one forward, softmax of the last
    position, probability of the first NO-RESPONSE token. Returns values and tokens run."""
    import torch

    from udcg.judge.prompts import ABSTAIN_MARKER, abstain_messages

    tok, model = judge.tokenizer, judge.model
    marker = tok.encode(ABSTAIN_MARKER, add_special_tokens=False)[0]
    out, tokens = [], 0
    for q, p in zip(questions, passages, strict=True):
        text = tok.apply_chat_template(
            abstain_messages(q, p), tokenize=False, add_generation_prompt=True
        )
        inputs = tok(text, return_tensors="pt", truncation=True, add_special_tokens=False)
        tokens += inputs["input_ids"].shape[1]
        with torch.no_grad():
            logits = model(**inputs).logits
        out.append(torch.softmax(logits[0, -1, :], dim=-1)[marker].item())
    return np.array(out), tokens


@dataclass
class SizeResult:
    """Sums over one size's rounds."""

    pairs: int
    wall: dict[str, float] = field(default_factory=lambda: {REFERENCE: 0.0, BATCHED: 0.0})
    cpu: dict[str, float] = field(default_factory=lambda: {REFERENCE: 0.0, BATCHED: 0.0})
    ratios: list[float] = field(default_factory=list)
    diffs: list[float] = field(default_factory=list)
    reference_tokens: int = 0
    forward_s: float = 0.0
    batches: int = 0
    needed: int = 0  # real tokens the batched path ran
    padded: int = 0
    rows: int = 0
    shared_rows: int = 0

    def row(self) -> dict[str, float]:
        ref, bat = self.wall[REFERENCE], self.wall[BATCHED]
        n = self.pairs * len(self.ratios)
        return {
            "pairs": self.pairs,
            "rounds": len(self.ratios),
            "reference_pairs_per_s": n / ref,
            "batched_pairs_per_s": n / bat,
            "speedup": ref / bat,
            "speedup_cpu_time": self.cpu[REFERENCE] / self.cpu[BATCHED],
            "speedup_per_round": self.ratios,
            "batched_forward_share": self.forward_s / bat,
            "batches_per_call": self.batches / len(self.ratios),
            "padding_share": self.padded / max(self.needed + self.padded, 1),
            "tokens_run_vs_reference": (self.needed + self.padded) / self.reference_tokens,
            "sharing_hit_rate": self.shared_rows / max(self.rows, 1),
            "max_abs_diff": max(self.diffs),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, nargs="+", default=[50, 80, 200, 500])
    parser.add_argument("--rounds", type=int, default=2, help="rounds (fresh slices) per size")
    parser.add_argument("--batch-size", type=int, default=None, help="judge default if unset")
    parser.add_argument("--max-batch-tokens", type=int, default=None, help="judge default")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument("--no-warm-up", action="store_true", help="load the judge without it")
    parser.add_argument("--data", type=Path, default=NQ)
    parser.add_argument(
        "--unshared", action="store_true", help="every pair its own passage (no passage sharing)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument(
        "--dtype", default="float32", help="weights of the judge and the reference (bfloat16)"
    )
    args = parser.parse_args()
    if min(args.pairs) < 1 or args.rounds < 1:
        parser.error("--pairs and --rounds must be >= 1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from udcg.judge.embedded import load_embedded_judge

    if args.threads:
        torch.set_num_threads(args.threads)
    first = args.pairs[0]
    needed = first + sum(args.pairs) * args.rounds
    qs, ps = load_pairs(args.data, needed if args.unshared else needed // 2 + 1, args.unshared)
    t0 = time.perf_counter()
    judge = load_embedded_judge(
        batch_size=args.batch_size,
        max_batch_tokens=args.max_batch_tokens,
        warm_up=not args.no_warm_up,
        dtype=args.dtype,
    )
    judge.probe()  # the model loads on first use: load it inside the timed span
    load_s = time.perf_counter() - t0
    n_params = sum(p.numel() for n, p in judge.model.named_parameters() if "embed_tokens" not in n)

    # the process's first call, then the same pairs again
    cold_q, cold_p = qs[:first], ps[:first]
    t0 = time.perf_counter()
    judge.abstain_prob(cold_q, cold_p)
    cold_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    judge.abstain_prob(cold_q, cold_p)
    warm_s = time.perf_counter() - t0

    threads = torch.get_num_threads()
    results = {size: SizeResult(size) for size in dict.fromkeys(args.pairs)}

    def save() -> None:  # after every size, so that a stopped run keeps what it measured
        if args.json is not None:
            summary = {
                "load_s": load_s,
                "warm_up": not args.no_warm_up,
                "first_call_s": cold_s,
                "first_call_again_s": warm_s,
                "first_call_pairs": first,
                "threads": threads,
                "sizes": [res.row() for res in results.values() if res.ratios],
            }
            args.json.write_text(json.dumps(summary, indent=1))

    start, g = first, 0
    for size, res in results.items():
        for r in range(args.rounds):
            q, p = qs[start : start + size], ps[start : start + size]
            start += size
            order = [REFERENCE, BATCHED] if g % 2 == 0 else [BATCHED, REFERENCE]
            g += 1
            wall, values = {}, {}
            for m in order:
                t0, c0 = time.perf_counter(), time.process_time()
                if m == REFERENCE:
                    values[m], tokens = reference_loop(judge, q, p)
                else:
                    values[m] = judge.abstain_prob(q, p)
                wall[m] = time.perf_counter() - t0
                res.wall[m] += wall[m]
                res.cpu[m] += time.process_time() - c0
            res.reference_tokens += tokens
            st = judge.last_stats
            res.forward_s += st.forward_s
            res.batches += st.batches
            res.needed += st.computed_tokens
            res.padded += st.padded_tokens
            res.rows += st.rows
            res.shared_rows += st.shared_rows
            res.ratios.append(wall[REFERENCE] / wall[BATCHED])
            res.diffs.append(float(np.abs(values[REFERENCE] - values[BATCHED]).max()))
            print(
                f"{size} pairs, round {r + 1}/{args.rounds}: reference {wall[REFERENCE]:.1f}s, "
                f"abstain_prob {wall[BATCHED]:.1f}s ({res.ratios[-1]:.2f}x), "
                f"{order[0]} first",
                flush=True,
            )
        save()

    table = [res.row() for res in results.values()]
    print()
    print(
        f"SmolLM2-135M-Instruct {args.dtype}, torch {torch.__version__}, {threads} threads, "
        f"{n_params / 1e6:.1f}M non-embedding parameters; batch_size={judge.batch_size}, "
        f"max_batch_tokens={judge.max_batch_tokens}; {args.rounds} rounds per size, "
        f"alternating method order"
    )
    print(
        f"judge load {load_s:.1f}s ({'no warm-up' if args.no_warm_up else 'warm-up included'}); "
        f"first abstain_prob call of the process {cold_s:.2f}s for {first} pairs, "
        f"the same pairs again {warm_s:.2f}s"
    )
    print()
    print(
        "| pairs | reference pairs/s | abstain_prob pairs/s | speed-up | per round "
        "| CPU-time ratio | in forward passes | batches/call | padding share "
        "| tokens run vs reference | sharing hit rate | max abs diff |"
    )
    print("| ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in table:
        per_round = ", ".join(f"{x:.2f}" for x in row["speedup_per_round"])
        print(
            f"| {row['pairs']} | {row['reference_pairs_per_s']:.2f} "
            f"| {row['batched_pairs_per_s']:.2f} | **{row['speedup']:.2f}x** | {per_round} "
            f"| {row['speedup_cpu_time']:.2f}x "
            f"| {100 * row['batched_forward_share']:.0f}% | {row['batches_per_call']:.1f} "
            f"| {100 * row['padding_share']:.1f}% | {row['tokens_run_vs_reference']:.2f} "
            f"| {100 * row['sharing_hit_rate']:.0f}% | {row['max_abs_diff']:.1e} |"
        )
    speedups = [row["speedup"] for row in table]
    print(f"\nspeed-up: min {min(speedups):.2f}x, median {statistics.median(speedups):.2f}x")


if __name__ == "__main__":
    main()
