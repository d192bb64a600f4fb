"""Judge probabilities computed elsewhere (vLLM, an API with top log-probs, another tool).

A JSONL file, one line per (question, passage) pair, with at least one stored value:
``{"question": "...", "passage": "...", "abstain_prob": 0.03, "answer_prob": 0.41}``; each
value may be given as a natural-log probability instead (``"abstain_logprob"``,
``"answer_logprob"``). ``answer_prob`` is the pair's answer likelihood, already normalised as
:meth:`~udcg.judge.base.Judge.answer_prob` states (max over acceptable answers of the per-token
geometric mean); the answers passed at lookup time are checked, not used.
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
from udcg.judge.base import AbstainMode, Judge, check_answer_inputs
from udcg.judge.prompts import Messages
from udcg.judge.spec import precomputed_key

#: Stored values: probability field -> its log-probability alternative.
VALUES = {"abstain_prob": "abstain_logprob", "answer_prob": "answer_logprob"}


class PrecomputedJudge(Judge):
    """A judge that only looks up the abstention and answer probabilities it was given;
    ``name`` defaults to the file's name without ``.gz`` and ``.jsonl``."""

    def __init__(self, path: PathType, name: str | None = None) -> None:
        self.path = Path(path)
        self.name = name or precomputed_key(self.path)
        self._probs: dict[str, dict[tuple[str, str], float]] = {v: {} for v in VALUES}
        digest = hashlib.sha256()
        with open_text(self.path) as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                digest.update(line.encode())
                self._add(line, number)
        if not any(self._probs.values()):
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
        found = False
        for prob_field, log_field in VALUES.items():
            if prob_field in row:
                value, field = row[prob_field], prob_field
            elif log_field in row:
                value, field = row[log_field], log_field
            else:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
            ):
                raise fail(f"{value!r} is not a finite number", field)
            prob = math.exp(value) if field == log_field else float(value)
            if not 0.0 <= prob <= 1.0 or (field == log_field and value > 0):
                raise fail(f"{value!r} is not a probability", field)
            self._probs[prob_field][(row["question"], row["passage"])] = prob
            found = True
        if not found:
            names = " or ".join(f"{p} ({lp})" for p, lp in VALUES.items())
            raise fail(f"needs {names}", "abstain_prob")

    def _lookup(self, what: str, questions: Sequence[str], passages: Sequence[str]) -> np.ndarray:
        stored = self._probs[what]
        out = np.empty(len(questions))
        for i, pair in enumerate(zip(questions, passages, strict=True)):
            if pair not in stored:
                raise UDCGInputError(
                    f"no precomputed {what} for question {pair[0][:60]!r} with passage "
                    f"{pair[1][:60]!r}",
                    path=self.path,
                )
            out[i] = stored[pair]
        return out

    def abstain_prob(
        self, questions: Sequence[str], passages: Sequence[str], mode: AbstainMode = "first_token"
    ) -> np.ndarray:
        """The stored probability of each pair; a pair not in the file is an error."""
        return self._lookup("abstain_prob", questions, passages)

    def answer_prob(
        self,
        questions: Sequence[str],
        passages: Sequence[str],
        answers: Sequence[Sequence[str]],
    ) -> np.ndarray:
        """The stored answer likelihood of each pair (answers are checked, not used); a pair
        without one is an error."""
        questions, passages, _ = check_answer_inputs(questions, passages, answers)
        return self._lookup("answer_prob", questions, passages)

    def _unsupported(self, what: str) -> UDCGInputError:
        return UDCGInputError(
            f"the precomputed judge only provides stored probabilities, not {what}; "
            "use a model judge for this step",
            field="judge",
        )

    def yes_prob(self, prompts: Sequence[Messages]) -> np.ndarray:
        raise self._unsupported("Yes/No checks")

    def generate(self, prompts: Sequence[Messages], max_new_tokens: int = 64) -> list[str]:
        raise self._unsupported("generation")
