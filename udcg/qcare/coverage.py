"""Q-CARE coverage metrics for retrieval (Choi et al., arXiv 2608.11238). The functions live
in :mod:`udcg.metrics.coverage` (array kernels, below the run-level measures of
:mod:`udcg.trec.coverage_measures`, which call them) and are the same objects here.

A query is decomposed into sub-queries SQ; a judge (or a human) labels whether chunk j of the
retrieved list covers sub-query s. Per chunk, the coverage gain is::

    r_j = |{s in SQ covered by chunk j}| / |SQ|     (graded; denominator 1 when SQ is empty)
    r_j = 1[chunk j covers any s]                   (binary)

and per retrieved list (prompt order, position 1 first)::

    C-Prec@k = (1/k) * sum_{j<=k} r_j
    C-nDCG@k = DCG@k(r) / IDCG@k,   DCG = sum_i g(r_i) / log2(i + 1)

with IDCG the DCG of the same (truncated) list sorted by decreasing r, and C-nDCG = 0 when
IDCG = 0. As for the RAG-list ranking metrics in :mod:`udcg.metrics.ranking`, ``k`` truncates
the list first: the ideal is a re-ordering of the chunks the LLM actually sees.

The gain ``g`` is ``linear``, ``g(r) = r`` (the default: the released Q-CARE code and README),
or ``exponential``, ``g(r) = 2^(10 r) - 1`` (the released code's exponential option applied
to ``10 r``, with which the published per-query C-nDCG values were computed; it differs from
linear only when a list has chunks covering different shares of several sub-queries).

``covers`` may hold booleans or, for fractional coverage, numbers in [0, 1] (the share of
annotators who said a chunk covers a sub-query, or the judge's probability): ``r_j`` is then
the mean of the chunk's fractions over the sub-queries (binary: their maximum, which is
``1[covers any]`` on booleans).
"""

from udcg.metrics.coverage import GAINS, c_ndcg, c_precision, coverage, coverage_gain

__all__ = ["GAINS", "c_ndcg", "c_precision", "coverage", "coverage_gain"]
