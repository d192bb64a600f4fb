"""Throughput of ``--engine ray`` with an ``openai:`` judge against a delay server: abstention
requests over ``--workers`` actors at ``--max-concurrency`` each, next to the ideal
(workers x max-concurrency / delay requests/s), timed after a warm-up call.

    python bench/delay_server.py --port 8124 --delay 0.2 --jitter 0.5 &
    python bench/bench_ray_pool.py --url http://127.0.0.1:8124/v1 --delay 0.2 --requests 3000
"""

from __future__ import annotations

import argparse
import tempfile
import time

import ray

from udcg.judge import open_judge
from udcg.judge.ray_engine import RayOptions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8124/v1")
    parser.add_argument("--delay", type=float, default=0.2, help="the server's mean delay (s)")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--max-concurrency", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--piece-size", type=int, default=None, help="default: udcg's rule")
    args = parser.parse_args()
    ray.init(include_dashboard=False, log_to_driver=False)
    engine = RayOptions(workers=args.workers, piece_size=args.piece_size)
    options = {"abstain_token": "NO", "max_concurrency": args.max_concurrency}
    with tempfile.TemporaryDirectory() as folder:
        judge = open_judge(f"openai:delay@{args.url}", None, options, f"{folder}/c", engine)
        judge.abstain_prob(["warm-up"] * 50, [f"warm-up {i}" for i in range(50)])
        stamp = time.time()  # fresh passages: no answer from the cache
        questions = [f"q{i}" for i in range(args.requests)]
        passages = [f"p{i} {stamp}" for i in range(args.requests)]
        start = time.perf_counter()
        judge.abstain_prob(questions, passages)
        rate = args.requests / (time.perf_counter() - start)
    ideal = args.workers * args.max_concurrency / args.delay
    print(
        f"{args.workers} actors x {args.max_concurrency} in flight, pieces "
        f"{args.piece_size or 'auto'}: {rate:.1f} req/s, ideal {ideal:.0f} ({rate / ideal:.0%})"
    )


if __name__ == "__main__":
    main()
