"""Fit UDCG-theta for one list size, tune gamma, compare every metric on held-out queries.

python train.py k=5
python train.py -m k=1,3,5,10
python train.py data=jsonl data.path=my_contexts.jsonl judge=my-judge k=10
"""

import hydra
from omegaconf import DictConfig

from udcg.cli.common import Outcome
from udcg.cli.train import main as run


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> Outcome:
    return run(cfg)


if __name__ == "__main__":
    main()
