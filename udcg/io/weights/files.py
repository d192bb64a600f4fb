"""UDCG-theta weight files: a safetensors file and a JSON card beside it.

Tensors (float64): ``alpha`` ``[k]``, ``beta`` ``[k]`` and ``intercept`` ``[]`` (``b``), the
weights of::

    UDCG_theta = sigmoid( b + sum_i alpha_i * rel_i * u_i + sum_i beta_i * (1 - rel_i) * u_i )

The card ``<stem>.json`` records ``format``, ``format_version``, ``k``, ``bias``, ``l2``, the
tensors' shapes and the SHA-256 of the weights file, plus free entries (judge, utility source,
gamma, training-data fingerprint, held-out correlations...), and ``card_sha256``, the digest of
every other entry (:func:`card_digest`), which binds the card to its tensors. Reading checks one
against the other; a card that records no SHA-256 of the weights, or none of its own entries
though the udcg version it names writes one (0.3 on), is refused unless unverified weights are
allowed on purpose (``allow_unverified=True``, the commands' ``--allow-unverified``), and then a
:class:`~udcg.errors.UDCGWarning` says they are used unchecked. Non-finite weights are never
written.

A weights *folder* (:func:`write_pretrained`, the Hugging Face layout) holds the same tensors
in ``model.safetensors``, the same card as ``config.json`` and a ``README.md`` model card
(:mod:`udcg.io.weights.card`); :func:`read_weights` reads a folder or a single file. Needs
``safetensors`` (the ``train`` extra), imported when a file is read or written.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError, UDCGWarning
from udcg.io.files import atomic_write
from udcg.validation import positive_int, show

__all__ = [
    "CALIBRATED_ON",
    "CALIBRATION_ENTRIES",
    "CALIBRATION_METHODS",
    "CARD_DIGEST_SINCE",
    "CONFIG_NAME",
    "FORMAT",
    "FORMAT_VERSION",
    "MISMATCH_FIELDS",
    "PRETRAINED_FILES",
    "README_NAME",
    "READ_VERSIONS",
    "RESERVED",
    "WEIGHTS_NAME",
    "ThetaWeights",
    "calibration_entry",
    "card_digest",
    "card_path",
    "card_value",
    "check_compatible",
    "check_fingerprint",
    "read_weights",
    "weights_files",
    "write_pretrained",
    "write_weights",
]

#: the files of a weights folder
WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
README_NAME = "README.md"
#: every file :func:`write_pretrained` writes (what a Hub download of a weights folder fetches)
PRETRAINED_FILES = (WEIGHTS_NAME, CONFIG_NAME, README_NAME)

FORMAT = "udcg-theta"
FORMAT_VERSION = 2
#: the card formats read: 1 (before 0.3, and 0.3 cards whose digest covers the free entries
#: only) and :data:`FORMAT_VERSION`
READ_VERSIONS = (1, FORMAT_VERSION)
#: card keys written by :func:`write_weights`; the free entries may not override them
RESERVED = (
    "format",
    "format_version",
    "k",
    "bias",
    "l2",
    "weights_sha256",
    "card_sha256",
    "tensors",
)
#: the first udcg version (major, minor) whose cards record ``card_sha256``
CARD_DIGEST_SINCE = (0, 3)
_VERSION = re.compile(r"(\d+)\.(\d+)")
#: per digest a card may lack: what goes unchecked without it, and how the weights are used
_UNVERIFIED = {
    "weights_sha256": (
        "so nothing checks the weights against their card (swapped or edited tensors would "
        "load unnoticed)",
        "alpha, beta and the intercept are used as the file holds them, unchecked",
    ),
    "card_sha256": (
        "though {writer}, so nothing checks the card's entries (an edit "
        "that turns the judge or utility check off would load unnoticed)",
        "the judge, utility, prompt and calibration entries are used as the card holds "
        "them, unchecked",
    ),
}


@dataclass(frozen=True, eq=False)
class ThetaWeights:
    """Fitted UDCG-theta weights for lists of ``k = len(alpha)`` passages, with their card.
    ``verified``: the weights file was read and matched the SHA-256 its card records
    (:func:`read_weights`); False for weights built in memory or read unverified. ``sha256``:
    the SHA-256 of the weights file as read, verified or not (None in memory).

    Examples:
        >>> w = ThetaWeights(alpha=np.array([1.0, 0.5]), beta=np.array([-0.5, -0.25]))
        >>> w.k, w.intercept, w.verified
        (2, 0.0, False)
    """

    alpha: np.ndarray
    beta: np.ndarray
    intercept: float = 0.0
    bias: bool = False
    l2: float = 0.0
    card: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    verified: bool = False
    sha256: str | None = None

    @property
    def k(self) -> int:
        """The list size the weights score."""
        return len(self.alpha)


def card_path(path: str | PathLike[str]) -> Path:
    """The JSON card beside a weights file: ``dir/name.safetensors`` -> ``dir/name.json``.

    Examples:
        >>> card_path("runs/theta-k5.safetensors").as_posix()
        'runs/theta-k5.json'
    """
    path = Path(path)
    return path.with_name(path.stem + ".json")


def _encode(
    weights: ThetaWeights, card: Mapping[str, Any] | None
) -> tuple[bytes, dict[str, Any], str]:
    """``(safetensors blob, full card, card JSON text)`` of ``weights`` and the free entries."""
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
    for name, tensor in tensors.items():
        if not np.isfinite(tensor).all():
            bad = tensor[~np.isfinite(tensor)].flat[0]
            raise UDCGInputError(
                f"tensor {name!r} holds {show(float(bad))}: only finite weights are written "
                "(they could not be loaded)",
                field="weights",
            )
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
        full = json.loads(json.dumps({**meta, **extra}, allow_nan=False))
        full["card_sha256"] = card_digest(full)
        text = json.dumps(full, indent=2, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise UDCGInputError(f"card is not JSON-serialisable ({exc})", field="card") from None
    return blob, json.loads(text), text


def card_digest(card: Mapping[str, Any]) -> str:
    """SHA-256 of the card's entries as canonical JSON: every entry but ``card_sha256``, so
    ``bias``, ``l2`` and ``weights_sha256`` (the tensors the card describes) too; for a card of
    ``format_version`` 1 its free entries only (every key but :data:`RESERVED`), the rule it
    was written with.

    Examples:
        >>> card_digest({"l2": 0.0, "judge_model": "j"}) == card_digest({"judge_model": "j"})
        False
        >>> old = {"format_version": 1, "l2": 0.0, "judge_model": "j"}
        >>> card_digest(old) == card_digest({**old, "l2": 7.5})
        True
    """
    left_out = RESERVED if card.get("format_version") == 1 else ("card_sha256",)
    free = {k: v for k, v in card.items() if k not in left_out}
    # NaN as JSON's extension writes it: udcg writes none, an older or hand-made card may
    text = json.dumps(free, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _writes_card_digest(version: Any) -> bool:
    """Whether the udcg version a card records (``udcg_version``) writes ``card_sha256``:
    not one before 0.3, nor a card that records none; any other value, unreadable included.

    Examples:
        >>> [_writes_card_digest(v) for v in ("0.3.0", "1.0", "0.2.1", None, "custom")]
        [True, True, False, False, True]
    """
    if version is None:
        return False
    match = _VERSION.match(version) if isinstance(version, str) else None
    return match is None or (int(match[1]), int(match[2])) >= CARD_DIGEST_SINCE


#: Card entries that udcg writes since it writes ``card_sha256`` (0.3): a card holding one
#: was written with its digest, whatever ``udcg_version`` it claims.
_SINCE_CARD_DIGEST = ("judge_fingerprint", "relevance_fingerprint")


def _digest_writer(card: Mapping[str, Any]) -> str:
    """Who writes ``card_sha256`` with this card: its ``udcg_version``, its ``format_version``
    (after 1), or the entry that only such versions write."""
    version = card.get("udcg_version")
    if _writes_card_digest(version):
        return f"udcg {version} writes one"
    if card.get("format_version") != 1:
        return f"udcg writes one in every card of format_version {card.get('format_version')}"
    entry = next(k for k in _SINCE_CARD_DIGEST if k in card)
    return f"the udcg that writes its {entry!r} entry (0.3 and later) writes one"


def _missing_digests(card: Mapping[str, Any]) -> list[str]:
    """The digests of :data:`_UNVERIFIED` the card lacks though its writer records them (a
    ``udcg_version`` that writes ``card_sha256``, a ``format_version`` after 1, or an entry
    only such versions write)."""
    missing = [] if card.get("weights_sha256") is not None else ["weights_sha256"]
    written = _writes_card_digest(card.get("udcg_version")) or card.get("format_version") != 1
    if card.get("card_sha256") is None and (written or any(k in card for k in _SINCE_CARD_DIGEST)):
        missing.append("card_sha256")
    return missing


def write_weights(
    path: str | PathLike[str], weights: ThetaWeights, card: Mapping[str, Any] | None = None
) -> Path:
    """Write ``weights`` to ``path`` (safetensors) and its card beside it, each atomically;
    ``card`` holds the free entries (JSON-serialisable, none of :data:`RESERVED`). Non-finite
    weights, and a ``path`` that is its own card (``theta.json``), are refused before anything
    is written. Returns the card's path.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> w = ThetaWeights(alpha=np.array([1.0, 0.5]), beta=np.array([-0.5, -0.25]))
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     card = write_weights(Path(folder) / "theta.safetensors", w, {"judge": "llama3"})
        ...     back = read_weights(Path(folder) / "theta.safetensors", k=2)
        >>> card.name, back.alpha.tolist(), back.card["judge"], back.verified
        ('theta.json', [1.0, 0.5], 'llama3', True)
    """
    path, target = Path(path), card_path(path)
    if target.resolve() == path.resolve():
        raise UDCGInputError(
            f"the card {target.name} would replace the weights written there: name the weights "
            "file .safetensors",
            path=path,
        )
    blob, _, text = _encode(weights, card)
    with atomic_write(path, "wb") as handle:
        handle.write(blob)
    with atomic_write(target, "w", like=path) as handle:
        handle.write(text + "\n")
    return target


def write_pretrained(
    directory: str | PathLike[str], weights: ThetaWeights, card: Mapping[str, Any] | None = None
) -> Path:
    """Write a weights folder: ``model.safetensors``, ``config.json`` (the card, as
    :func:`write_weights` writes it) and ``README.md`` (the model card rendered from the
    config, :func:`udcg.io.weights.card.render`). Each file is written atomically; other files
    in the folder are left alone. Returns the folder.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> w = ThetaWeights(alpha=np.array([1.0, 0.5]), beta=np.array([-0.5, -0.25]))
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     written = write_pretrained(Path(folder) / "k2", w, card={"judge_model": "llama3"})
        ...     names = sorted(p.name for p in written.iterdir())
        ...     judge = read_weights(written).card["judge_model"]
        >>> names, judge
        (['README.md', 'config.json', 'model.safetensors'], 'llama3')
    """
    from udcg.io.weights.card import render

    blob, full, text = _encode(weights, card)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with atomic_write(directory / WEIGHTS_NAME, "wb") as handle:
        handle.write(blob)
    with atomic_write(directory / CONFIG_NAME, "w", like=directory / WEIGHTS_NAME) as handle:
        handle.write(text + "\n")
    with atomic_write(directory / README_NAME, "w", like=directory / WEIGHTS_NAME) as handle:
        handle.write(render(full, alpha=weights.alpha, beta=weights.beta))
    return directory


def weights_files(path: str | PathLike[str]) -> tuple[Path, Path]:
    """``(weights file, card file)`` of a weights folder (``model.safetensors`` and
    ``config.json``) or of a single ``.safetensors`` file (its ``<stem>.json`` card).

    Examples:
        >>> [p.as_posix() for p in weights_files("runs/theta.safetensors")]
        ['runs/theta.safetensors', 'runs/theta.json']
    """
    path = Path(path)
    if path.is_dir():
        return path / WEIGHTS_NAME, path / CONFIG_NAME
    return path, card_path(path)


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
    if card.get("format_version") not in READ_VERSIONS:
        raise UDCGInputError(
            f"unsupported format_version {card.get('format_version')!r} "
            f"(this version reads {' and '.join(map(str, READ_VERSIONS))})",
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
    if card.get("calibration") is not None:
        try:
            calibration_entry(card["calibration"])
        except UDCGInputError as exc:
            raise UDCGInputError(exc.reason, path=cpath, field=exc.field) from None
    return card, k, bias, float(l2)


#: the recalibrations a card's ``calibration`` entry may hold, and their parameters
CALIBRATION_METHODS: dict[str, tuple[str, ...]] = {
    "platt": ("a", "b"),
    "temperature": ("temperature",),
    "shift": ("b",),
}


def calibration_entry(data: Any) -> tuple[str, dict[str, float], int]:
    """``(method, parameters, n_contexts)`` of a card's ``calibration`` entry
    (:class:`udcg.theta.calibration.Calibration`), every entry checked; a one-line
    :class:`UDCGInputError` names the field.

    Examples:
        >>> calibration_entry({"method": "temperature", "parameters": {"temperature": 2}})
        ('temperature', {'temperature': 2.0}, 0)
        >>> calibration_entry({"method": "platt", "parameters": {"a": 1.0}})
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'calibration.parameters': platt needs parameters a, b, ...
    """
    if not isinstance(data, Mapping):
        raise UDCGInputError(f"expected an object, got {show(data)}", field="calibration")
    method = data.get("method")
    if method not in CALIBRATION_METHODS:
        raise UDCGInputError(
            f"unknown method {show(method)} (expected one of {', '.join(CALIBRATION_METHODS)})",
            field="calibration.method",
        )
    params, needed = data.get("parameters"), CALIBRATION_METHODS[method]
    if not isinstance(params, Mapping) or set(params) != set(needed):
        raise UDCGInputError(
            f"{method} needs parameters {', '.join(needed)}, got {show(params)}",
            field="calibration.parameters",
        )
    values = {}
    for name in needed:
        value = params[name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise UDCGInputError(
                f"expected a number, got {show(value)}", field=f"calibration.{name}"
            )
        positive = name in ("temperature", "a")  # a slope <= 0 would turn the order over
        if not math.isfinite(value) or (positive and value <= 0):
            raise UDCGInputError(
                f"expected a finite{' positive' if positive else ''} number, got {show(value)}",
                field=f"calibration.{name}",
            )
        values[name] = float(value)
    n = data.get("n_contexts", 0)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise UDCGInputError(f"expected a count, got {show(n)}", field="calibration.n_contexts")
    return method, values, n


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


def read_weights(
    path: str | PathLike[str], k: int | None = None, *, allow_unverified: bool = False
) -> ThetaWeights:
    """The weights in ``path`` (a weights folder or a ``.safetensors`` file) and its card
    (see the module docstring), every check done.

    ``k``: the list size the caller's data has; an error if the weights are for another. A
    missing or corrupted file, a card that does not describe the weights (SHA-256, shapes,
    bias), or a card of another format raise :class:`UDCGInputError`; so does a card that
    records no SHA-256 (nothing would notice alpha and beta swapped or edited), or no
    ``card_sha256`` though its ``udcg_version`` writes one, unless ``allow_unverified``: then
    a :class:`UDCGWarning` says the weights are used unchecked.

    Examples:
        Weights for another list size are refused (a round trip: :func:`write_weights`):

        >>> import tempfile
        >>> from pathlib import Path
        >>> w = ThetaWeights(alpha=np.array([1.0, 0.5]), beta=np.array([-0.5, -0.25]))
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = write_weights(Path(folder) / "theta.safetensors", w)
        ...     try:
        ...         read_weights(Path(folder) / "theta.safetensors", k=3)
        ...     except UDCGInputError as error:
        ...         print(error.reason)
        weights are for k=2, data has k=3
    """
    given = Path(path)
    path, cpath = weights_files(path)
    if not given.exists() and given.suffix != ".safetensors":
        raise UDCGInputError("no such weights folder", path=given)
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
    missing = _missing_digests(card)
    if missing and not allow_unverified:
        why = _UNVERIFIED[missing[0]][0]
        if missing[0] == "card_sha256":
            why = why.format(writer=_digest_writer(card))
        raise UDCGInputError(
            f"{cpath.name} records no {missing[0]}, {why}; to use them unchecked, allow "
            "unverified weights (--allow-unverified, allow_unverified=True)",
            path=cpath,
        )
    if digest is not None and digest != hashlib.sha256(blob).hexdigest():
        raise UDCGInputError(
            f"weights file does not match its card {cpath.name} (SHA-256 differs): "
            "corrupted, truncated or replaced",
            path=path,
        )
    if card.get("card_sha256") not in (None, card_digest(card)):
        raise UDCGInputError(
            "the card's entries were changed after udcg wrote them (card_sha256 differs): "
            "the weights, judge, utility, prompt and calibration checks would read the edit; "
            "write cards with udcg (save, weights calibrate)",
            path=cpath,
        )
    tensors = _read_tensors(path, blob, card_k)
    intercept = float(tensors["intercept"])
    if not bias and intercept != 0.0:
        raise UDCGInputError(
            f"the card says bias=false but the intercept is {show(intercept)}", path=path
        )
    for name in missing:
        warnings.warn(
            f"{path}: unverified weights ({cpath.name} records no {name}): {_UNVERIFIED[name][1]}",
            UDCGWarning,
            stacklevel=2,
        )
    return ThetaWeights(
        alpha=tensors["alpha"].astype(np.float64),
        beta=tensors["beta"].astype(np.float64),
        intercept=intercept,
        bias=bias,
        l2=l2,
        card=card,
        path=path,
        verified=digest is not None,
        sha256=hashlib.sha256(blob).hexdigest(),
    )


#: what :func:`check_compatible` compares: field -> (card key, what it is called in errors)
MISMATCH_FIELDS: dict[str, tuple[str, str]] = {
    "k": ("k", "k"),
    "utility": ("utility", "utility source"),
    "judge": ("judge_model", "judge"),
    "fingerprint": ("judge_fingerprint", "judge fingerprint"),
    "relevance": ("relevance_fingerprint", "LLM relevance labels' judge fingerprint"),
    "prompt": ("prompt", "prompt SHA-256"),
    "mode": ("abstention_mode", "abstention mode"),
}


def card_value(card: Mapping[str, Any], name: str) -> Any:
    """The card's value of a :data:`MISMATCH_FIELDS` field (None: unknown); a card without a
    ``utility`` entry predates the option and was fitted on abstention.

    Examples:
        >>> card_value({}, "utility"), card_value({"utility": None}, "utility")
        ('abstention', None)
        >>> card_value({"prompt": {"sha256": "ab12"}}, "prompt")
        'ab12'
    """
    key = MISMATCH_FIELDS[name][0]
    value = card.get(key)
    if name == "utility" and key not in card:
        return "abstention"  # cards that predate the option were all fitted on it
    if name == "prompt":
        return value.get("sha256") if isinstance(value, Mapping) else None
    return value


def _other_key(card: Mapping[str, Any], applied: Mapping[str, Any]) -> bool:
    """Whether the card and the applying side name different judge keys (both known)."""
    fitted, value = card_value(card, "judge"), applied.get("judge")
    return fitted is not None and value is not None and fitted != value


def check_fingerprint(
    card: Mapping[str, Any],
    key: str,
    fingerprint: str,
    allow_mismatch: Any = (),
    option: str = "--allow-mismatch {field}",
    relevance: str | None = None,
    calibrated: bool = False,
) -> list[str]:
    """:func:`check_compatible` of the card's judge fingerprint against ``fingerprint``, that
    of the judge of ``key`` opened after the card's other fields were checked (and of its
    relevance labels' against ``relevance``, when that judge's LLM labels them). For weights of
    another key only the relevance is checked: the judge's mismatch, refused or allowed, was
    checked before, and one LLM may label relevance for another's utilities. ``calibrated``:
    the card's calibration is applied too (:func:`check_compatible`).

    Examples:
        >>> check_fingerprint({"judge_model": "a", "judge_fingerprint": "fp-1"}, "b", "fp-2")
        []
        >>> len(check_fingerprint({"judge_fingerprint": "fp-1"}, "a", "fp-2", ["fingerprint"]))
        1
        >>> card = {"judge_model": "a", "relevance_fingerprint": "fp-1"}
        >>> check_fingerprint(card, "b", "fp-2", relevance="fp-2")
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'relevance': the weights were fitted with LLM ...
    """
    applied = {"relevance": relevance}
    if not _other_key(card, {"judge": key}):
        applied["fingerprint"] = fingerprint
    return check_compatible(card, applied, allow_mismatch, option, calibrated)


def check_compatible(
    card: Mapping[str, Any],
    applied: Mapping[str, Any],
    allow_mismatch: Any = (),
    option: str = "--allow-mismatch {field}",
    calibrated: bool = False,
) -> list[str]:
    """Refuse weights whose card differs from what they are applied to.

    ``applied`` maps fields of :data:`MISMATCH_FIELDS` (``k``, ``utility``, ``judge``,
    ``fingerprint``: of the judge that made the utilities, ``relevance``: of the judge whose
    LLM labelled the relevance, ``prompt``: the prompt's SHA-256, ``mode``) to the value on the
    applying side; a field
    that side does not know (absent or None) is not checked, nor one the card does not record
    (older cards, relevance not labelled by an LLM), nor the fingerprint where the judge keys
    differ (that difference, allowed,
    is the one to name). A difference raises a one-line :class:`UDCGInputError` naming both values,
    unless its field is in ``allow_mismatch`` (``option``, with ``{field}``, is how the message
    says to allow it); returns one note per mismatch allowed on purpose, to record in the output.
    ``calibrated``: the card's calibration is applied too, so what it was fitted on where that
    differs from the card (``calibration_fitted_on``) is checked the same way.

    Examples:
        >>> check_compatible({"k": 5}, {"k": 3})
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'k': the weights were fitted with k 5, not 3 (...)
        >>> card = {"k": 5, "utility": "abstention"}
        >>> len(check_compatible(card, {"k": 5, "utility": "answer_likelihood"}, ["utility"]))
        1
    """
    allowed = [allow_mismatch] if isinstance(allow_mismatch, str) else list(allow_mismatch or ())
    for name in allowed:
        if name not in MISMATCH_FIELDS:
            raise UDCGInputError(
                f"unknown field {name!r} (choose from {', '.join(MISMATCH_FIELDS)})",
                field="allow_mismatch",
            )
    for name in applied:
        if name not in MISMATCH_FIELDS:
            raise UDCGInputError(f"unknown field {name!r}", field="applied")
    notes = _mismatches(card, applied, allowed, option, "the weights were")
    calibrated_on = card.get(CALIBRATED_ON)
    if calibrated and card.get("calibration") is not None and isinstance(calibrated_on, Mapping):
        recorded = {k: v for k, v in applied.items() if MISMATCH_FIELDS[k][0] in calibrated_on}
        notes += _mismatches(calibrated_on, recorded, allowed, option, "their calibration was")
    return notes


#: The card entry of the fields a calibration's contexts had other than the card's (a
#: mismatch allowed when it was fitted), checked where calibrated weights are applied.
CALIBRATED_ON = "calibration_fitted_on"
#: The card entries of one calibration: itself and what its run recorded (what its contexts
#: had, their digest, the mismatches it allowed); a new calibration replaces them all.
CALIBRATION_ENTRIES = (
    "calibration",
    CALIBRATED_ON,
    "calibration_input_sha256",
    "weights_overrides",
)


def _mismatches(
    card: Mapping[str, Any], applied: Mapping[str, Any], allowed: list[str], option: str, who: str
) -> list[str]:
    """:func:`check_compatible`'s check of ``applied`` against one record (``who`` was fitted
    with it): a note per mismatch in ``allowed``, else a one-line refusal."""
    notes = []
    for name, value in applied.items():
        fitted = card_value(card, name)
        if value is None or fitted is None or fitted == value:
            continue
        if name == "fingerprint" and _other_key(card, applied):
            continue  # another judge key, allowed on purpose: its judge is another anyway
        what = MISMATCH_FIELDS[name][1]
        message = f"{who} fitted with {what} {fitted!r}, not {value!r}"
        if name in allowed:
            notes.append(f"field {name!r}: {message} (allowed on purpose)")
            continue
        raise UDCGInputError(
            f"field {name!r}: {message} ({option.format(field=name)} to use them anyway)"
        )
    return notes
