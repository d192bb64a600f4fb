"""Abstention probabilities on NQ: the reference one-pair-at-a-time loop against
``TransformersJudge.abstain_prob``, same model (embedded SmolLM2-135M-Instruct, float32), one run.

    HF_HUB_OFFLINE=1 python bench/bench_judge.py

Pairs: the first ``--questions`` NQ-open questions, each with its own gold passage and with the
next question's gold passage (so every passage is judged for two questions), 500 by default.
The pairs are split into ``--rounds`` rounds; every round runs each method on the same pairs,
alternating which goes first, so a noisy shared CPU weighs on all methods alike. Throughput is
total pairs / total time per method. The third method switches off passage sharing to show how
much comes from the prefix cache, length bucketing and last-position logits alone.

FLOPs are estimated as 2 x (non-embedding parameters) x (tokens run through the model), the
vocabulary projection left out (the reference computes it at every position, the batched path
only at the read positions). Peak: cores x 2 FMA units x 8 fp32 lanes (AVX2) x 2 flops x clock,
clock from /proc/cpuinfo ("cpu MHz", the nominal clock; boost clocks make the real peak higher).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import time
from pathlib import Path

import numpy as np

NQ = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "nq-open-oracle.jsonl.gz"


def load_pairs(path: Path, n_questions: int) -> tuple[list[str], list[str]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for _, line in zip(range(n_questions), fh, strict=False)]
    questions = [r["question"] for r in rows]
    golds = [r["ctxs"][0]["text"] for r in rows]
    qs, ps = [], []
    for i, q in enumerate(questions):  # question-major: a question's two pairs are adjacent
        qs += [q, q]
        ps += [golds[i], golds[(i + 1) % len(golds)]]
    return qs, ps


def reference_loop(judge, questions: list[str], passages: list[str]) -> tuple[np.ndarray, int]:
    """The reference: per pair, template to text, tokenize, one forward, softmax of the last
    position, probability of the first NO-RESPONSE token. Returns values and tokens run."""
    import torch

    tok, model = judge.tokenizer, judge.model
    from udcg.judge.prompts import ABSTAIN_MARKER, abstain_messages

    marker = tok.encode(ABSTAIN_MARKER, add_special_tokens=False)[0]
    out, tokens = [], 0
    for q, p in zip(questions, passages, strict=True):
        text = tok.apply_chat_template(
            abstain_messages(q, p), tokenize=False, add_generation_prompt=True
        )
        inputs = tok(text, return_tensors="pt", truncation=True)
        tokens += inputs["input_ids"].shape[1]
        with torch.no_grad():
            logits = model(**inputs).logits
        out.append(torch.softmax(logits[0, -1, :], dim=-1)[marker].item())
    return np.array(out), tokens


def reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_mib() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_peak_gflops(cores: int) -> tuple[float, float]:
    mhz = []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                mhz.append(float(line.split(":")[1]))
    except OSError:
        pass
    ghz = (max(mhz) if mhz else 2.0 * 1000) / 1000
    return cores * 2 * 8 * 2 * ghz, ghz


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=250)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=None, help="judge default if unset")
    parser.add_argument("--max-batch-tokens", type=int, default=None, help="judge default")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument("--data", type=Path, default=NQ)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from udcg.judge.embedded import load_embedded_judge

    if args.threads:
        torch.set_num_threads(args.threads)
    qs, ps = load_pairs(args.data, args.questions)
    judge = load_embedded_judge(batch_size=args.batch_size, max_batch_tokens=args.max_batch_tokens)
    n_params = sum(
        p.numel() for n, p in judge.model.named_parameters() if "embed_tokens" not in n
    )  # lm_head is tied to the embeddings
    threads = torch.get_num_threads()
    cores = min(os.cpu_count() or threads, threads)
    peak, ghz = cpu_peak_gflops(cores)

    def batched(share: bool):
        def run(q: list[str], p: list[str]) -> tuple[np.ndarray, int]:
            judge.share_passages = share
            values = judge.abstain_prob(q, p)
            st = judge.last_stats
            run.real += st.computed_tokens  # type: ignore[attr-defined]
            return values, st.computed_tokens + st.padded_tokens

        run.real = 0  # type: ignore[attr-defined]
        return run

    methods = {
        "reference loop": lambda q, p: reference_loop(judge, q, p),
        "abstain_prob": batched(True),
        "abstain_prob, no passage sharing": batched(False),
    }
    # warm-up (allocator, prefix cache, first-call overheads), excluded from the timings
    reference_loop(judge, qs[:2], ps[:2])
    judge.abstain_prob(qs[:4], ps[:4])

    n = len(qs)
    bounds = np.linspace(0, n, args.rounds + 1).astype(int)
    wall = dict.fromkeys(methods, 0.0)
    cpu = dict.fromkeys(methods, 0.0)
    tokens = dict.fromkeys(methods, 0)
    rss = dict.fromkeys(methods, 0.0)
    values: dict[str, list[np.ndarray]] = {m: [] for m in methods}
    ratios = []
    names = list(methods)
    for r in range(args.rounds):
        lo, hi = bounds[r], bounds[r + 1]
        order = names if r % 2 == 0 else names[::-1]
        round_wall = {}
        for m in order:
            reset_peak_rss()
            t0, c0 = time.perf_counter(), time.process_time()
            v, t = methods[m](qs[lo:hi], ps[lo:hi])
            round_wall[m] = time.perf_counter() - t0
            wall[m] += round_wall[m]
            cpu[m] += time.process_time() - c0
            tokens[m] += t
            rss[m] = max(rss[m], peak_rss_mib())
            values[m].append(v)
        ratios.append(round_wall["reference loop"] / round_wall["abstain_prob"])
        print(
            f"round {r + 1}/{args.rounds}: pairs {lo}-{hi}, "
            + ", ".join(f"{m} {round_wall[m]:.1f}s" for m in names),
            flush=True,
        )

    ref = np.concatenate(values["reference loop"])
    rows = []
    results = {}
    for m in names:
        v = np.concatenate(values[m])
        diff = np.abs(v - ref)
        gflops = 2 * n_params * tokens[m] / wall[m] / 1e9
        results[m] = {
            "pairs_per_s": n / wall[m],
            "wall_s": wall[m],
            "cpu_s": cpu[m],
            "speedup": wall["reference loop"] / wall[m],
            "max_abs_diff": float(diff.max()),
            "max_rel_diff": float((diff / ref).max()),
            "tokens": tokens[m],
            "gflops": gflops,
            "peak_fraction": gflops / peak,
            "peak_rss_mib": rss[m],
        }
        res = results[m]
        rows.append(
            f"| {m} | {res['pairs_per_s']:.2f} | {res['wall_s']:.1f} | {res['cpu_s']:.1f} "
            f"| {res['speedup']:.2f}x | {res['max_abs_diff']:.1e} | {res['max_rel_diff']:.1e} "
            f"| {tokens[m]:,} | {gflops:.1f} ({100 * gflops / peak:.0f}%) | {rss[m]:.0f} |"
        )
    real = methods["abstain_prob"].real  # type: ignore[attr-defined]
    print()
    print(
        f"{n} pairs ({args.questions} NQ questions x {{gold, next question's gold}}), "
        f"SmolLM2-135M-Instruct float32, torch {torch.__version__}, {threads} threads, "
        f"{n_params / 1e6:.1f}M non-embedding parameters; batch_size={judge.batch_size}, "
        f"max_batch_tokens={judge.max_batch_tokens}; {args.rounds} interleaved rounds"
    )
    print(
        f"CPU fp32 peak assumed {peak:.0f} GFLOP/s = {cores} cores x 2 FMA units x 8 lanes x "
        f"2 flops x {ghz:.2f} GHz (/proc/cpuinfo)"
    )
    print()
    print(
        "| method | pairs/s | wall s | CPU s | speedup | max abs diff | max rel diff "
        "| tokens run (incl. padding) | GFLOP/s (of peak) | peak RSS MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print(
        f"abstain_prob ran {real:,} real tokens for {tokens['reference loop']:,} prompt tokens "
        f"({tokens['reference loop'] / max(real, 1):.1f}x fewer); per-round speedup "
        f"min {min(ratios):.2f}x, median {statistics.median(ratios):.2f}x, max {max(ratios):.2f}x"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
