"""PNG figures of the pipelines (matplotlib, imported on first use). Figures are drawn with
matplotlib's object-oriented API (:class:`matplotlib.figure.Figure`, saved by its own canvas):
no backend is selected and pyplot's figures are left alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def figure(figsize: tuple[float, float], dpi: float = 120) -> tuple[Any, Any]:
    """``(figure, axes)`` of a standalone :class:`matplotlib.figure.Figure` with one plot:
    pyplot does not track it, and ``fig.savefig`` writes the PNG with Agg whatever the
    process's backend.

    Examples:
        >>> fig, ax = figure(figsize=(2, 1))
        >>> type(fig).__name__, type(ax).__name__
        ('Figure', 'Axes')
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=dpi)
    return fig, fig.subplots()


def plot_weights(model: Any, path: Path, title: str) -> None:
    """PNG of alpha_i (helpful) and beta_i (distracting) by position."""
    positions = np.arange(1, len(model.alpha_) + 1)
    fig, ax = figure(figsize=(6, 3.5))
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
