"""Abstention probabilities computed elsewhere (vLLM, an API with top log-probs, another tool).

A JSONL file, one line per (question, passage) pair:
``{"question": "...", "passage": "...", "abstain_prob": 0.03}`` (or ``"abstain_logprob"``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.files import PathType, open_text
from udcg.judge.base import AbstainMode, Judge
from udcg.judge.prompts import Messages


class PrecomputedJudge(Judge):
    """A judge that only looks up abstention probabilities it was given."""

    def __init__(self, path: PathType, name: str = "precomputed") -> None:
        self.path = Path(path)
        self.name = name
        self._probs: dict[tuple[str, str], float] = {}
        digest = hashlib.sha256()
        with open_text(self.path) as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                digest.update(line.encode())
                self._add(line, number)
        if not self._probs:
            raise UDCGInputError("empty file: no precomputed probabilities", path=self.path)
        self.fingerprint = f"precomputed:{digest.hexdigest()}"

    def _add(self, line: str, number: int) -> None:
        def fail(message: str, field: str | None = None) -> UDCGInputError:
            return UDCGInputError(message, path=self.path, line=number, field=field)

        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise fail(f"malformed JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise fail("expected a JSON object")
        for field in ("question", "passage"):
            if not isinstance(row.get(field), str):
                raise fail("missing or not a string", field)
        if "abstain_prob" in row:
            value, field = row["abstain_prob"], "abstain_prob"
        elif "abstain_logprob" in row:
            value, field = row["abstain_logprob"], "abstain_logprob"
        else:
            raise fail("needs abstain_prob or abstain_logprob", "abstain_prob")
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise fail(f"{value!r} is not a finite number", field)
        prob = math.exp(value) if field == "abstain_logprob" else float(value)
        if not 0.0 <= prob <= 1.0 or (field == "abstain_logprob" and value > 0):
            raise fail(f"{value!r} is not a probability", field)
        self._probs[(row["question"], row["passage"])] = prob

    def abstain_prob(
        self, questions: Sequence[str], passages: Sequence[str], mode: AbstainMode = "first_token"
    ) -> np.ndarray:
        """The stored probability of each pair; a pair not in the file is an error."""
        out = np.empty(len(questions))
        for i, pair in enumerate(zip(questions, passages, strict=True)):
            if pair not in self._probs:
                raise UDCGInputError(
                    f"no precomputed probability for question {pair[0][:60]!r} with passage "
                    f"{pair[1][:60]!r}",
                    path=self.path,
                )
            out[i] = self._probs[pair]
        return out

    def _unsupported(self, what: str) -> UDCGInputError:
        return UDCGInputError(
            f"the precomputed judge only provides abstention probabilities, not {what}; "
            "use a model judge for this step",
            field="judge",
        )

    def yes_prob(self, prompts: Sequence[Messages]) -> np.ndarray:
        raise self._unsupported("Yes/No checks")

    def generate(self, prompts: Sequence[Messages], max_new_tokens: int = 64) -> list[str]:
        raise self._unsupported("generation")
