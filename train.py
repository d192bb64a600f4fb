"""Fit UDCG-theta for one list size, tune gamma, compare every metric on held-out queries.

The same Hydra application as ``udcg train`` (configs in ``udcg/conf/``):

python train.py k=5
python train.py -m k=1,3,5,10
python train.py data=jsonl data.path=my_contexts.jsonl judge=my-judge k=10
"""

from udcg.cli.train import hydra_main as main

if __name__ == "__main__":
    main()
