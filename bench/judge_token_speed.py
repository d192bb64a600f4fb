"""Tokens/s of the embedded judge's transformer (SmolLM2-135M-Instruct, float32 or ``--dtype``)
by batch shape and thread count: what batching and a second core can add to the local judge.

    HF_HUB_OFFLINE=1 python bench/judge_token_speed.py --rows 1 4 16 32 --length 128 --threads 1 2

Each cell times ``--repeats`` forward passes of ``rows`` x ``length`` random token ids through
the model body (the vocabulary projection left out: the batched judge runs it at the read
position only) after one untimed pass, and prints the median tokens/s. Thread counts are set
with ``torch.set_num_threads`` in this script's own process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--length", type=int, default=128, help="tokens per row")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", default="float32", help="weights (e.g. bfloat16)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from udcg.judge.embedded import load_embedded_judge

    judge = load_embedded_judge(warm_up=False, dtype=args.dtype)
    body = judge.model.model  # the transformer without its vocabulary projection
    vocab = judge.model.config.vocab_size
    speed: dict[tuple[int, int], float] = {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        for rows in args.rows:
            ids = torch.randint(
                0, vocab, (rows, args.length), generator=torch.Generator().manual_seed(rows)
            )
            times = []
            with torch.inference_mode():
                for repeat in range(args.repeats + 1):
                    start = time.perf_counter()
                    body(input_ids=ids)
                    if repeat:  # the first pass is untimed
                        times.append(time.perf_counter() - start)
            speed[threads, rows] = rows * args.length / statistics.median(times)
    shape = f"{args.length} tokens per row, median of {args.repeats} passes"
    print(f"tokens/s, {args.dtype}, {shape}\n")
    print("| rows | " + " | ".join(f"{t} thread(s)" for t in args.threads) + " |")
    print("| ---: |" + " ---: |" * len(args.threads))
    for rows in args.rows:
        cells = " | ".join(f"{speed[t, rows]:,.0f}" for t in args.threads)
        print(f"| {rows} | {cells} |")


if __name__ == "__main__":
    main()
