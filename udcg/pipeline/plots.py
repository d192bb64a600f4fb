"""PNG figures of the pipelines (matplotlib, imported on first use, Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_weights(model: Any, path: Path, title: str) -> None:
    """PNG of alpha_i (helpful) and beta_i (distracting) by position."""
    plt = pyplot()
    positions = np.arange(1, len(model.alpha_) + 1)
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    ax.plot(positions, model.alpha_, "o-", label="alpha (helpful: relevant x utility)")
    ax.plot(positions, model.beta_, "s--", label="beta (distracting: irrelevant x utility)")
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xticks(positions)
    ax.set_xlabel("position in the prompt")
    ax.set_ylabel("weight")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
