"""udcg: retrieval metrics that predict what an LLM will answer."""

from udcg.errors import UDCGInputError
from udcg.evaluation import Evaluation, evaluate, evaluate_table
from udcg.io.trec_files import Qrels, Run, read_trec_qrels, read_trec_run

__all__ = [
    "Evaluation",
    "Qrels",
    "Run",
    "UDCGInputError",
    "evaluate",
    "evaluate_table",
    "read_trec_qrels",
    "read_trec_run",
]
__version__ = "0.1.0"
