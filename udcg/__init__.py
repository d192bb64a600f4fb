"""udcg: retrieval metrics that predict what an LLM will answer.

The names below are imported on first use, so ``import udcg`` stays cheap; the subpackages
(``udcg.metrics``, ``udcg.trec``, ``udcg.theta``, ...) are imported as usual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from udcg._lazy import lazy_attributes
from udcg.errors import UDCGInputError

__version__ = "0.3.0"

#: public name -> module that defines it
_LAZY = {
    "Evaluation": "udcg.trec.engine",
    "evaluate": "udcg.trec.engine",
    "evaluate_table": "udcg.trec.engine",
    "compare": "udcg.trec.comparison",
    "ComparisonReport": "udcg.trec.comparison",
    "Qrels": "udcg.io.formats.trec",
    "Run": "udcg.io.formats.trec",
    "read_trec_qrels": "udcg.io.formats.trec",
    "read_trec_run": "udcg.io.formats.trec",
    "UDCGTheta": "udcg.theta.estimator",
}

__all__ = ["UDCGInputError", *sorted(_LAZY)]

if TYPE_CHECKING:  # the lazy names, for type checkers
    from udcg.io.formats.trec import Qrels, Run, read_trec_qrels, read_trec_run  # noqa: F401
    from udcg.theta.estimator import UDCGTheta  # noqa: F401
    from udcg.trec.comparison import ComparisonReport, compare  # noqa: F401
    from udcg.trec.engine import Evaluation, evaluate, evaluate_table  # noqa: F401


__getattr__, __dir__ = lazy_attributes("udcg", _LAZY, globals())
