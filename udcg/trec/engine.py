"""trec_eval-compatible evaluation of a run against qrels, vectorised over queries.

Semantics (those of trec_eval, checked against pytrec_eval): documents are ranked by score
descending (scores compared as 32-bit floats, trec_eval's C ``float``), ties broken by document
id descending; unjudged documents have relevance 0; binary
measures count relevance >= ``rel`` (1 by default); nDCG uses linear gain max(relevance, 0) and
the ideal ranking of all judged documents of the query; AP and R divide by the number of
relevant judged documents; queries of the run that are absent from the qrels are ignored, and
so are judged queries that the run does not retrieve for. The utility measures (UDCG@k,
UDCGtheta@k) are in :mod:`udcg.trec.utility_measures`, the coverage measures (C-Prec@k,
C-nDCG@k) in :mod:`udcg.trec.coverage_measures`, each imported only when one is asked for.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa

from udcg._lazy import import_pandas
from udcg._threads import run_concurrently
from udcg.errors import UDCGInputError, UDCGWarning
from udcg.io.arrow import dictionary_encode, memory_pool, string_ranks, take, to_numpy
from udcg.io.formats import interop
from udcg.io.formats.trec import (
    Qrels,
    Run,
    locate_duplicate,
    qrels_from_dict,
    ranking_scores,
    read_trec_qrels,
    read_trec_run,
    run_from_dict,
    trec_order,
)
from udcg.metrics import _kernels
from udcg.trec.measures import COVERAGE_MEASURES, UTILITY_MEASURES, Measure, parse_measures

if TYPE_CHECKING:
    from udcg.io.joins.utilities import Utilities, UtilitiesLike
    from udcg.trec.coverage_measures import CoverageLike, CoveragePlan
    from udcg.trec.utility_measures import UtilityPlan, WeightsLike

#: besides these: ranx Qrels/Run, pandas DataFrames and iterables of ir_measures Qrel/ScoredDoc
QrelsLike = Qrels | Mapping[str, Mapping[str, int]] | str | PathLike[str] | Any
RunLike = Run | Mapping[str, Mapping[str, float]] | str | PathLike[str] | Any


@dataclass(frozen=True, eq=False)
class Evaluation:
    """Per-query values: ``values[i, j]`` is measure ``measures[j]`` on query ``qids[i]``.

    Examples:
        >>> table = evaluate_table({"q1": {"d1": 1}}, {"q1": {"d1": 2.0, "d2": 1.0}}, "RR")
        >>> table.qids, table.values.tolist(), table.to_dict()
        (['q1'], [[1.0]], {'q1': {'RR': 1.0}})
    """

    qids: list[str]
    measures: list[Measure]
    values: np.ndarray

    def to_dict(self) -> dict[str, dict[str, float]]:
        """``{qid: {measure: value}}``."""
        names = [str(m) for m in self.measures]
        return {
            q: dict(zip(names, row, strict=True))
            for q, row in zip(self.qids, self.values.tolist(), strict=True)
        }

    def mean(self) -> dict[str, float]:
        """Mean of each measure over the evaluated queries (0 when there are none)."""
        means = self.values.mean(axis=0) if len(self.qids) else np.zeros(len(self.measures))
        return {str(m): float(v) for m, v in zip(self.measures, means, strict=True)}

    def to_dataframe(self) -> Any:
        """A pandas DataFrame: column ``qid``, then one column per measure (named as in
        :meth:`to_dict`), one row per query; needs pandas."""
        pd = import_pandas("Evaluation.to_dataframe()")
        frame = pd.DataFrame(self.values, columns=[str(m) for m in self.measures])
        frame.insert(0, "qid", list(self.qids))
        return frame


def as_run(run: RunLike) -> Run:
    """``run`` as a :class:`Run`: a Run, a TREC run file, ``{qid: {doc_id: score}}``, a ranx
    Run, a DataFrame (``q_id``/``qid``/``query_id``, ``doc_id``/``docno``, ``score``) or an
    iterable of ir_measures ``ScoredDoc`` (see :mod:`udcg.io.formats.interop`).

    Examples:
        >>> run = as_run({"q1": {"d1": 1.5}})
        >>> as_run(run) is run, run.to_dict()
        (True, {'q1': {'d1': 1.5}})
    """
    if isinstance(run, Run):
        return run
    if isinstance(run, Mapping):
        return run_from_dict(run)
    if isinstance(run, str | PathLike):
        return read_trec_run(run)
    return interop.to_run(run)


def as_qrels(qrels: QrelsLike) -> Qrels:
    """``qrels`` as :class:`Qrels`: Qrels, a TREC qrels file, ``{qid: {doc_id: grade}}``, a
    ranx Qrels, a DataFrame (``q_id``/``qid``/``query_id``, ``doc_id``/``docno``,
    ``relevance``/``label``/``rel``/``score``) or an iterable of ir_measures ``Qrel``.

    Examples:
        >>> as_qrels({"q1": {"d1": 2}}).relevance.tolist()
        [2]
    """
    if isinstance(qrels, Qrels):
        return qrels
    if isinstance(qrels, Mapping):
        return qrels_from_dict(qrels)
    if isinstance(qrels, str | PathLike):
        return read_trec_qrels(qrels)
    return interop.to_qrels(qrels)


def _encode(first: pa.Array, second: pa.Array) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """Integer codes of two string columns over one shared dictionary. Dictionary-encoded
    columns (as read from files) are merged through their dictionaries, not row by row."""
    first, second = dictionary_encode(first), dictionary_encode(second)
    n_first = len(first.dictionary)
    merged = dictionary_encode(
        pa.concat_arrays([first.dictionary, second.dictionary], memory_pool())
    )
    codes = to_numpy(merged.indices)  # int32, read in place
    first_codes = to_numpy(first.indices).astype(np.int32, copy=False)
    # codes follow first appearance, so a dictionary without repeats keeps its own codes
    if not (codes[:n_first] == np.arange(n_first)).all():
        first_codes = codes[:n_first][first_codes]
    return first_codes, codes[n_first:][to_numpy(second.indices)], merged.dictionary


def _lookup(
    qrel_keys: np.ndarray, grades: np.ndarray, n_keys: int, run_keys: np.ndarray
) -> tuple[bool, np.ndarray, bool]:
    """``(whether a qrels key repeats, the grade of every run key (0 when unjudged), whether a
    run key repeats)``.

    The qrels keys are sorted once with ``grade - lowest`` in their low bits (``key << b |
    code``), in place, so the sort carries the grades along; when key and code do not fit in
    63 bits together, the rows are argsorted instead. The run keys are looked up in ascending
    order, so that consecutive binary searches take nearly the same path through the qrels
    keys (far fewer cache misses and mispredicted branches than in file order), and the
    grades are put back in file order after. Each step reuses or frees the arrays before it
    (a first call in a process pays for every fresh page)."""
    low = int(grades.min(initial=0))
    bits = max(int(grades.max(initial=0)) - low, 1).bit_length()
    if n_keys.bit_length() + bits > 63:
        order = np.argsort(qrel_keys)
        qrel_keys, grades, bits = qrel_keys[order], grades[order], 0
    else:
        qrel_keys <<= bits
        qrel_keys += grades
        qrel_keys -= low
        qrel_keys.sort()
    repeats = _has_adjacent_repeats(qrel_keys >> bits)
    run_order = np.argsort(run_keys)
    wanted = run_keys.take(run_order)
    run_repeats = _has_adjacent_repeats(wanted)
    if not len(qrel_keys):
        return repeats, np.zeros(len(run_keys), dtype=grades.dtype), run_repeats
    wanted <<= bits
    pos = np.searchsorted(qrel_keys, wanted)
    found = qrel_keys.take(pos, mode="clip")
    found ^= wanted  # the code where the key matches, at least 2**b where it does not
    del wanted
    unjudged = found >= (1 << bits)
    if bits:
        found += low
    else:
        found = grades.take(pos, mode="clip")
    del pos
    found[unjudged] = 0
    del unjudged
    in_file_order = np.empty_like(found)
    in_file_order[run_order] = found
    return repeats, in_file_order, run_repeats


def _has_adjacent_repeats(keys: np.ndarray) -> bool:
    """True when two neighbours of ``keys`` are equal (a repeat, for sorted keys)."""
    return bool((keys[1:] == keys[:-1]).any())


def _pair_keys(q: np.ndarray, d: np.ndarray, n_docs: int) -> np.ndarray:
    """One int64 key per (query, document) code pair: ``q * n_docs + d``."""
    keys = np.multiply(q, n_docs, dtype=np.int64)
    keys += d
    return keys


def _graded_pairs(
    q_qrels: np.ndarray,
    d_qrels: np.ndarray,
    grades: np.ndarray,
    q_run: np.ndarray,
    d_run: np.ndarray,
    n_queries: int,
    n_docs: int,
) -> tuple[bool, np.ndarray, bool]:
    """``(whether a qrels pair repeats, the grade of every run row, whether a run pair
    repeats)`` from the query and document codes of both sides."""
    merged = _merged_lookup(q_qrels, d_qrels, grades, q_run, d_run, n_queries * n_docs, n_docs)
    if merged is not None:
        return merged
    return _lookup(
        _pair_keys(q_qrels, d_qrels, n_docs),
        grades,
        n_queries * n_docs,
        _pair_keys(q_run, d_run, n_docs),
    )


_BLOCK = 1 << 16  # rows per block where a step goes block by block


def _merged_lookup(
    q_qrels: np.ndarray,
    d_qrels: np.ndarray,
    grades: np.ndarray,
    q_run: np.ndarray,
    d_run: np.ndarray,
    n_keys: int,
    n_docs: int,
) -> tuple[bool, np.ndarray, bool] | None:
    """What ``_graded_pairs`` returns, from one sort of both sides' keys together; None when
    a key, a side bit and a row number or grade code do not fit in 63 bits.

    Each qrels row becomes ``key << (b + 1) | grade - lowest`` and each run row ``key << (b +
    1) | 1 << b | row``, so after the sort every key's judgement comes right before its run
    row: a run row is judged when the entry before it has the same key, and its row number
    says where its grade goes. Two neighbours with the same key and the same side are a
    repeated pair. One sort of both sides costs less than a binary search per run row."""
    n_run = len(q_run)
    low = int(grades.min(initial=0))
    low_bits = max((int(grades.max(initial=0)) - low).bit_length(), (n_run - 1).bit_length(), 1)
    shift = low_bits + 1
    if max(n_keys - 1, 0).bit_length() + shift > 63:
        return None
    merged = np.empty(1 + len(grades) + n_run, dtype=np.int64)
    merged[0] = -1  # below every entry: each entry has one before it
    judged = merged[1 : 1 + len(grades)]
    np.multiply(q_qrels, n_docs, out=judged, dtype=np.int64)
    judged += d_qrels
    judged <<= shift
    judged += grades
    judged -= low
    ranked = merged[1 + len(grades) :]
    np.multiply(q_run, n_docs, out=ranked, dtype=np.int64)
    ranked += d_run
    ranked <<= shift
    numbers = np.arange(1 << low_bits, (1 << low_bits) + min(n_run, _BLOCK))  # side bit, row
    for start in range(0, n_run, _BLOCK):  # block by block: no array of every row number
        block = ranked[start : start + _BLOCK]
        block += numbers[: len(block)]
        numbers += _BLOCK
    merged.sort()
    same = np.empty(len(merged) - 1, dtype=bool)  # same[i]: entries i and i + 1 share a key
    is_run = np.empty(len(merged), dtype=bool)
    for start in range(0, len(merged), _BLOCK):  # no full-size temporaries
        stop = min(start + _BLOCK, len(merged))
        keys = merged[start : stop + 1] >> shift
        np.equal(keys[1:], keys[:-1], out=same[start : start + len(keys) - 1])
        np.not_equal(merged[start:stop] & (1 << low_bits), 0, out=is_run[start:stop])
    is_run[0] = False
    repeated = same & (is_run[1:] == is_run[:-1])
    if repeated.any():
        qrels_repeat = bool((repeated & ~is_run[1:]).any())
        return qrels_repeat, np.zeros(n_run, dtype=grades.dtype), not qrels_repeat
    at = np.flatnonzero(is_run)
    del is_run, repeated
    mask = (1 << low_bits) - 1
    rows = merged[at]
    rows &= mask
    at -= 1  # the entry before each run row
    found = merged[at]
    found &= mask
    found += low
    found[~same[at]] = 0  # unjudged
    del same, merged
    run_grades = at if grades.dtype == at.dtype else np.empty(n_run, grades.dtype)  # at is spent
    run_grades[rows] = found
    return False, run_grades, False


def _duplicate_error(
    what: Literal["run", "qrels"],
    source: str | None,
    q: np.ndarray,
    d: np.ndarray,
    qids: pa.Array,
    docs: pa.Array,
) -> UDCGInputError:
    """The error for a repeated (query, document) pair, located by line when read from a file."""
    locate_duplicate(source, what)
    keys = _pair_keys(q, d, len(docs))
    order = np.argsort(keys, kind="stable")
    i = int(order[np.flatnonzero(keys[order][1:] == keys[order][:-1])[0] + 1])
    return UDCGInputError(
        f"duplicate document {docs[d[i]].as_py()!r} for query {qids[q[i]].as_py()!r}", field=what
    )


DENSE_GRADES = 64  # up to this top grade, one table counts every grade of every query


def _grade_counts(q: np.ndarray, gains: np.ndarray, n_queries: int) -> np.ndarray:
    """``counts[query, g]``: the query's judged documents of gain ``g`` (0..top, at most
    :data:`DENSE_GRADES`), from one bincount of ``query * n_grades + gain``."""
    n_grades = int(gains.max(initial=0)) + 1
    keys = np.multiply(q, n_grades, dtype=np.int64)
    keys += gains
    per_grade = np.bincount(keys)
    del keys
    counts = np.zeros((n_queries, n_grades), dtype=np.int64)
    counts.flat[: len(per_grade)] = per_grade
    return counts


def _ideal_dcg(counts: np.ndarray, k: int | None) -> np.ndarray:
    """IDCG@k per query from its grade counts (``_grade_counts``): the judged gains sorted
    descending, without a sort, summed as the run's DCG is (``_kernels.ideal_dcg_of_counts``)."""
    at_least = np.cumsum(counts[:, :0:-1], axis=1)[:, ::-1]  # [:, L - 1]: gains >= L
    depth = int(at_least[:, 0].max(initial=0)) if at_least.shape[1] else 0
    return _kernels.ideal_dcg_of_counts(at_least, depth if k is None else min(depth, k))


def _sorted_ideal_dcg(q: np.ndarray, gains: np.ndarray, n_queries: int, k: int | None):
    """IDCG@k per query from its judged gains sorted descending (for grades above
    :data:`DENSE_GRADES`: a grade of 10**6 needs no table of a million levels), in memory of
    the judged documents, not queries x the most a query has. Summed as the run's DCG is
    (``_kernels.dcg``: each query's ``gain * discount`` terms added in rank order from 0, which
    ``np.bincount`` does visiting them in that order)."""
    positive = gains > 0
    q, gains = q[positive], gains[positive]
    order = np.lexsort((-gains, q))
    q, gains = q[order], gains[order]
    per_query = np.bincount(q, minlength=n_queries)
    rank = np.arange(len(q)) - (np.cumsum(per_query) - per_query)[q]
    if k is not None:
        kept = rank < k
        q, gains, rank = q[kept], gains[kept], rank[kept]
    terms = gains * _kernels.discounts(int(rank.max(initial=0)) + 1)[rank]
    return np.bincount(q, weights=terms, minlength=n_queries)


def _length_buckets(lengths: np.ndarray) -> list[np.ndarray]:
    """Group queries whose list lengths share a power-of-two class, bounding padding to 2x."""
    classes = np.ceil(np.log2(np.maximum(lengths, 1))).astype(np.int64)
    if len(classes) and (classes == classes[0]).all():
        return [np.arange(len(classes))]
    return [np.flatnonzero(classes == c) for c in np.flatnonzero(np.bincount(classes))]


def _file_ranking(
    q: np.ndarray, scores: np.ndarray, d: np.ndarray, doc_names: pa.Array
) -> tuple[bool, np.ndarray | None]:
    """``(True, order)`` when the rows already come in trec_eval's order up to ties: grouped
    by query in ascending code order, scores descending within each query, as run files are
    written. ``order`` is then None (no tied scores) or the row order with each run of tied
    scores sorted by document id descending; ``(False, None)`` when the rows need the full
    sort."""
    n = len(q)
    if n < 2:
        return True, None
    if (q[1:] < q[:-1]).any():
        return False, None
    tied = q[1:] == q[:-1]  # tied[i]: row i + 1 ties with row i (same query, same score)
    if (tied & (scores[1:] > scores[:-1])).any():
        return False, None
    tied &= scores[1:] == scores[:-1]
    n_tied = int(np.count_nonzero(tied))
    if not n_tied:
        return True, None
    starts = np.empty(n, dtype=bool)  # a row that does not tie with the row before it
    starts[0] = True
    np.logical_not(tied, out=starts[1:])
    rows = None  # every row, when ties are common
    if 4 * n_tied < n:
        in_tie = np.zeros(n, dtype=bool)
        in_tie[1:] = tied
        in_tie[:-1] |= tied
        rows = np.flatnonzero(in_tie)
        starts, d = starts[rows], d[rows]
    group = np.cumsum(starts)
    # document ids descending within a run of ties: ranks of the ids these rows hold
    present = np.zeros(len(doc_names), dtype=bool)
    present[d] = True
    used = np.flatnonzero(present)
    descending = np.zeros(len(doc_names), dtype=np.int64)
    descending[used] = len(used) - 1 - string_ranks(take(doc_names, used))
    key = group * len(used)
    key += descending[d]
    order = _argsort_distinct(key)
    if rows is None:
        return True, order
    full = np.arange(n)
    full[rows] = rows[order]
    return True, full


def _argsort_distinct(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` for non-negative keys, as a plain sort of ``key << b
    | position`` (cheaper than an argsort) where that fits in 63 bits."""
    bits = max(len(keys) - 1, 1).bit_length()
    if int(keys.max(initial=0)).bit_length() + bits > 63:
        return np.argsort(keys, kind="stable")
    packed = keys << bits
    packed += np.arange(len(keys))
    packed.sort()
    packed &= (1 << bits) - 1
    return packed


def _padded(
    gains: np.ndarray, q_ranked: np.ndarray, lengths: np.ndarray, queries: np.ndarray
) -> np.ndarray:
    """The ranked gains of ``queries`` (ascending codes) as one zero-padded float row each;
    ``q_ranked`` holds each row's query, grouped by query in code order."""
    counts = lengths[queries]
    width, total = int(counts.max()), int(counts.sum())
    if total == len(gains) == len(queries) * width:  # every row, every list full: no scatter
        return gains.reshape(len(queries), width).astype(np.float64)
    rows = np.flatnonzero(np.isin(q_ranked, queries)) if total < len(gains) else slice(None)
    row_of = np.zeros(len(lengths), dtype=np.intp)
    row_of[queries] = np.arange(len(queries))
    first_row = np.cumsum(lengths) - lengths
    q = q_ranked[rows]
    padded = np.zeros((len(queries), width))
    padded[row_of[q], np.arange(len(q_ranked))[rows] - first_row[q]] = gains[rows]
    return padded


def _measure(
    m: Measure,
    gains: np.ndarray,
    is_rel: np.ndarray | None,
    n_rel: np.ndarray | None,
    idcg: np.ndarray | None,
) -> np.ndarray:
    """``m`` per row of ``gains`` (>= 0); ``is_rel``: gains >= m.rel as floats (binary
    measures), ``n_rel``: relevant judged documents per row (AP, R), ``idcg``: nDCG's."""
    if m.name == "nDCG":
        return _kernels.ndcg(gains, idcg, m.cutoff)
    if m.name == "AP":
        return _kernels.average_precision(is_rel, n_rel, m.cutoff)
    if m.name == "RR":
        return _kernels.reciprocal_rank(is_rel, m.cutoff)
    if m.name == "P":
        return _kernels.precision(is_rel, m.cutoff)
    if m.name == "R":
        return _kernels.recall(is_rel, n_rel, m.cutoff)
    if m.name == "HitCount":  # ranx's hits@k: relevant documents in the top k
        return is_rel[:, : m.cutoff].sum(axis=1)
    return _kernels.hits(is_rel, m.cutoff)


def evaluate_table(
    qrels: QrelsLike,
    run: RunLike,
    measures: str | Measure | Iterable[str | Measure],
    *,
    utilities: Utilities | UtilitiesLike | None = None,
    utility_field: str | None = None,
    weights: WeightsLike | Iterable[WeightsLike] | None = None,
    allow_mismatch: Sequence[str] = (),
    coverage: CoverageLike | None = None,
    mismatch_option: str | None = None,
) -> Evaluation:
    """Evaluate ``run`` against ``qrels``; inputs are Run/Qrels, TREC file paths, dicts, ranx
    Run/Qrels, pandas DataFrames or iterables of ir_measures ScoredDoc/Qrel (:func:`as_run`,
    :func:`as_qrels`); ``measures`` may be ir_measures measure objects too.

    ``utilities``, ``utility_field`` and ``weights`` serve the utility measures (UDCG@k,
    UDCGtheta@k; see :func:`evaluate`) and are not read when none is asked for;
    ``allow_mismatch`` lists weight-card fields to override on purpose (``utility``);
    ``mismatch_option`` is how a refusal says to (default: ``allow_mismatch=['FIELD']``).
    ``coverage`` serves the coverage measures (C-Prec@k, C-nDCG@k; see :func:`evaluate`).

    Examples:
        d1 is relevant to q1 and ranked first; d2, relevant to q2, second:

        >>> qrels = {"q1": {"d1": 1}, "q2": {"d2": 1}}
        >>> run = {"q1": {"d1": 2.0, "d2": 1.0}, "q2": {"d1": 2.0, "d2": 1.0}}
        >>> table = evaluate_table(qrels, run, ["RR", "P@1"])
        >>> table.qids, table.values.tolist(), table.mean()
        (['q1', 'q2'], [[1.0, 1.0], [0.5, 0.0]], {'RR': 0.75, 'P@1': 0.5})
    """
    parsed = parse_measures(measures)
    plan = None
    if any(m.name in UTILITY_MEASURES for m in parsed):
        from udcg.trec import utility_measures

        option = mismatch_option or utility_measures.PYTHON_OPTION
        plan = utility_measures.plan(
            parsed, utilities, utility_field, weights, allow_mismatch, option
        )
    coverage_plan = None
    if any(m.name in COVERAGE_MEASURES for m in parsed):
        from udcg.trec import coverage_measures

        coverage_plan = coverage_measures.plan(parsed, coverage)
    if isinstance(qrels, str | PathLike) and isinstance(run, str | PathLike):
        # two files, each parsed on its own thread (Arrow's parser releases the GIL); the
        # qrels on this one, so that its errors come first, as in a serial read
        judged, ranked = run_concurrently(lambda: as_qrels(qrels), lambda: as_run(run))
    else:
        judged, ranked = as_qrels(qrels), as_run(run)
    return _evaluate(parsed, judged, ranked, plan, coverage_plan)


def _ranked_rows(
    qids: pa.Array,
    doc_ids: pa.Array,
    qid_names: pa.Array,
    doc_names: pa.Array,
    q_run: np.ndarray,
    d_run: np.ndarray,
    order: np.ndarray | None,
) -> np.ndarray:
    """For every run row, in ranked order (``order``), the row of ``(qids, doc_ids)`` (a table
    of unique pairs) holding the same (query, document), -1 where none; looked up like the
    grades, with each row number + 1 (0: missing) as its grade."""
    _, q_u, qid_codes = _encode(qid_names, qids)  # keeps the run's codes (unique names)
    _, d_u, doc_codes = _encode(doc_names, doc_ids)
    n_docs = max(len(doc_codes), 1)
    _, found, _ = _lookup(
        _pair_keys(q_u, d_u, n_docs),
        np.arange(1, len(qids) + 1),
        len(qid_codes) * n_docs,
        _pair_keys(q_run, d_run, n_docs),
    )
    found -= 1
    return found if order is None else found[order]


def _ranked_utilities(
    utilities: Utilities,
    qid_names: pa.Array,
    doc_names: pa.Array,
    q_run: np.ndarray,
    d_run: np.ndarray,
    order: np.ndarray | None,
) -> np.ndarray:
    """The utility of every run row, in ranked order (``order``), NaN where none is given."""
    rows = _ranked_rows(
        utilities.qids, utilities.doc_ids, qid_names, doc_names, q_run, d_run, order
    )
    u = np.full(len(rows), np.nan)
    given = rows >= 0
    u[given] = utilities.values[rows[given]]
    return u


def _warn_if_disjoint(in_qrels: np.ndarray, in_run: np.ndarray, qid_names: pa.Array) -> None:
    """A :class:`UDCGWarning` when the qrels and the run share no query (every measure empty,
    as in trec_eval), naming a few ids of each: ``1`` and ``1.0`` are two ids."""
    if (in_qrels & in_run).any():
        return

    def some(mask: np.ndarray) -> str:
        names = [repr(qid_names[int(i)].as_py()) for i in np.flatnonzero(mask)[:3]]
        return ", ".join(names) + (", ..." if mask.sum() > 3 else "") if names else "none"

    warnings.warn(
        f"the run and the qrels share no query id, so every measure is empty (run: "
        f"{some(in_run)}; qrels: {some(in_qrels)}); ids are compared as strings: 1 and 1.0 "
        "are two ids",
        UDCGWarning,
        stacklevel=5,  # udcg.evaluate's caller
    )


def _evaluate(
    parsed: list[Measure],
    qrels: Qrels,
    run: Run,
    plan: UtilityPlan | None = None,
    coverage_plan: CoveragePlan | None = None,
) -> Evaluation:
    q_run, q_qrels, qid_names = _encode(run.qids, qrels.qids)
    d_run, d_qrels, doc_names = _encode(run.doc_ids, qrels.doc_ids)
    n_queries, n_docs = len(qid_names), max(len(doc_names), 1)

    def graded() -> tuple[bool, np.ndarray, bool]:
        return _graded_pairs(q_qrels, d_qrels, qrels.relevance, q_run, d_run, n_queries, n_docs)

    scores = ranking_scores(run.scores)
    ranked, order = _file_ranking(q_run, scores, d_run, doc_names)
    if ranked:
        qrels_repeats, run_grades, run_repeats = graded()
    else:  # the numpy work on this thread, Arrow's sort (its own memory pool) beside it
        (qrels_repeats, run_grades, run_repeats), order = run_concurrently(
            graded, lambda: trec_order(q_run, scores, run.doc_ids)
        )
    if qrels_repeats:
        raise _duplicate_error("qrels", qrels.source, q_qrels, d_qrels, qid_names, doc_names)
    if run_repeats:
        raise _duplicate_error("run", run.source, q_run, d_run, qid_names, doc_names)

    q_ranked = q_run if order is None else q_run[order]
    gains = run_grades if order is None else run_grades[order]
    del run_grades  # freed for reuse below
    np.maximum(gains, 0, out=gains)  # linear gain; every binary level is >= 1
    lengths = np.bincount(q_ranked, minlength=n_queries)
    judged_gains = np.maximum(qrels.relevance, 0)
    judged = np.bincount(q_qrels, minlength=n_queries) > 0
    _warn_if_disjoint(judged, lengths > 0, qid_names)
    # every retrieved-for query is scored; those the qrels do not judge are left out after
    evaluated = np.flatnonzero(lengths > 0)
    u_ranked = None
    if plan is not None:
        u_ranked = _ranked_utilities(plan.utilities, qid_names, doc_names, q_run, d_run, order)
        plan.check_ranked(
            u_ranked,
            q_ranked,
            lengths,
            judged & (lengths > 0),
            qid_names,
            lambda i: doc_names[int(d_run[i if order is None else order[i]])].as_py(),
            run.source,
        )

    r_ranked: dict[bool, np.ndarray] = {}
    if coverage_plan is not None:
        cov = coverage_plan.coverage
        r_ranked = coverage_plan.ranked(
            _ranked_rows(cov.qids, cov.doc_ids, qid_names, doc_names, q_run, d_run, order),
            q_ranked,
            lengths,
            judged & (lengths > 0),
            qid_names,
            lambda i: doc_names[int(d_run[i if order is None else order[i]])].as_py(),
        )

    rel_levels = {
        m.rel for m in parsed if m.name not in ("nDCG", *UTILITY_MEASURES, *COVERAGE_MEASURES)
    }
    # relevant judged documents per query: those of gain >= lvl (>= 1, so clipping is moot)
    n_rel = {
        lvl: np.bincount(q_qrels[judged_gains >= lvl], minlength=n_queries)
        for lvl in {m.rel for m in parsed if m.name in ("AP", "R")}
    }
    cutoffs = {m.cutoff for m in parsed if m.name == "nDCG"}
    if cutoffs and int(judged_gains.max(initial=0)) <= DENSE_GRADES:
        counts = _grade_counts(q_qrels, judged_gains, n_queries)
        idcg = {k: _ideal_dcg(counts, k) for k in cutoffs}
    else:
        idcg = {k: _sorted_ideal_dcg(q_qrels, judged_gains, n_queries, k) for k in cutoffs}

    values = np.empty((n_queries, len(parsed)))
    for bucket in _length_buckets(lengths[evaluated]):
        queries = evaluated[bucket]
        padded = _padded(gains, q_ranked, lengths, queries)
        is_rel = {lvl: (padded >= lvl).astype(np.float64) for lvl in rel_levels}
        u_padded = None if u_ranked is None else _padded(u_ranked, q_ranked, lengths, queries)
        r_padded = {b: _padded(r, q_ranked, lengths, queries) for b, r in r_ranked.items()}
        for j, m in enumerate(parsed):
            if m.name in UTILITY_MEASURES:
                values[queries, j] = plan.score(m, padded, u_padded, lengths[queries])
                continue
            if m.name in COVERAGE_MEASURES:
                values[queries, j] = coverage_plan.score(m, r_padded[m.binary])
                continue
            values[queries, j] = _measure(
                m,
                padded,
                is_rel.get(m.rel) if m.name != "nDCG" else None,
                n_rel[m.rel][queries] if m.name in ("AP", "R") else None,
                idcg[m.cutoff][queries] if m.name == "nDCG" else None,
            )
    evaluated = evaluated[judged[evaluated]]
    names = take(qid_names, evaluated).to_pylist()
    return Evaluation(names, parsed, values[evaluated])


def evaluate(
    qrels: QrelsLike,
    run: RunLike,
    measures: str | Measure | Iterable[str | Measure],
    *,
    utilities: Utilities | UtilitiesLike | None = None,
    utility_field: str | None = None,
    weights: WeightsLike | Iterable[WeightsLike] | None = None,
    allow_mismatch: Sequence[str] = (),
    coverage: CoverageLike | None = None,
) -> dict[str, dict[str, float]]:
    """Per-query values ``{qid: {measure: value}}``, equal to pytrec_eval's for the same inputs.

    ``measures`` use ir_measures names: ``nDCG@10``, ``AP``, ``AP@100``, ``RR``, ``P@5``,
    ``R@100``, ``Hits@10``, ``HitCount@10`` (pytrec_eval's names too: ``ndcg_cut_10``...).

    Utility measures: ``UDCG@k`` (``UDCG(gamma=0.5)@k``; gamma 1/3 by default) and
    ``UDCGtheta@k`` score each query's top k documents with ``utilities`` per (query,
    document): a dict ``{qid: {doc_id: value}}`` or a TSV/JSONL file
    (:mod:`udcg.io.joins.utilities`). ``utility_field`` says what a value is: ``abstain_prob`` (u =
    1 - p; a TSV file's default), ``answer_prob`` (u = p) or ``utility`` (u itself); a JSONL line
    says it by its key, and a dict, whose numbers do not say it, is refused without it.
    ``weights``: UDCG-theta weight files (or :class:`udcg.io.weights.files.ThetaWeights`, or
    fitted :class:`udcg.theta.UDCGTheta`), one per UDCGtheta cutoff, matched by the k of their
    card; weights fitted on another utility source (or, for an annotated contexts file, another
    judge) are refused unless ``allow_mismatch=["utility"]`` (``["judge"]``). Semantics in
    :mod:`udcg.trec.utility_measures`.

    Coverage measures (Q-CARE): ``C-Prec@k`` and ``C-nDCG@k`` (``C-nDCG(gain=exponential)@k``;
    ``binary=True``: r = 1 if a passage covers any sub-query) score each query's top k documents
    with ``coverage`` per (query, document): a dict ``{qid: {doc_id: r}}`` of gains in [0, 1]
    or ``{qid: {doc_id: [labels]}}`` of per-sub-query labels (booleans or fractions), a
    ``qid doc_id r`` TSV file, a JSONL file or contexts labelled by ``udcg qcare label``.
    Semantics in :mod:`udcg.trec.coverage_measures`.

    Examples:
        Relevant d1 and d3 ranked 1st and 3rd: nDCG@3 = ``(1 + 1/log2(4)) / (1 + 1/log2(3))``,
        AP = ``(1/1 + 2/3) / 2``; UDCG@3 = ``sigmoid((0.9 - 0.6/3 + 0.3) / 3)``:

        >>> qrels = {"q1": {"d1": 1, "d2": 0, "d3": 1}}
        >>> run = {"q1": {"d1": 0.9, "d2": 0.8, "d3": 0.1}}
        >>> values = evaluate(qrels, run, ["nDCG@3", "AP", "P@2"])["q1"]
        >>> {name: round(value, 4) for name, value in values.items()}
        {'nDCG@3': 0.9197, 'AP': 0.8333, 'P@2': 0.5}
        >>> u = {"q1": {"d1": 0.9, "d2": 0.6, "d3": 0.3}}
        >>> scores = evaluate(qrels, run, "UDCG@3", utilities=u, utility_field="utility")
        >>> round(scores["q1"]["UDCG@3"], 4)
        0.5826
    """
    return evaluate_table(
        qrels,
        run,
        measures,
        utilities=utilities,
        utility_field=utility_field,
        weights=weights,
        allow_mismatch=allow_mismatch,
        coverage=coverage,
    ).to_dict()
