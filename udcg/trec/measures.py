"""Measures named in ir_measures syntax: ``nDCG@10``, ``AP``, ``AP@100``, ``RR@10``, ``P@5``,
``P(rel=2)@5``, ``R@100``, ``Hits@10`` (alias ``Success@10``), ``HitCount@10``, and the
utility measures ``UDCG@5``, ``UDCG(gamma=0.5)@5``, ``UDCGtheta@5`` (alias ``UDCG-theta@5``),
and the Q-CARE coverage measures ``C-Prec@10`` and ``C-nDCG@10`` (aliases ``CPrec``,
``CnDCG``; parameters ``binary=True`` and, for C-nDCG, ``gain=exponential``:
``C-nDCG(binary=True,gain=exponential)@10``).

Names are case-insensitive; ir_measures measure objects (``ir_measures.nDCG@10``,
``ir_measures.P(rel=2)@5``) are read by their name (``str(measure)``), without importing
ir_measures. Aliases: ``MAP`` (AP), ``MRR`` (RR), ranx's ``hit_rate@k`` (Hits@k)
and pytrec_eval's names ``ndcg``, ``ndcg_cut_10``, ``map``, ``map_cut_100``, ``recip_rank``,
``P_10``, ``recall_100``, ``success_10`` (or trec_eval's ``-m`` spelling ``P.10``,
``ndcg_cut.10``). ranx's ``hits@k`` counts the relevant documents in the
top k, while ``Hits@k`` is 1 if there is any: that spelling is refused, naming ``HitCount@k``
(the count) and ``Hits@k``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from udcg.errors import UDCGInputError
from udcg.metrics.coverage import GAINS as COVERAGE_GAINS
from udcg.metrics.udcg import DEFAULT_GAMMA

#: canonical name -> (needs a cutoff, parameters it accepts)
MEASURES: dict[str, tuple[bool, tuple[str, ...]]] = {
    "nDCG": (False, ()),
    "AP": (False, ("rel",)),
    "RR": (False, ("rel",)),
    "P": (True, ("rel",)),
    "R": (False, ("rel",)),
    "Hits": (False, ("rel",)),
    "HitCount": (False, ("rel",)),
    "UDCG": (True, ("rel", "gamma")),
    "UDCGtheta": (True, ("rel",)),
    "C-Prec": (True, ("binary",)),
    "C-nDCG": (True, ("binary", "gain")),
}
#: measures of the passages' utilities (they need utilities; UDCGtheta also weights)
UTILITY_MEASURES = ("UDCG", "UDCGtheta")
#: the Q-CARE coverage measures (they need coverage gains, :mod:`udcg.trec.coverage_measures`)
COVERAGE_MEASURES = ("C-Prec", "C-nDCG")
_ALIASES = {name.lower(): name for name in MEASURES} | {
    "success": "Hits",
    "hit_rate": "Hits",
    "map": "AP",
    "mrr": "RR",
    "recip_rank": "RR",
    "udcg-theta": "UDCGtheta",
    "cprec": "C-Prec",
    "cndcg": "C-nDCG",
}
#: pytrec_eval's ``name_k`` (trec_eval's ``name.k``) -> canonical name
_PYTREC_CUT = {"ndcg_cut": "nDCG", "map_cut": "AP", "p": "P", "recall": "R", "success": "Hits"}
_PYTREC = re.compile(r"^(?P<name>ndcg_cut|map_cut|P|recall|success)[_.](?P<cutoff>\d+)$", re.I)
_SYNTAX = re.compile(
    r"^(?P<name>[A-Za-z][A-Za-z_-]*)(?:\((?P<params>[^)]*)\))?(?:@(?P<cutoff>\d+))?$"
)
_PARAM = re.compile(r"\s*(?P<key>[A-Za-z]+)\s*=\s*(?P<value>[^,\s]+)\s*")
_BOOLEANS = {"true": True, "1": True, "false": False, "0": False}


@dataclass(frozen=True)
class Measure:
    """One measure: its canonical name, optional cutoff k, binary relevance level, for UDCG
    gamma (1/3 when not given), and for C-Prec / C-nDCG ``binary`` (r = 1 if a passage covers
    any sub-query) and C-nDCG's ``gain`` (``linear`` when not given, or ``exponential``).

    Examples:
        >>> str(Measure("P", cutoff=5, rel=2)), str(Measure("UDCG", cutoff=5, gamma=0.5))
        ('P(rel=2)@5', 'UDCG(gamma=0.5)@5')
        >>> str(Measure("C-nDCG", cutoff=10, binary=True, gain="exponential"))
        'C-nDCG(binary=True,gain=exponential)@10'
    """

    name: str
    cutoff: int | None = None
    rel: int = 1
    gamma: float | None = None
    binary: bool = False
    gain: str | None = None

    def __post_init__(self) -> None:
        if self.name == "UDCG" and self.gamma is None:
            object.__setattr__(self, "gamma", DEFAULT_GAMMA)
        if self.name == "C-nDCG" and self.gain is None:
            object.__setattr__(self, "gain", "linear")

    def __str__(self) -> str:
        params = [f"rel={self.rel}"] if self.rel != 1 else []
        if self.gamma is not None and self.gamma != DEFAULT_GAMMA:
            params.append(f"gamma={self.gamma!r}")
        if self.binary:
            params.append("binary=True")
        if self.gain is not None and self.gain != "linear":
            params.append(f"gain={self.gain}")
        shown = f"({','.join(params)})" if params else ""
        cutoff = f"@{self.cutoff}" if self.cutoff is not None else ""
        return f"{self.name}{shown}{cutoff}"


def _known() -> str:
    return ", ".join(f"{n}@k" if MEASURES[n][0] else f"{n}[@k]" for n in MEASURES)


def _params(text: str, name: str, params: str) -> dict[str, int | float | bool | str]:
    """``{"rel": int, "gamma": float, "binary": bool, "gain": str}`` from ``key=value, ...``;
    what ``name`` does not accept, a repeat or a bad value is an error."""
    accepted = MEASURES[name][1]
    parsed: dict[str, int | float | bool | str] = {}
    for item in params.split(","):
        match = _PARAM.fullmatch(item)
        key = match["key"] if match else None
        if key in parsed:
            raise UDCGInputError(f"{text!r}: {key} is given twice", field="measures")
        if key not in accepted:
            hint = f"{name} accepts " + ", ".join(accepted) if accepted else f"{name} takes none"
            raise UDCGInputError(
                f"{text!r}: unsupported parameter {item.strip()!r}; {hint}", field="measures"
            )
        value = match["value"]
        if key == "rel":
            if not value.isdigit() or int(value) < 1:
                raise UDCGInputError(f"{text!r}: rel must be an integer >= 1", field="measures")
            parsed[key] = int(value)
        elif key == "binary":
            if value.lower() not in _BOOLEANS:
                raise UDCGInputError(f"{text!r}: binary must be True or False", field="measures")
            parsed[key] = _BOOLEANS[value.lower()]
        elif key == "gain":
            if value.lower() not in COVERAGE_GAINS:
                raise UDCGInputError(
                    f"{text!r}: gain must be one of {', '.join(COVERAGE_GAINS)}", field="measures"
                )
            parsed[key] = value.lower()
        else:
            try:
                gamma = float(value)
            except ValueError:
                gamma = math.nan
            if not (math.isfinite(gamma) and gamma >= 0):
                raise UDCGInputError(
                    f"{text!r}: gamma must be a finite number >= 0", field="measures"
                )
            parsed[key] = gamma
    return parsed


def parse_measure(text: str) -> Measure:
    """Parse one measure name; unknown names and bad parameters raise UDCGInputError.

    Examples:
        >>> parse_measure("ndcg_cut_10")
        Measure(name='nDCG', cutoff=10, rel=1, gamma=None, binary=False, gain=None)
        >>> parse_measure("cndcg(gain=exponential)@10")
        Measure(name='C-nDCG', cutoff=10, rel=1, gamma=None, binary=False, gain='exponential')
    """
    text = text.strip()
    pytrec = _PYTREC.match(text)
    if pytrec:
        return Measure(_PYTREC_CUT[pytrec["name"].lower()], _cutoff(text, pytrec["cutoff"]))
    match = _SYNTAX.match(text)
    if match and match["name"] == "hits":
        k = match["cutoff"] or "k"
        raise UDCGInputError(
            f"{text!r} is ambiguous: ranx's hits@{k} counts the relevant documents in the top "
            f"{k} (use HitCount@{k} for that); Hits@{k} (alias Success@{k}) is 1 if any of "
            f"the top {k} is relevant",
            field="measures",
        )
    name = _ALIASES.get(match["name"].lower()) if match else None
    if match is None or name is None:
        raise UDCGInputError(f"unknown measure {text!r}; known: {_known()}", field="measures")
    cutoff = _cutoff(text, match["cutoff"]) if match["cutoff"] else None
    if cutoff is None and MEASURES[name][0]:
        raise UDCGInputError(f"{name} needs a cutoff, e.g. {name}@10", field="measures")
    params = _params(text, name, match["params"]) if match["params"] else {}
    return Measure(name, cutoff, **params)


def _cutoff(text: str, digits: str) -> int:
    """The cutoff ``digits`` of measure ``text``; 0 is refused (``ndcg_cut_0`` too)."""
    if int(digits) == 0:
        raise UDCGInputError(f"{text!r}: the cutoff must be at least 1", field="measures")
    return int(digits)


def _is_ir_measures(measure: object) -> bool:
    """Whether ``measure`` is an ir_measures measure object (``ir_measures.nDCG@10``), told by
    its type's module so that ir_measures is never imported here."""
    return (type(measure).__module__ or "").split(".")[0] == "ir_measures"


def _parse_one(measure: object) -> Measure:
    if isinstance(measure, Measure):
        return measure
    if isinstance(measure, str):
        return parse_measure(measure)
    if _is_ir_measures(measure):  # its str is its ir_measures name: nDCG@10, P(rel=2)@5
        return parse_measure(str(measure))
    raise UDCGInputError(
        f"expected a measure name, a Measure or an ir_measures measure, got "
        f"{type(measure).__name__}",
        field="measures",
    )


def parse_measures(measures: str | Measure | Iterable[str | Measure]) -> list[Measure]:
    """Parse a name, a Measure or an ir_measures measure object (``ir_measures.nDCG@10``), or
    an iterable of them; duplicates are kept once, in order.

    Examples:
        >>> [str(m) for m in parse_measures(["ndcg_cut_10", "MAP", "P(rel=2)@5", "map"])]
        ['nDCG@10', 'AP', 'P(rel=2)@5']
    """
    single = isinstance(measures, str | Measure) or _is_ir_measures(measures)
    if not single and not isinstance(measures, Iterable):
        raise UDCGInputError(
            f"expected a measure or a list of measures, got {type(measures).__name__}",
            field="measures",
        )
    items = [measures] if single else list(measures)
    if not items:
        raise UDCGInputError("no measure given", field="measures")
    return list(dict.fromkeys(_parse_one(m) for m in items))
