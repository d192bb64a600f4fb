"""UDCG-theta (learned positional weights) and gamma tuning for UDCG.

:class:`UDCGTheta` fits, saves and loads the learned metric; fitting needs torch and lightning,
loading and scoring only numpy and safetensors. :func:`tune_gamma` needs neither.
:mod:`udcg.theta.ordering` chooses and orders a context's passages (:func:`best_assignment`).
"""

from udcg.theta.estimator import UDCGTheta, UDCGThetaConvergenceWarning, card_path, split_by_query
from udcg.theta.gamma import DEFAULT_GRID, GammaResult, tune_gamma
from udcg.theta.ordering import ORDERINGS, best_assignment

__all__ = [
    "DEFAULT_GRID",
    "ORDERINGS",
    "GammaResult",
    "UDCGTheta",
    "UDCGThetaConvergenceWarning",
    "best_assignment",
    "card_path",
    "split_by_query",
    "tune_gamma",
]
