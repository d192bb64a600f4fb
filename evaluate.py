"""Which retrieval metric tells how a RAG system will do, and which retriever to ship.

python evaluate.py                                  # demo questions, BM25, embedded judge
python evaluate.py -m retriever=bm25,dense,hybrid   # sweep + one summary across retrievers
python evaluate.py dataset=nq_open dataset.limit=500 k=5 theta_weights=udcg_theta_k5.safetensors
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from udcg.errors import UDCGInputError
from udcg.pipeline.run import evaluate


@hydra.main(version_base="1.3", config_path="conf", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    try:
        report, files = evaluate(cfg, Path(cfg.output_dir))
    except UDCGInputError as exc:
        print(f"evaluate.py: error: {exc}", file=sys.stderr)
        sys.exit(2)
    setup = report["setup"]
    method = cfg.correlation
    print(
        f"{setup['run']} on {setup['dataset']}: {setup['n_contexts']} contexts, k={setup['k']}, "
        f"judge {setup['judge']}, accuracy {setup['accuracy']:.3f}"
    )
    for row in report["correlations"]:
        value = "n/a" if row[method] is None else f"{row[method]:+.3f}"
        print(f"  {row['metric']:<12} {method} {value}")
    print("report: " + ", ".join(str(f) for f in files))


if __name__ == "__main__":
    main()
