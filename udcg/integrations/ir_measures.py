"""UDCG and Q-CARE coverage measures for ir_measures, so ``ir_measures.calc_aggregate``,
``iter_calc`` and PyTerrier's ``pt.Experiment(eval_metrics=[...])`` compute them beside nDCG:

* ``UDCG(utilities=...)@k`` (``gamma=``, ``rel=``, ``utility_field=``, ``judge_key=``) and
  ``UDCGtheta(utilities=..., weights=...)@k`` (``allow_mismatch=``): the values of
  :func:`udcg.trec.evaluate` with the same parameters (semantics in
  :mod:`udcg.trec.utility_measures`); ``utilities`` is a dict, a TSV/JSONL utilities file or an
  annotated contexts JSONL (with ``judge_key``), as ``udcg trec --utilities`` takes it, or,
  with ``utility_column=`` instead, a column of the run frame (PyTerrier's result frames carry
  one after :class:`udcg.integrations.pyterrier.JudgeUtilities`; ``utility_field`` defaults to
  the column's name when that is ``abstain_prob``, ``answer_prob`` or ``utility``).
* ``CPrec(coverage=...)@k`` and ``CnDCG(coverage=...)@k`` (``binary=``; C-nDCG's ``gain=``,
  ``linear`` or ``exponential``): the values of :func:`udcg.trec.evaluate`'s ``C-Prec@k`` and
  ``C-nDCG@k`` with the same ``coverage`` (semantics in :mod:`udcg.trec.coverage_measures`:
  :func:`udcg.qcare.coverage.c_precision` and :func:`~udcg.qcare.coverage.c_ndcg` of each
  query's top k documents in trec_eval order), ``coverage`` a dict ``{qid: {doc_id: r}}`` of
  gains or of per-sub-query label rows, a ``qid doc_id r`` TSV file, a JSONL file or contexts
  labelled by ``udcg qcare``; or ``coverage_column=``, a column of the run frame holding the
  gains. A top-k document without a gain (or with a null label) is an error naming it.

Queries the qrels do not judge are not scored; ir_measures gives 0 to judged queries the run
lacks, as it does for its own measures. Query ids are read as text and each value reported
under the qrels' own id (an int ``1`` stays ``1``), so ir_measures joins them. A measure's
name is its udcg name with the data sources given (``UDCG(utilities=u.tsv)@5``; a dict by a
digest of its content), so two measures with other sources never share a PyTerrier column;
``udcg_name`` is the name without them (``UDCG(gamma=0.5)@5``), as :func:`udcg.evaluate`
gives it.
``ir_measures.parse_measure`` reads only ir_measures' own registry (adding to it would change
every user of the process), so names reach these measures through :func:`parse_measure` here,
with the sources as keywords.

Examples:
    UDCG@3 beside nDCG@3, one query: relevant d1 and d3 ranked 1st and 3rd:

    >>> import ir_measures
    >>> qrels = {"q1": {"d1": 1, "d2": 0, "d3": 1}}
    >>> run = {"q1": {"d1": 0.9, "d2": 0.8, "d3": 0.1}}
    >>> u = {"q1": {"d1": 0.9, "d2": 0.6, "d3": 0.3}}
    >>> udcg3 = UDCG(utilities=u, utility_field="utility") @ 3
    >>> values = ir_measures.calc_aggregate([udcg3, ir_measures.nDCG @ 3], qrels, run)
    >>> round(values[udcg3], 4), round(values[ir_measures.nDCG @ 3], 4)
    (0.5826, 0.9197)
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
import re
from collections.abc import Iterator
from os import PathLike
from typing import Any, ClassVar

try:
    import ir_measures
    from ir_measures.measures.base import Measure as _IrMeasure
    from ir_measures.measures.base import ParamInfo
except ModuleNotFoundError as missing:
    raise ModuleNotFoundError(
        "udcg.integrations.ir_measures needs the 'ir-measures' extra: "
        "pip install 'udcg[ir-measures]'",
        name=missing.name,
    ) from missing

from udcg.errors import UDCGInputError
from udcg.io.joins.utilities import UTILITY_FIELDS, read_utility_file
from udcg.metrics.udcg import DEFAULT_GAMMA
from udcg.qcare.coverage import GAINS
from udcg.trec.engine import evaluate_table
from udcg.trec.measures import Measure as _UdcgMeasure
from udcg.trec.measures import parse_measure as _parse_udcg
from udcg.validation import one_of

__all__ = ["UDCG", "CPrec", "CnDCG", "UDCGtheta", "parse_measure"]

_CUTOFF = ParamInfo(dtype=int, required=True, desc="ranking cutoff k")
_UTILITY_PARAMS = {
    "cutoff": _CUTOFF,
    "rel": ParamInfo(dtype=int, default=1, desc="minimum relevance level"),
    "utilities": ParamInfo(desc="dict, utilities file or annotated contexts"),
    "utility_column": ParamInfo(dtype=str, desc="the run frame's column holding the values"),
    "utility_field": ParamInfo(dtype=str, desc="abstain_prob, answer_prob or utility"),
    "judge_key": ParamInfo(dtype=str, desc="the judge of an annotated contexts file"),
}
#: parameters that name data, not the measure
_SOURCES = (
    "utilities",
    "utility_column",
    "utility_field",
    "judge_key",
    "weights",
    "allow_mismatch",
    "coverage",
    "coverage_column",
)


_SOURCE_PARAM = re.compile(rf"(?<=[(,])({'|'.join(_SOURCES)})=([^,)]*)(,|(?=\)))")


def _without_sources(name: str, sources: dict[str, Any]) -> str:
    """``name`` without the sources it shows (a name as ``str(measure)`` gives it), each
    checked against the source given under its key.

    Examples:
        >>> _without_sources("UDCG(gamma=0.5,utilities=u.tsv)@5", {"utilities": "u.tsv"})
        'UDCG(gamma=0.5)@5'
    """
    rest = name
    for key, value in sources.items():  # each given source, as its name shows it exactly
        shown = re.escape(f"{key}={_shown(value)}")
        rest = re.sub(rf"(?<=[(,]){shown}(,(?=\w+=)|(?=\)))", "", rest, count=1)
    found = _SOURCE_PARAM.search(rest)  # a source named but not given, or given otherwise
    if found is not None:
        key = found.group(1)
        given = _shown(sources[key]) if key in sources else "nothing"
        raise UDCGInputError(
            f"{name!r} names a {key} other than the one given ({given})", field=key
        )
    return rest.replace(",)", ")").replace("()", "")


#: the source of PyTerrier's measures (the column ``JudgeUtilities`` adds): left out of names
_PYTERRIER_COLUMN = ("utility_column", "utility")


def _shown(value: Any) -> str:
    """A data source as a measure's name shows it: a path or column by its text, a list by its
    items, anything else by its type and a digest of its content (stable across processes).

    Examples:
        >>> _shown("runs/a.jsonl"), _shown(["judge"]), _shown({"q1": {"d1": 0.5}})
        ('runs/a.jsonl', 'judge', 'dict:dabbcb34')
    """
    if isinstance(value, str | PathLike):
        return os.fspath(value)
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return "+".join(value)
    try:
        data = json.dumps(value, sort_keys=True).encode()
    except (TypeError, ValueError):  # not JSON (weights, arrays): its pickled bytes
        data = pickle.dumps(value)
    return f"{type(value).__name__}:{hashlib.sha256(data).hexdigest()[:8]}"


def _ident(value: Any) -> Any:
    """A path by its text, anything else by its identity (a dict is not hashable)."""
    return str(value) if isinstance(value, str | PathLike) else id(value)


def _query_ids(qrels: Any) -> dict[str, Any]:
    """The query ids of a qrels frame by their text: udcg reads every id as text.

    Examples:
        >>> import pandas as pd
        >>> _query_ids(pd.DataFrame({"query_id": [1, 1, 2]}))
        {'1': 1, '2': 2}
    """
    return {str(qid): qid for qid in qrels["query_id"].unique().tolist()}


class _Measure(_IrMeasure):
    """A measure of ir_measures' runtime provider (``runtime_impl``), named by its udcg name."""

    QREL_INPUTS = ("query_id", "doc_id", "relevance")
    #: the data source and the run-frame column that replaces it (one of the two is needed)
    _SOURCE: ClassVar[tuple[str, str] | None] = None

    @property
    def RUN_INPUTS(self) -> tuple[str, ...]:
        """The run columns read: PyTerrier checks a pipeline's output has them."""
        column = self.params.get(self._SOURCE[1]) if self._SOURCE else None
        return ("query_id", "doc_id", "score", *([column] if column else []))

    def _values(self, qrels: Any, run: Any) -> dict[str, float]:
        raise NotImplementedError

    def validate_params(self) -> None:
        """ir_measures' checks, after a missing cutoff or data source is named in one line."""
        public = type(self).__name__.lstrip("_")
        for name, info in self.SUPPORTED_PARAMS.items():
            if info.required and name not in self.params:
                what = "a cutoff, e.g. " if name == "cutoff" else f"{name}: pass "
                example = f"{public}@10" if name == "cutoff" else f"{public}({name}=...)"
                raise UDCGInputError(f"{self.NAME} needs {what}{example}", field=name)
        if self._SOURCE is not None:
            source, column = self._SOURCE
            given = [name for name in self._SOURCE if name in self.params]
            if not given:
                raise UDCGInputError(
                    f"{self.NAME} needs {source}: pass {public}({source}=...) "
                    f"or {public}({column}=...)",
                    field=source,
                )
            if len(given) == 2:
                raise UDCGInputError(
                    f"{self.NAME} takes {source} or {column}, not both", field=column
                )
        super().validate_params()

    def runtime_impl(self, qrels: Any, run: Any) -> Iterator[ir_measures.Metric]:
        """Each judged query's value, under the qrels' own id object (``1``, not ``"1"``):
        ir_measures matches values to queries by these objects."""
        ids = _query_ids(qrels)
        for qid, value in self._values(qrels, run).items():
            yield ir_measures.Metric(ids.get(qid, qid), self, value)

    @property
    def udcg_name(self) -> str:
        """The name :func:`udcg.trec.evaluate` and ``udcg trec`` give this measure
        (``UDCG(gamma=0.5)@5``: no data sources)."""
        return self._udcg_name()

    def __repr__(self) -> str:
        return self._shown_name

    @functools.cached_property
    def _shown_name(self) -> str:
        """:attr:`udcg_name` with the data sources given (``UDCG(utilities=a.jsonl)@5``): two
        measures on other sources have other names, as PyTerrier's columns need (made once: a
        digest reads the whole source)."""
        name = self._udcg_name()
        given = [
            f"{key}={_shown(self.params[key])}"
            for key in _SOURCES
            if key in self.params and (key, self.params[key]) != _PYTERRIER_COLUMN
        ]
        if not given:
            return name
        head, at, cutoff = name.partition("@")
        inner = head[:-1] + "," if head.endswith(")") else head + "("
        return f"{inner}{','.join(given)}){at}{cutoff}"

    def _udcg_name(self) -> str:
        cutoff = self.params.get("cutoff")
        return self.NAME if cutoff is None else f"{self.NAME}@{cutoff}"

    def _key(self) -> tuple[Any, ...]:
        return (repr(self), *(_ident(self.params.get(name)) for name in _SOURCES))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Measure) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


def _column(run: Any, column: str, param: str) -> dict[str, dict[str, float]]:
    """``{qid: {doc_id: value}}`` of a run frame's ``column`` (rows without a value left out:
    a top-k document among them is the measure's located error)."""
    if column not in run.columns:
        raise UDCGInputError(
            f"{param}={column!r}: the run has no such column (found "
            f"{', '.join(map(str, run.columns))})",
            field=param,
        )
    rows = run[["query_id", "doc_id", column]].dropna(subset=[column])
    values: dict[str, dict[str, float]] = {}
    for qid, doc_id, value in rows.itertuples(index=False):
        values.setdefault(str(qid), {})[str(doc_id)] = float(value)
    return values


class _UtilityMeasure(_Measure):
    _SOURCE = ("utilities", "utility_column")

    def _measure(self) -> _UdcgMeasure:
        raise NotImplementedError

    def _udcg_name(self) -> str:
        return str(self._measure())

    def _values(self, qrels: Any, run: Any) -> dict[str, float]:
        utilities, field = self.params.get("utilities"), self.params.get("utility_field")
        column = self.params.get("utility_column")
        if column is not None:
            utilities = _column(run, column, "utility_column")
            field = field or (column if column in UTILITY_FIELDS else None)
        elif "judge_key" in self.params:
            utilities = read_utility_file(utilities, field, self.params["judge_key"])
        table = evaluate_table(
            qrels,
            run,
            [self._measure()],
            utilities=utilities,
            utility_field=field,
            weights=self.params.get("weights"),
            allow_mismatch=self.params.get("allow_mismatch", ()),
        )
        return dict(zip(table.qids, table.values[:, 0].tolist(), strict=True))


class _UDCG(_UtilityMeasure):
    """``UDCG(utilities=...)@k``: :func:`udcg.metrics.udcg` of the top k (gamma 1/3 unless
    given).

    Examples:
        >>> u = {"q1": {"d1": 0.9, "d2": 0.6}}
        >>> m = UDCG(utilities=u, utility_field="utility", gamma=0.5) @ 2
        >>> m.udcg_name, m  # the name ir_measures and PyTerrier show names its sources
        ('UDCG(gamma=0.5)@2', UDCG(gamma=0.5,utilities=dict:6e88f645,utility_field=utility)@2)
        >>> m = UDCG(utilities=u, utility_field="utility") @ 2
        >>> round(m.calc_aggregate({"q1": {"d1": 1}}, {"q1": {"d1": 2.0, "d2": 1.0}}), 4)
        0.5866
    """

    NAME = "UDCG"
    __name__ = "UDCG"
    SUPPORTED_PARAMS: ClassVar[dict[str, ParamInfo]] = {
        **_UTILITY_PARAMS,
        "gamma": ParamInfo(dtype=int | float, default=DEFAULT_GAMMA, desc="penalty weight"),
    }

    def _measure(self) -> _UdcgMeasure:
        return _UdcgMeasure("UDCG", self.params.get("cutoff"), self["rel"], float(self["gamma"]))


class _UDCGtheta(_UtilityMeasure):
    """``UDCGtheta(utilities=..., weights=...)@k``: UDCG-theta with weights fitted for k.

    Examples:
        alpha = (2, 1), beta = (-1, -1): UDCGtheta@2 = sigmoid(2 * 0.9 - 0.6):

        >>> from udcg.io.weights.files import ThetaWeights
        >>> import numpy as np
        >>> w = ThetaWeights(alpha=np.array([2.0, 1.0]), beta=np.array([-1.0, -1.0]))
        >>> u = {"q1": {"d1": 0.9, "d2": 0.6}}
        >>> m = UDCGtheta(utilities=u, utility_field="utility", weights=w) @ 2
        >>> round(m.calc_aggregate({"q1": {"d1": 1}}, {"q1": {"d1": 2.0, "d2": 1.0}}), 4)
        0.7685
    """

    NAME = "UDCGtheta"
    __name__ = "UDCGtheta"
    SUPPORTED_PARAMS: ClassVar[dict[str, ParamInfo]] = {
        **_UTILITY_PARAMS,
        "weights": ParamInfo(required=True, desc="weights folder, .safetensors or ThetaWeights"),
        "allow_mismatch": ParamInfo(dtype=list | tuple, desc="weight-card fields overridden"),
    }

    def _measure(self) -> _UdcgMeasure:
        return _UdcgMeasure("UDCGtheta", self.params.get("cutoff"), self["rel"])


class _CoverageMeasure(_Measure):
    _SOURCE = ("coverage", "coverage_column")
    SUPPORTED_PARAMS: ClassVar[dict[str, ParamInfo]] = {
        "cutoff": _CUTOFF,
        "coverage": ParamInfo(desc="gains or labels (dict, file) or labelled contexts"),
        "coverage_column": ParamInfo(dtype=str, desc="the run frame's column holding the gains"),
        "binary": ParamInfo(dtype=bool, default=False, desc="r = 1 if any sub-query is covered"),
    }

    def _measure(self) -> _UdcgMeasure:
        return _UdcgMeasure(self.NAME, self.params.get("cutoff"), binary=bool(self["binary"]))

    def _udcg_name(self) -> str:
        return str(self._measure())

    def _values(self, qrels: Any, run: Any) -> dict[str, float]:
        column = self.params.get("coverage_column")
        source = self["coverage"] if column is None else _column(run, column, "coverage_column")
        table = evaluate_table(qrels, run, [self._measure()], coverage=source)
        return dict(zip(table.qids, table.values[:, 0].tolist(), strict=True))


class _CPrec(_CoverageMeasure):
    """``CPrec(coverage=...)@k``: ``(1/k) * sum_{j<=k} r_j``.

    Examples:
        >>> cov = {"q1": {"d1": 0.5, "d2": 1.0}}
        >>> (CPrec(coverage=cov) @ 2).calc_aggregate({"q1": {"d1": 1}}, {"q1": {"d1": 2, "d2": 1}})
        0.75
    """

    NAME = "C-Prec"
    __name__ = "C-Prec"


class _CnDCG(_CoverageMeasure):
    """``CnDCG(coverage=...)@k``: ``DCG@k(g(r)) / IDCG@k`` of the top k's own gains, ``gain``
    ``linear`` (g(r) = r, the default) or ``exponential`` (g(r) = 2^(10 r) - 1).

    Examples:
        ``(0.5 + 1/log2(3)) / (1 + 0.5/log2(3))``: the ideal puts d2 first; with the
        exponential gain, ``(1 + 1023/log2(3)) / (1023 + 1/log2(3))`` (g(0.1) = 1):

        >>> qrels, run = {"q1": {"d1": 1}}, {"q1": {"d1": 2, "d2": 1}}
        >>> m = CnDCG(coverage={"q1": {"d1": 0.5, "d2": 1.0}}) @ 2
        >>> round(m.calc_aggregate(qrels, run), 4)
        0.8597
        >>> m = CnDCG(coverage={"q1": {"d1": 0.1, "d2": 1.0}}, gain="exponential") @ 2
        >>> m.udcg_name, round(m.calc_aggregate(qrels, run), 4)
        ('C-nDCG(gain=exponential)@2', 0.6315)
    """

    NAME = "C-nDCG"
    __name__ = "C-nDCG"
    SUPPORTED_PARAMS: ClassVar[dict[str, ParamInfo]] = {
        **_CoverageMeasure.SUPPORTED_PARAMS,
        "gain": ParamInfo(dtype=str, default="linear", desc="linear or exponential"),
    }

    def validate_params(self) -> None:
        """ir_measures' checks, and ``gain`` one of ``linear``, ``exponential``."""
        super().validate_params()
        one_of(self["gain"], "gain", GAINS)

    def _measure(self) -> _UdcgMeasure:
        cutoff = self.params.get("cutoff")
        return _UdcgMeasure(self.NAME, cutoff, binary=bool(self["binary"]), gain=self["gain"])


UDCG = _UDCG()
"""``UDCG(utilities=U)@k``, also ``gamma=``, ``rel=``, ``utility_field=``, ``judge_key=``:
``udcg.evaluate``'s ``UDCG@k``."""
UDCGtheta = _UDCGtheta()
"""``UDCGtheta(utilities=U, weights=W)@k``, also ``rel=``, ``utility_field=``, ``judge_key=``,
``allow_mismatch=``: ``udcg.evaluate``'s ``UDCGtheta@k``."""
CPrec = _CPrec()
"""``CPrec(coverage=C)@k``: ``(1/k) * sum_{j<=k} r_j`` of the top k's coverage gains."""
CnDCG = _CnDCG()
"""``CnDCG(coverage=C)@k``, also ``binary=``, ``gain=``: ``DCG@k(g(r)) / IDCG@k`` of the top
k's coverage gains."""

_UDCG_NAME = re.compile(r"^(?:UDCG|UDCGtheta|UDCG-theta|C-?Prec|C-?nDCG)(?:[(@]|$)", re.I)


def parse_measure(name: str, **sources: Any) -> ir_measures.Measure:
    """The measure called ``name``, its data sources given as keywords: udcg's names
    (``UDCG@5``, ``UDCG(gamma=0.5)@5``, ``UDCGtheta@5``, ``C-Prec@5``,
    ``C-nDCG(binary=True)@10``, ``C-nDCG(gain=exponential)@10``) give this module's measures,
    any other name ir_measures' own (:func:`ir_measures.parse_measure`: ``nDCG@10``,
    ``P(rel=2)@5``), which take no sources.

    Examples:
        >>> u = {"q1": {"d1": 0.9, "d2": 0.6}}
        >>> m = parse_measure("UDCG(gamma=0.5)@2", utilities=u, utility_field="utility")
        >>> m.udcg_name, m == UDCG(utilities=u, utility_field="utility", gamma=0.5) @ 2
        ('UDCG(gamma=0.5)@2', True)
        >>> parse_measure("C-nDCG(binary=True)@10", coverage_column="coverage")
        C-nDCG(binary=True,coverage_column=coverage)@10
        >>> parse_measure("C-nDCG(gain=exponential)@10", coverage_column="coverage").udcg_name
        'C-nDCG(gain=exponential)@10'
        >>> str(parse_measure(str(m), utilities=u, utility_field="utility")) == str(m)
        True
        >>> parse_measure("nDCG@10")
        nDCG@10
    """
    text = _without_sources(name.strip(), sources)
    if _UDCG_NAME.match(text):
        parsed = _parse_udcg(text)
        params: dict[str, Any] = {"rel": parsed.rel} if parsed.rel != 1 else {}
        if parsed.gamma is not None and parsed.gamma != DEFAULT_GAMMA:
            params["gamma"] = parsed.gamma
        if parsed.binary:
            params["binary"] = True
        if parsed.gain is not None and parsed.gain != "linear":
            params["gain"] = parsed.gain
        base = {"UDCG": UDCG, "UDCGtheta": UDCGtheta, "C-Prec": CPrec, "C-nDCG": CnDCG}
        return base[parsed.name](**params, **sources) @ parsed.cutoff
    if sources:
        raise UDCGInputError(
            f"{text!r} is not a udcg measure: it takes no {', '.join(sorted(sources))}",
            field="measures",
        )
    return ir_measures.parse_measure(text)
