"""UDCG's Table 1 (weak vs hard distractors) and Table 2 (top k of the top 25 by relevance,
utility or eRAG) on NQ-open with the embedded judge: ``udcg tables`` with this checkout's
NQ-open file as the default ``--data`` (:mod:`udcg.cli.tables`).

    python bench/udcg_tables.py distractors --limit 100 -k 5 -o bench/data/udcg_tables
    python bench/udcg_tables.py selection --limit 100 -k 5 --candidates 25 -o bench/data/udcg_tables
"""

from __future__ import annotations

from pathlib import Path

from udcg.cli.tables import main

NQ = Path(__file__).resolve().parents[2] / "shared" / "data" / "nq-open-oracle.jsonl.gz"

if __name__ == "__main__":
    raise SystemExit(main(prog="python bench/udcg_tables.py", data=str(NQ)))
