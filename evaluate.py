"""Which retrieval metric tells how a RAG system will do, and which retriever to ship.

python evaluate.py                                  # demo questions, BM25, embedded judge
python evaluate.py -m retriever=bm25,dense,hybrid   # sweep + one summary across retrievers
python evaluate.py dataset=nq_open dataset.limit=500 k=5 theta_weights=udcg_theta_k5.safetensors
"""

import hydra
from omegaconf import DictConfig

from udcg.cli.common import Outcome
from udcg.cli.evaluate import main as run


@hydra.main(version_base="1.3", config_path="conf", config_name="evaluate")
def main(cfg: DictConfig) -> Outcome:
    return run(cfg)


if __name__ == "__main__":
    main()
