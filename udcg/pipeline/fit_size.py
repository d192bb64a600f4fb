"""A warning when UDCG-theta is fitted on few contexts per parameter (both pipelines fit it:
``train.py`` on the training queries, ``evaluate.py theta_crossfit=true`` on each half)."""

from __future__ import annotations

import warnings

from udcg.errors import UDCGWarning
from udcg.theta import UDCGTheta

#: Fewer contexts than this per fitted parameter gives a warning.
MIN_CONTEXTS_PER_PARAMETER = 20


def n_parameters(model: UDCGTheta) -> int:
    """Parameters UDCG-theta fits: alpha and beta per position, plus the bias when on."""
    return 2 * model.k + int(bool(model.bias))


def warn_if_few_contexts(n_contexts: int, model: UDCGTheta, what: str = "UDCG-theta") -> None:
    """A :class:`UDCGWarning` when ``model`` would be fitted on fewer than
    :data:`MIN_CONTEXTS_PER_PARAMETER` contexts per parameter."""
    params = n_parameters(model)
    ratio = n_contexts / params
    if ratio < MIN_CONTEXTS_PER_PARAMETER:
        warnings.warn(
            f"{what} fits {params} parameters on {n_contexts} contexts ({ratio:.1f} contexts "
            f"per parameter, fewer than {MIN_CONTEXTS_PER_PARAMETER}): its weights may not "
            "generalise; use more queries or a smaller k",
            UDCGWarning,
            stacklevel=2,
        )
