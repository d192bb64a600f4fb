"""Q-CARE (Choi et al., arXiv 2608.11238) through the shared judge: sub-query and claim
decomposition, four Yes/No checks, and the coverage and generator metrics from those labels.

* :func:`label_contexts` writes the labels into contexts (``udcg qcare label``);
* :func:`qcare_scores` computes C-Prec, C-nDCG, Completeness, Conciseness and
  Verifiableness from judge or human labels (``udcg qcare score``);
* :func:`agreement` compares judge-based and human-based metrics
  (``udcg qcare agreement``);
* :func:`read_release_results` reads the output of the Q-CARE release's pipeline into
  contexts (``udcg qcare import``);
* :func:`ranking_agreement` compares the retriever rankings of two query types, per metric
  (``udcg qcare rankings``);
* :mod:`udcg.qcare.conversation`: conversational queries, and :func:`read_mtrag_tasks`
  (``udcg qcare mtrag``);
* :mod:`udcg.qcare.coverage` and :mod:`udcg.qcare.generator` hold the metrics.
"""

from udcg.qcare.agreement import AgreementRow, agreement, fill_labels
from udcg.qcare.conversation import read_mtrag_tasks
from udcg.qcare.labels.checks import YesNoChecker, parse_yes_no
from udcg.qcare.labels.decompose import decompose_answers, decompose_queries
from udcg.qcare.labels.label import QCareReport, label_contexts
from udcg.qcare.rankings import RankingAgreement, ranking_agreement
from udcg.qcare.release import read_release_results
from udcg.qcare.scores import METRICS, QCareScores, qcare_scores

__all__ = [
    "METRICS",
    "AgreementRow",
    "QCareReport",
    "QCareScores",
    "RankingAgreement",
    "YesNoChecker",
    "agreement",
    "decompose_answers",
    "decompose_queries",
    "fill_labels",
    "label_contexts",
    "parse_yes_no",
    "qcare_scores",
    "ranking_agreement",
    "read_mtrag_tasks",
    "read_release_results",
]
