"""The judge interface: every LLM call of the toolkit goes through one of these methods."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from udcg.judge.prompts import Messages

AbstainMode = Literal["first_token", "sequence"]


@dataclass(frozen=True)
class JSONResult:
    """One ``generate_json`` outcome: the parsed value, or the failure after all retries."""

    value: Any = None
    error: str | None = None
    attempts: int = 1
    raw: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None


class Judge(ABC):
    """A scoring LLM. ``name`` keys the values it produces (e.g. ``abstain_prob[name]``);
    ``fingerprint`` identifies backend + model + settings for the cache."""

    name: str
    fingerprint: str

    @abstractmethod
    def abstain_prob(
        self, questions: Sequence[str], passages: Sequence[str], mode: AbstainMode = "first_token"
    ) -> np.ndarray:
        """P(abstain) per (question, passage) pair under the reference prompt.

        ``first_token``: softmax of the next-token logits at the first token of NO-RESPONSE;
        ``sequence``: product of the teacher-forced probabilities of all its tokens.
        """

    @abstractmethod
    def yes_prob(self, prompts: Sequence[Messages]) -> np.ndarray:
        """P(Yes) / (P(Yes) + P(No)) of the first answer token, read from log-probs."""

    @abstractmethod
    def generate(self, prompts: Sequence[Messages], max_new_tokens: int = 64) -> list[str]:
        """Greedy completions."""

    def generate_json(
        self,
        prompts: Sequence[Messages],
        validate: Callable[[Any], Any] | None = None,
        max_new_tokens: int = 256,
        retries: int = 2,
    ) -> list[JSONResult]:
        """Completions parsed as JSON (the first object/array, code fences tolerated), checked
        by ``validate(value)`` (raises ValueError to reject; a non-None return replaces the
        value); failed prompts alone are retried up to ``retries`` times. Failures are
        returned, never raised or dropped. See :func:`udcg.judge.structured.generate_json`."""
        from udcg.judge.structured import generate_json

        return generate_json(self, prompts, validate, max_new_tokens, retries)
