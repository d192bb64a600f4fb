"""The trec_eval engine: measures parsed from ir_measures names, runs and qrels evaluated with
trec_eval's ordering and semantics (per-query values equal pytrec_eval's)."""

from udcg.trec.engine import Evaluation, evaluate, evaluate_table
from udcg.trec.measures import Measure, parse_measures

__all__ = ["Evaluation", "Measure", "evaluate", "evaluate_table", "parse_measures"]
