"""Greedy generation with the embedded judge under two batch token budgets.

    HF_HUB_OFFLINE=1 python bench/bench_generate.py

16 answer prompts (the first 16 NQ-open questions, each with three of the first 24 gold
passages), 64 new tokens; prints the wall time per
budget and whether the completions are identical.
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

from udcg.judge import load_judge
from udcg.judge.prompts import answer_messages

NQ = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "nq-open-oracle.jsonl.gz"


def main() -> None:
    with gzip.open(NQ, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for _, line in zip(range(24), fh, strict=False)]
    texts = [r["ctxs"][0]["text"] for r in rows]
    prompts = [
        answer_messages(r["question"], [texts[(i + j) % len(texts)] for j in range(3)])
        for i, r in enumerate(rows)
    ]
    judge = load_judge("smollm2-135m")
    judge.generate(prompts[:2], max_new_tokens=4)  # warm-up
    outputs = {}
    for budget in (1024, 8192):
        judge.max_generate_tokens = budget
        start = time.perf_counter()
        outputs[budget] = judge.generate(prompts[:16], max_new_tokens=64)
        print(f"budget {budget:>5} tokens: {time.perf_counter() - start:.1f} s")
    print("identical completions:", outputs[1024] == outputs[8192])


if __name__ == "__main__":
    main()
