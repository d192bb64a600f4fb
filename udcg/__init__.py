"""udcg: retrieval metrics that predict what an LLM will answer.

Each job from ``import udcg`` alone:

* score a run: :func:`evaluate` (per query, trec_eval's numbers) or :func:`evaluate_table`;
* compare runs: :func:`compare` (paired tests with corrected p-values, a :class:`ComparisonReport`);
* label contexts with a judge: :func:`load_judge` and :func:`label`;
* score labelled contexts into a pandas DataFrame: :func:`score_contexts` (UDCG, UDCG-theta,
  the classic metrics, Q-CARE's);
* fit and load UDCG-theta: :func:`fit_theta`, :class:`UDCGTheta` (``save_pretrained``,
  ``from_pretrained``).

Files: :func:`read_trec_run`, :func:`read_trec_qrels`, :func:`read_contexts`,
:func:`write_contexts`; :func:`demo_contexts` is the shipped demo set. The names are imported
on first use, so ``import udcg`` stays cheap; the subpackages (``udcg.metrics``, ``udcg.trec``,
``udcg.theta``, ...) are imported as usual.
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
    "fit_theta": "udcg.pipeline.training",
    "Context": "udcg.io.contexts.model",
    "Passage": "udcg.io.contexts.model",
    "read_contexts": "udcg.io.contexts.jsonl",
    "write_contexts": "udcg.io.contexts.jsonl",
    "demo_contexts": "udcg.demo_data",
    "load_judge": "udcg.judge",
    "label": "udcg.pipeline.label",
    "score_contexts": "udcg.pipeline.context_scores",
}

__all__ = ["UDCGInputError", *sorted(_LAZY)]

if TYPE_CHECKING:  # the lazy names, for type checkers
    from udcg.demo_data import demo_contexts  # noqa: F401
    from udcg.io.contexts.jsonl import read_contexts, write_contexts  # noqa: F401
    from udcg.io.contexts.model import Context, Passage  # noqa: F401
    from udcg.io.formats.trec import Qrels, Run, read_trec_qrels, read_trec_run  # noqa: F401
    from udcg.judge import load_judge  # noqa: F401
    from udcg.pipeline.context_scores import score_contexts  # noqa: F401
    from udcg.pipeline.label import label  # noqa: F401
    from udcg.pipeline.training import fit_theta  # noqa: F401
    from udcg.theta.estimator import UDCGTheta  # noqa: F401
    from udcg.trec.comparison import ComparisonReport, compare  # noqa: F401
    from udcg.trec.engine import Evaluation, evaluate, evaluate_table  # noqa: F401


__getattr__, __dir__ = lazy_attributes("udcg", _LAZY, globals())
