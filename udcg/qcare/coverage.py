"""Q-CARE coverage metrics for retrieval (Choi et al., arXiv 2608.11238): C-Prec@k and C-nDCG@k
of a retrieved list from its chunks' sub-query coverage. The functions live in
:mod:`udcg.metrics.coverage` (array kernels, below the run-level measures of
:mod:`udcg.trec.coverage_measures`, which call them; the formulas and gains are stated there)
and are the same objects here.
"""

from udcg.metrics.coverage import GAINS, c_ndcg, c_precision, coverage, coverage_gain

__all__ = ["GAINS", "c_ndcg", "c_precision", "coverage", "coverage_gain"]
