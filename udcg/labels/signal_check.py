"""Does a utility source carry information? A check over the judge's passage utilities.

UDCG weighs each passage by its utility ``u`` (:mod:`udcg.io.joins.utility_sources`). When ``u``
hardly varies, UDCG is a function of the relevance labels alone (a rescaled precision); when
``u`` does not separate relevant from irrelevant passages, it adds nothing the labels lack.
:func:`check_signal` measures both and says when the source carries (almost) no information:

* **flat**: the central 90% of the values (5th to 95th percentile of ``u``) spans less than
  :data:`FLAT_SPREAD` = 0.01. Over that range a passage's term in UDCG moves by at most
  0.01 * max(1, gamma) and, through the sigmoid (slope at most 1/4), UDCG by at most
  0.0025 * max(1, gamma): below what a comparison of systems resolves.
* **no separation** (needs both relevant and irrelevant passages): the AUROC of ``u`` for
  relevant against irrelevant passages is within :data:`SMALL_EFFECT` = 0.056 of 0.5, the
  AUROC of a small effect (Cohen's d = 0.2 between two normal classes of equal variance:
  Phi(0.2 / sqrt(2)) = 0.556). Its 95% CI (percentile bootstrap over queries, a drawn query
  brings all its passages) is reported, not used to decide.

Values are aggregated in bounded memory (:class:`SignalSample`): count, mean, standard
deviation, minimum, maximum and class counts exactly; quantiles and the AUROC from a seeded
reservoir sample of :data:`SAMPLE` passages (exact for fewer). Each passage occurrence counts,
so a passage retrieved in several contexts counts each time.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from udcg.io.contexts.jsonl import Context
from udcg.io.joins.utility_sources import get_source

#: Width under which the central 90% of u counts as flat.
FLAT_SPREAD = 0.01
#: |AUROC - 0.5| under which u does not separate relevant from irrelevant passages.
SMALL_EFFECT = 0.056
#: Passages kept for the quantiles and the AUROC.
SAMPLE = 20_000
#: Bootstrap resamples of the AUROC's CI.
N_BOOTSTRAP = 1000


@dataclass(frozen=True)
class SignalCheck:
    """What :func:`check_signal` measured for one utility source of one judge.

    Examples:
        Four equal utilities (a flat source) and relevant passages not ranked above the others
        (AUROC 0.25): the check fires:

        >>> check = check_signal([0.5, 0.5, 0.5, 0.501], [True, False, True, False], judge="tiny")
        >>> check.flat, check.auroc, check.fires
        (True, 0.25, True)
        >>> check.warning().split(":")[0]
        'utility utilities of tiny carry almost no information'
    """

    source: str
    judge: str
    #: passages with a value; passages in the sample the quantiles and AUROC come from
    values: int
    sampled: int
    #: passages labelled relevant / irrelevant (unlabelled ones count in neither)
    relevant: int
    irrelevant: int
    mean: float
    std: float
    minimum: float
    maximum: float
    #: 5th and 95th percentile of u
    low: float
    high: float
    #: AUROC of u, relevant vs irrelevant, and its 95% CI; None without both classes
    auroc: float | None
    auroc_low: float | None
    auroc_high: float | None

    @property
    def spread(self) -> float:
        """Width of the central 90% of u."""
        return self.high - self.low

    @property
    def flat(self) -> bool:
        """Nearly all values equal: the central 90% spans less than :data:`FLAT_SPREAD`."""
        return self.values > 0 and self.spread < FLAT_SPREAD

    @property
    def inseparable(self) -> bool:
        """The AUROC is within :data:`SMALL_EFFECT` of 0.5."""
        return self.auroc is not None and abs(self.auroc - 0.5) < SMALL_EFFECT

    @property
    def fires(self) -> bool:
        """Whether the source carries (almost) no information."""
        return self.flat or self.inseparable

    def as_dict(self) -> dict:
        """Every number, the derived ones and the verdict, as plain JSON."""
        return asdict(self) | {
            "spread": self.spread,
            "flat": self.flat,
            "inseparable": self.inseparable,
            "fires": self.fires,
            "thresholds": {"flat_spread": FLAT_SPREAD, "small_effect": SMALL_EFFECT},
        }

    def warning(self, switch: str = "--utility answer_likelihood") -> str | None:
        """One line with the numbers and the remedy when the check fires, else None;
        ``switch``: how the caller's command switches to answer-likelihood utilities."""
        if not self.fires:
            return None
        found = []
        if self.flat:
            found.append(
                f"90% of its {self.values} values lie within {self.spread:.2g} "
                f"(u from {self.low:.6g} to {self.high:.6g}; flat below {FLAT_SPREAD})"
            )
        if self.auroc is not None:
            verdict = f"; no separation: within {SMALL_EFFECT} of 0.5" if self.inseparable else ""
            found.append(
                f"AUROC relevant vs irrelevant {self.auroc:.3f} "
                f"[{self.auroc_low:.3f}, {self.auroc_high:.3f}] ({self.relevant} relevant, "
                f"{self.irrelevant} irrelevant{verdict})"
            )
        remedy = "a larger judge"
        if self.source != "answer_likelihood":
            remedy = f"{switch} or {remedy}"
        return (
            f"{self.source} utilities of {self.judge} carry almost no information: "
            f"{'; '.join(found)}; try {remedy}"
        )


class SignalSample:
    """Streaming aggregate of one source's utilities: exact moments and class counts, a seeded
    reservoir of ``(u, relevant, query)`` for quantiles and the AUROC.

    Examples:
        >>> sample = SignalSample()
        >>> for u, relevant, query in [(0.9, True, "q1"), (0.2, False, "q1"), (0.7, None, "q2")]:
        ...     sample.add(u, relevant, query)
        >>> result = sample.result("utility", "m")
        >>> result.values, result.relevant, result.irrelevant, round(result.mean, 4), result.auroc
        (3, 1, 1, 0.6, 1.0)
    """

    def __init__(self, size: int = SAMPLE, seed: int = 0) -> None:
        self.size = size
        self._random = random.Random(seed)
        self.count = self.relevant = self.irrelevant = 0
        self._mean = self._m2 = 0.0
        self.minimum, self.maximum = math.inf, -math.inf
        self._sample: list[tuple[float, bool | None, str]] = []

    def add(self, u: float, relevant: bool | None, query: str) -> None:
        """One passage's utility, its relevance label (None: unknown) and its query."""
        self.count += 1
        delta = u - self._mean
        self._mean += delta / self.count
        self._m2 += delta * (u - self._mean)
        self.minimum, self.maximum = min(self.minimum, u), max(self.maximum, u)
        self.relevant += relevant is True
        self.irrelevant += relevant is False
        item = (u, relevant, query)
        if len(self._sample) < self.size:
            self._sample.append(item)
        else:
            j = self._random.randrange(self.count)
            if j < self.size:
                self._sample[j] = item

    def result(self, source: str, judge: str, n_bootstrap: int = N_BOOTSTRAP) -> SignalCheck:
        """The check over everything added."""
        u = np.array([s[0] for s in self._sample], dtype=np.float64)
        low, high = (float(q) for q in np.quantile(u, [0.05, 0.95])) if len(u) else (0.0, 0.0)
        auroc = _auroc_with_ci(self._sample, n_bootstrap)
        return SignalCheck(
            source=source,
            judge=judge,
            values=self.count,
            sampled=len(self._sample),
            relevant=self.relevant,
            irrelevant=self.irrelevant,
            mean=self._mean,
            std=math.sqrt(self._m2 / self.count) if self.count else 0.0,
            minimum=self.minimum if self.count else 0.0,
            maximum=self.maximum if self.count else 0.0,
            low=low,
            high=high,
            auroc=auroc[0],
            auroc_low=auroc[1],
            auroc_high=auroc[2],
        )


def _weighted_auroc(
    ties: np.ndarray, positive: np.ndarray, weights: np.ndarray, n_ties: int
) -> float:
    """Mann-Whitney AUROC with passage weights (ties count one half); ``ties`` ranks the
    distinct values ascending. NaN when a class has no weight."""
    pos = np.bincount(ties, weights * positive, n_ties)
    neg = np.bincount(ties, weights * ~positive, n_ties)
    total = pos.sum() * neg.sum()
    if total == 0:
        return math.nan
    below = np.cumsum(neg) - neg
    return float(np.sum(pos * (below + 0.5 * neg)) / total)  # not @: no BLAS threads


def _auroc_with_ci(
    sample: Sequence[tuple[float, bool | None, str]], n_bootstrap: int
) -> tuple[float | None, float | None, float | None]:
    """AUROC of u for the labelled passages of ``sample`` and its 95% percentile CI over
    ``n_bootstrap`` resamples of queries (seeded); Nones without both classes."""
    labelled = [s for s in sample if s[1] is not None]
    positive = np.array([s[1] for s in labelled], dtype=bool)
    if not positive.any() or positive.all():
        return None, None, None
    values, ties = np.unique([s[0] for s in labelled], return_inverse=True)
    _, groups = np.unique([s[2] for s in labelled], return_inverse=True)
    n_groups = int(groups.max()) + 1
    auroc = _weighted_auroc(ties, positive, np.ones(len(ties)), len(values))
    rng = np.random.default_rng(0)
    boot = [
        _weighted_auroc(
            ties,
            positive,
            np.bincount(rng.integers(0, n_groups, n_groups), minlength=n_groups)[groups],
            len(values),
        )
        for _ in range(n_bootstrap)
    ]
    low, high = np.nanpercentile(boot, [2.5, 97.5]) if n_bootstrap else (auroc, auroc)
    return auroc, float(low), float(high)


def check_signal(
    u: Sequence[float] | np.ndarray,
    relevant: Sequence[bool | None] | None = None,
    queries: Sequence[str] | None = None,
    source: str = "utility",
    judge: str = "",
) -> SignalCheck:
    """The check over utilities ``u`` (one per passage), their relevance labels (None: none
    known) and their queries (the bootstrap's clusters; None: each passage its own).

    Examples:
        Relevant passages all above the irrelevant ones; the central 90% spans 0.885 - 0.115:

        >>> check = check_signal([0.9, 0.8, 0.2, 0.1], [True, True, False, False])
        >>> check.auroc, round(check.spread, 4), check.fires
        (1.0, 0.77, False)
    """
    sample = SignalSample()
    for i, value in enumerate(np.asarray(u, dtype=np.float64).tolist()):
        label = None if relevant is None or relevant[i] is None else bool(relevant[i])
        sample.add(value, label, str(i) if queries is None else queries[i])
    return sample.result(source, judge)


class ContextSignal:
    """:class:`SignalSample` fed with contexts: the utilities of source ``source`` stored for
    judge ``judge`` (passages without a value are skipped).

    Examples:
        >>> from udcg.io.contexts.model import Passage
        >>> signal = ContextSignal("abstention", "m")
        >>> signal.add([Context("q1", [Passage("d1", abstain_prob={"m": 0.1}), Passage("d2")])])
        >>> signal.sample.count, signal.result().mean
        (1, 0.9)
    """

    def __init__(self, source: str, judge: str) -> None:
        self.source, self.judge = get_source(source), judge
        self.sample = SignalSample()

    def add(self, contexts: Iterable[Context]) -> None:
        """Add every passage of ``contexts`` that holds a value."""
        field = self.source.field
        for ctx in contexts:
            for p in ctx.passages:
                prob = getattr(p, field).get(self.judge)
                if prob is not None:
                    u = float(self.source.from_probs(np.array([prob]))[0])
                    self.sample.add(u, p.relevant, ctx.qid)

    def result(self) -> SignalCheck | None:
        """The check, or None when no passage held a value."""
        if not self.sample.count:
            return None
        return self.sample.result(self.source.name, self.judge)


def check_contexts(contexts: Iterable[Context], judge: str, source: str) -> SignalCheck | None:
    """:func:`check_signal` over the stored values of ``source`` for ``judge`` in
    ``contexts`` (streamed); None when no passage holds one.

    Examples:
        u = 1 - P(abstain): 0.9 for the relevant passage, 0.1 for the irrelevant one:

        >>> from udcg.io.contexts.model import Passage
        >>> passages = [Passage("d1", relevant=True, abstain_prob={"m": 0.1}),
        ...             Passage("d2", relevant=False, abstain_prob={"m": 0.9})]
        >>> check = check_contexts([Context("q1", passages)], "m", "abstention")
        >>> check.source, check.values, check.auroc, check_contexts([], "m", "abstention")
        ('abstention', 2, 1.0, None)
    """
    signal = ContextSignal(source, judge)
    signal.add(contexts)
    return signal.result()
