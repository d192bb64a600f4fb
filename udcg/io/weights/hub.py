"""Where UDCG-theta weights named on a command line or in Python are: a local folder or file,
or a Hugging Face Hub model (:func:`hub_id`: ``hf://owner/name[@revision]``, or ``owner/name``
when nothing named ``owner`` exists locally) whose three files (:data:`PRETRAINED_FILES`) are
downloaded (:func:`weights_source`). Every reader of weights sources goes through
:func:`weights_source`, so a Hub id means the same everywhere.
"""

from __future__ import annotations

import os
import re
from os import PathLike
from pathlib import Path

from udcg.errors import UDCGInputError
from udcg.io.weights.files import PRETRAINED_FILES

__all__ = ["HUB_PREFIX", "hub_id", "weights_source"]

#: ``owner/name`` and an optional ``@revision`` (a branch, tag or commit)
_HUB_ID = re.compile(
    r"(?P<repo>(?P<owner>[A-Za-z0-9][\w.-]*)/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[^\s@]+))?"
)
#: the prefix that marks a Hugging Face Hub model whatever exists locally
HUB_PREFIX = "hf://"
_TRUE = {"1", "ON", "YES", "TRUE"}


def hub_id(source: str | PathLike[str]) -> tuple[str, str | None] | None:
    """``(repo_id, revision or None)`` when ``source`` names a Hugging Face Hub model, else
    None (a local path). A hub model is ``hf://owner/name[@revision]``, or a string
    ``owner/name[@revision]`` when nothing named ``owner`` exists locally; a path object, a
    path that exists, one starting with ``/``, ``./``, ``../`` or ``~``, a ``.safetensors``
    file and ``dir/typo`` where ``dir`` exists are local. ``hf://`` with anything but
    ``owner/name[@revision]`` is an error.

    Examples:
        >>> hub_id("hf://someone/udcg-theta-k5@v1"), hub_id("weights/theta.safetensors")
        (('someone/udcg-theta-k5', 'v1'), None)
    """
    if not isinstance(source, str):
        return None
    if source.startswith(HUB_PREFIX):
        match = _HUB_ID.fullmatch(source.removeprefix(HUB_PREFIX))
        if match is None:
            raise UDCGInputError(
                f"{source!r} is not a Hugging Face Hub model: expected "
                f"{HUB_PREFIX}owner/name or {HUB_PREFIX}owner/name@revision",
                field="weights",
            )
        return match["repo"], match["revision"]
    match = _HUB_ID.fullmatch(source)
    if match is None or source.endswith(".safetensors") or Path(match["owner"]).exists():
        return None
    return match["repo"], match["revision"]


def _hub_snapshot(repo_id: str, revision: str | None) -> Path:
    """A local folder with the three files of a weights folder of hub model ``repo_id`` at
    ``revision`` (None: the default branch), downloaded; or a one-line error."""
    what = f"Hugging Face Hub model {repo_id!r}" + (f" at {revision!r}" if revision else "")
    if os.environ.get("HF_HUB_OFFLINE", "").upper() in _TRUE:
        raise UDCGInputError(
            f"cannot fetch {what}: HF_HUB_OFFLINE is set (download it where the network "
            f"allows and pass its folder; a local folder is written ./{repo_id})",
            field="weights",
        )
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise UDCGInputError(
            f"fetching {what} needs huggingface_hub (pip install huggingface_hub)",
            field="weights",
        ) from None
    try:
        return Path(
            snapshot_download(repo_id, revision=revision, allow_patterns=list(PRETRAINED_FILES))
        )
    except Exception as exc:  # network, auth, missing repo: one line, whichever it is
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UDCGInputError(f"cannot fetch {what} ({reason})", field="weights") from None


def weights_source(source: str | PathLike[str]) -> Path:
    """The local folder or file of the weights ``source`` names: a Hub model's (:func:`hub_id`)
    downloaded, only its three files at the pinned revision (a one-line error offline, with
    ``HF_HUB_OFFLINE`` set), else the path itself, ``~`` expanded.

    Examples:
        >>> weights_source("runs/theta.safetensors").as_posix()
        'runs/theta.safetensors'
    """
    hub = hub_id(source)
    return Path(source).expanduser() if hub is None else _hub_snapshot(*hub)
