"""PNG figures of the pipelines (matplotlib, imported on first use). Figures are drawn with
matplotlib's object-oriented API (:class:`matplotlib.figure.Figure`, saved by its own canvas):
no backend is selected and pyplot's figures are left alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


class _Figures:
    """The part of ``matplotlib.pyplot`` the plots use (``subplots``, ``close``), on
    standalone :class:`matplotlib.figure.Figure` objects that pyplot does not track."""

    @staticmethod
    def subplots(
        nrows: int = 1,
        ncols: int = 1,
        *,
        figsize: tuple[float, float] | None = None,
        dpi: float | None = None,
        **kwargs: Any,
    ) -> tuple[Any, Any]:
        """``(figure, axes)`` as ``pyplot.subplots`` returns them."""
        from matplotlib.figure import Figure

        fig = Figure(figsize=figsize, dpi=dpi)
        return fig, fig.subplots(nrows, ncols, **kwargs)

    @staticmethod
    def close(fig: Any) -> None:
        """Nothing to do: pyplot never held the figure; it is freed with its last reference."""


def pyplot() -> Any:
    """An object with pyplot's ``subplots`` and ``close`` that draws on standalone figures
    (``fig.savefig`` writes the PNG with Agg whatever the process's backend).

    Examples:
        >>> fig, ax = pyplot().subplots(figsize=(2, 1))
        >>> type(fig).__name__, type(ax).__name__
        ('Figure', 'Axes')
    """
    return _Figures()


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
