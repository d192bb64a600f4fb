"""Measures named in ir_measures syntax: ``nDCG@10``, ``AP``, ``AP@100``, ``RR@10``, ``P@5``,
``P(rel=2)@5``, ``R@100``, ``Hits@10`` (alias ``Success@10``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from udcg.errors import UDCGInputError

#: canonical name -> (needs a cutoff, accepts ``rel=``)
MEASURES: dict[str, tuple[bool, bool]] = {
    "nDCG": (False, False),
    "AP": (False, True),
    "RR": (False, True),
    "P": (True, True),
    "R": (False, True),
    "Hits": (False, True),
}
_ALIASES = {name.lower(): name for name in MEASURES} | {"success": "Hits", "map": "AP", "mrr": "RR"}
_SYNTAX = re.compile(r"^(?P<name>[A-Za-z]+)(?:\((?P<params>[^)]*)\))?(?:@(?P<cutoff>\d+))?$")


@dataclass(frozen=True)
class Measure:
    """One measure: its canonical name, optional cutoff k and binary relevance level."""

    name: str
    cutoff: int | None = None
    rel: int = 1

    def __str__(self) -> str:
        params = f"(rel={self.rel})" if self.rel != 1 else ""
        cutoff = f"@{self.cutoff}" if self.cutoff is not None else ""
        return f"{self.name}{params}{cutoff}"


def parse_measure(text: str) -> Measure:
    """Parse one measure name; unknown names and bad parameters raise UDCGInputError."""
    match = _SYNTAX.match(text.strip())
    name = _ALIASES.get(match["name"].lower()) if match else None
    if match is None or name is None:
        known = ", ".join(f"{n}@k" if MEASURES[n][0] else f"{n}[@k]" for n in MEASURES)
        raise UDCGInputError(f"unknown measure {text!r}; known: {known}", field="measures")
    needs_cutoff, accepts_rel = MEASURES[name]
    cutoff = int(match["cutoff"]) if match["cutoff"] else None
    if cutoff is None and needs_cutoff:
        raise UDCGInputError(f"{name} needs a cutoff, e.g. {name}@10", field="measures")
    if cutoff == 0:
        raise UDCGInputError(f"{text!r}: the cutoff must be at least 1", field="measures")
    rel = 1
    if match["params"]:
        param = re.fullmatch(r"\s*rel\s*=\s*(\d+)\s*", match["params"])
        if param is None or not accepts_rel:
            raise UDCGInputError(
                f"{text!r}: unsupported parameter {match['params']!r}"
                + ("; only rel=N is accepted" if accepts_rel else f"; {name} takes none"),
                field="measures",
            )
        rel = int(param[1])
        if rel < 1:
            raise UDCGInputError(f"{text!r}: rel must be at least 1", field="measures")
    return Measure(name, cutoff, rel)


def parse_measures(measures: str | Measure | Iterable[str | Measure]) -> list[Measure]:
    """Parse a name, a Measure, or an iterable of them; duplicates are kept once, in order."""
    items = [measures] if isinstance(measures, str | Measure) else list(measures)
    if not items:
        raise UDCGInputError("no measure given", field="measures")
    parsed = [m if isinstance(m, Measure) else parse_measure(m) for m in items]
    return list(dict.fromkeys(parsed))
