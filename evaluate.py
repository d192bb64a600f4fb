"""Which retrieval metric tells how a RAG system will do, and which retriever to ship.

The same Hydra application as ``udcg benchmark`` (configs in ``udcg/conf/``):

python evaluate.py                                  # demo questions, BM25, embedded judge
python evaluate.py -m retriever=bm25,dense,hybrid   # sweep + one summary across retrievers
python evaluate.py dataset=nq_open dataset.limit=500 k=5 theta_weights=udcg_theta_k5.safetensors
"""

from udcg.cli.benchmark import hydra_main as main

if __name__ == "__main__":
    main()
