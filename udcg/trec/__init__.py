"""The trec_eval engine: measures parsed from ir_measures names, runs and qrels evaluated with
trec_eval's ordering and semantics (per-query values equal pytrec_eval's).

The names below are imported on first use, so ``python -m udcg.trec`` can set up the process
(see ``__main__``) before numpy and Arrow are loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from udcg._lazy import lazy_attributes

#: public name -> module that defines it
_LAZY = {
    "Comparison": "udcg.trec.comparison",
    "ComparisonReport": "udcg.trec.comparison",
    "compare": "udcg.trec.comparison",
    "Evaluation": "udcg.trec.engine",
    "evaluate": "udcg.trec.engine",
    "evaluate_table": "udcg.trec.engine",
    "Measure": "udcg.trec.measures",
    "parse_measures": "udcg.trec.measures",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:  # the lazy names, for type checkers
    from udcg.trec.comparison import Comparison, ComparisonReport, compare  # noqa: F401
    from udcg.trec.engine import Evaluation, evaluate, evaluate_table  # noqa: F401
    from udcg.trec.measures import Measure, parse_measures  # noqa: F401


__getattr__, __dir__ = lazy_attributes("udcg.trec", _LAZY, globals())
