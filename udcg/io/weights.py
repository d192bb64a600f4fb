"""UDCG-theta weight files: a safetensors file and a JSON card beside it.

Tensors (float64): ``alpha`` ``[k]``, ``beta`` ``[k]`` and ``intercept`` ``[]`` (``b``), the
weights of::

    UDCG_theta = sigmoid( b + sum_i alpha_i * rel_i * u_i + sum_i beta_i * (1 - rel_i) * u_i )

The card ``<stem>.json`` records ``format``, ``format_version``, ``k``, ``bias``, ``l2``, the
tensors' shapes and the SHA-256 of the weights file, plus free entries (judge, utility source,
gamma, training-data fingerprint, held-out correlations...). Reading checks one against the
other. Needs ``safetensors`` (the ``train`` extra), imported when a file is read or written.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.files import atomic_write
from udcg.validation import positive_int, show

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "RESERVED",
    "ThetaWeights",
    "card_path",
    "read_weights",
    "write_weights",
]

FORMAT = "udcg-theta"
FORMAT_VERSION = 1
#: card keys written by :func:`write_weights`; the free entries may not override them
RESERVED = ("format", "format_version", "k", "bias", "l2", "weights_sha256", "tensors")


@dataclass(frozen=True, eq=False)
class ThetaWeights:
    """Fitted UDCG-theta weights for lists of ``k = len(alpha)`` passages, with their card."""

    alpha: np.ndarray
    beta: np.ndarray
    intercept: float = 0.0
    bias: bool = False
    l2: float = 0.0
    card: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def k(self) -> int:
        """The list size the weights score."""
        return len(self.alpha)


def card_path(path: str | PathLike[str]) -> Path:
    """The JSON card beside a weights file: ``dir/name.safetensors`` -> ``dir/name.json``."""
    path = Path(path)
    return path.with_name(path.stem + ".json")


def write_weights(
    path: str | PathLike[str], weights: ThetaWeights, card: Mapping[str, Any] | None = None
) -> Path:
    """Write ``weights`` to ``path`` (safetensors) and its card beside it, each atomically;
    ``card`` holds the free entries (JSON-serialisable, none of :data:`RESERVED`). Returns the
    card's path."""
    from safetensors.numpy import save as st_save

    extra = dict(card or {})
    clash = [key for key in extra if key in RESERVED]
    if clash:
        raise UDCGInputError(
            f"card key {clash[0]!r} is reserved (reserved: {', '.join(RESERVED)})", field="card"
        )
    tensors = {
        "alpha": np.ascontiguousarray(weights.alpha, dtype=np.float64),
        "beta": np.ascontiguousarray(weights.beta, dtype=np.float64),
        "intercept": np.asarray(float(weights.intercept), dtype=np.float64),
    }
    blob = st_save(tensors, metadata={"format": FORMAT})
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "k": weights.k,
        "bias": bool(weights.bias),
        "l2": float(weights.l2),
        "tensors": {name: list(t.shape) for name, t in tensors.items()},
        "weights_sha256": hashlib.sha256(blob).hexdigest(),
    }
    try:
        text = json.dumps({**meta, **extra}, indent=2, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise UDCGInputError(f"card is not JSON-serialisable ({exc})", field="card") from None
    path = Path(path)
    with atomic_write(path, "wb") as handle:
        handle.write(blob)
    target = card_path(path)
    with atomic_write(target, "w") as handle:
        handle.write(text + "\n")
    return target


def _read_card(cpath: Path) -> tuple[dict[str, Any], int, bool, float]:
    """``(card, k, bias, l2)`` of a card file, each checked."""
    try:
        card = json.loads(cpath.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as exc:  # also bad UTF-8, too deep, too many digits
        raise UDCGInputError(f"model card is not valid JSON ({exc})", path=cpath) from None
    if not isinstance(card, dict):
        raise UDCGInputError("model card must be a JSON object", path=cpath)
    if card.get("format") != FORMAT:
        raise UDCGInputError(f"not a UDCG-theta card (format {card.get('format')!r})", path=cpath)
    if card.get("format_version") != FORMAT_VERSION:
        raise UDCGInputError(
            f"unsupported format_version {card.get('format_version')!r} "
            f"(this version reads {FORMAT_VERSION})",
            path=cpath,
        )
    try:
        k = positive_int(card.get("k"), "k")
    except UDCGInputError as exc:
        raise UDCGInputError(exc.reason, path=cpath, field="k") from None
    bias = card.get("bias")
    if not isinstance(bias, bool):
        raise UDCGInputError(f"expected true or false, got {show(bias)}", path=cpath, field="bias")
    l2 = card.get("l2", 0.0)
    is_number = isinstance(l2, int | float) and not isinstance(l2, bool)
    if not is_number or not 0 <= l2 <= sys.float_info.max:  # a float, not NaN or inf
        raise UDCGInputError(
            f"expected a finite number >= 0, got {show(l2)}", path=cpath, field="l2"
        )
    return card, k, bias, float(l2)


def _read_tensors(path: Path, blob: bytes, k: int) -> dict[str, np.ndarray]:
    """The three tensors of a safetensors blob, each of the shape ``k`` asks and finite."""
    from safetensors import SafetensorError
    from safetensors.numpy import load as st_load

    try:
        tensors = st_load(blob)
    except (SafetensorError, ValueError, OSError) as exc:
        raise UDCGInputError(f"not a valid safetensors file ({exc})", path=path) from None
    except KeyError as exc:  # a dtype numpy does not have, such as BF16
        raise UDCGInputError(
            f"a tensor has dtype {exc.args[0]}, which numpy cannot read", path=path
        ) from None
    for name, shape in {"alpha": (k,), "beta": (k,), "intercept": ()}.items():
        if name not in tensors:
            raise UDCGInputError(f"tensor {name!r} is missing", path=path)
        if tensors[name].shape != shape:
            raise UDCGInputError(
                f"tensor {name!r} has shape {list(tensors[name].shape)} but the card says "
                f"k={k} (expected {list(shape)})",
                path=path,
            )
        if tensors[name].dtype.kind != "f" or not np.isfinite(tensors[name]).all():
            raise UDCGInputError(
                f"tensor {name!r} must hold finite floating-point values", path=path
            )
    return tensors


def read_weights(path: str | PathLike[str], k: int | None = None) -> ThetaWeights:
    """The weights in ``path`` and its card (see the module docstring), every check done.

    ``k``: the list size the caller's data has; an error if the weights are for another. A
    missing or corrupted file, a card that does not describe the weights (SHA-256, shapes,
    bias), or a card of another format raise :class:`UDCGInputError`.
    """
    path = Path(path)
    cpath = card_path(path)
    if not path.is_file():
        raise UDCGInputError("no such weights file", path=path)
    if not cpath.is_file():
        raise UDCGInputError(
            f"no model card {cpath.name} next to the weights (save() writes both)", path=cpath
        )
    card, card_k, bias, l2 = _read_card(cpath)
    if k is not None and positive_int(k, "k") != card_k:
        raise UDCGInputError(f"weights are for k={card_k}, data has k={k}", path=path)
    blob = path.read_bytes()
    digest = card.get("weights_sha256")
    if digest is not None and digest != hashlib.sha256(blob).hexdigest():
        raise UDCGInputError(
            f"weights file does not match its card {cpath.name} (SHA-256 differs): "
            "corrupted, truncated or replaced",
            path=path,
        )
    tensors = _read_tensors(path, blob, card_k)
    intercept = float(tensors["intercept"])
    if not bias and intercept != 0.0:
        raise UDCGInputError(
            f"the card says bias=false but the intercept is {show(intercept)}", path=path
        )
    return ThetaWeights(
        alpha=tensors["alpha"].astype(np.float64),
        beta=tensors["beta"].astype(np.float64),
        intercept=intercept,
        bias=bias,
        l2=l2,
        card=card,
        path=path,
    )
