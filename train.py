"""Fit UDCG-theta for one list size, tune gamma, compare every metric on held-out queries.

python train.py k=5
python train.py -m k=1,3,5,10
python train.py data=jsonl data.path=my_contexts.jsonl judge=my-judge k=10
"""

from __future__ import annotations

import csv
import logging
import sys
from pathlib import Path

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig

from udcg.errors import UDCGInputError
from udcg.training import format_table, train

log = logging.getLogger("train")


def _write_history(path: Path, history: dict[str, list[float]]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["epoch", *history])
        for epoch, values in enumerate(zip(*history.values(), strict=False), start=1):
            writer.writerow([epoch, *values])


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> None:
    try:
        model = instantiate(cfg.model)
        report = train(
            instantiate(cfg.data),
            model,
            judge=cfg.judge,
            utility=cfg.utility,
            test_fraction=cfg.test_fraction,
            seed=cfg.seed,
            method=cfg.correlation,
            n_resamples=cfg.n_bootstrap,
            gamma_grid=cfg.gamma_grid,
            export_dir=Path(cfg.export_dir),
        )
    except UDCGInputError as exc:
        print(f"train.py: error: {exc}", file=sys.stderr)
        sys.exit(2)
    if cfg.logger.history_csv:
        _write_history(Path(cfg.export_dir) / cfg.logger.history_csv, model.history_)

    print(
        f"UDCG-theta k={report.k}, judge {report.judge}: trained on {report.n_train} contexts "
        f"({report.n_train_queries} queries), held out {report.n_test} contexts "
        f"({report.n_test_queries} queries); tuned gamma = {report.gamma:.3f}"
    )
    print(format_table(report.rows))
    print(f"weights: {report.weights_path}\nplot:    {report.plot_path}")


if __name__ == "__main__":
    main()
