"""Yes/No checks through the judge, with a soft label beside the hard one.

Where the backend gives log-probabilities, the soft label is P(Yes) / (P(Yes) + P(No)) of the
first answer token (:meth:`Judge.yes_prob`) and the hard label is ``soft >= 0.5``. A value the
server only bounded (Yes or No outside its top log-probs: an upper bound below 0.5 or a lower
bound of at least 0.5, see docs/scale.md) keeps its hard label and gets no soft one (``None``,
counted in ``counts["bounds"]``), so no bound is written as a probability. Otherwise
(``checks="text"``, or ``"auto"`` when the backend has no log-probs: its first ``yes_prob``
raises NotImplementedError or :class:`~udcg.errors.LogprobsUnavailable`) the judge generates a
short reply that is parsed strictly: its first word must be Yes or No. An unusable reply is
retried with a reminder; one still unusable after ``retries`` gets no label (``None``), is
counted, and never becomes a silent No. Any other failure (a server error) propagates: the
labels of one file never mix the two routes because a call failed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Literal

from udcg.errors import LogprobsUnavailable, UDCGInputError
from udcg.judge.base import Judge
from udcg.judge.prompts import Messages
from udcg.labels.batches import judge_call
from udcg.qcare.labels.prompts import YES_NO_RETRY

CheckMode = Literal["auto", "logprobs", "text"]
CHECK_MODES: tuple[str, ...] = ("auto", "logprobs", "text")
_TEXT_TOKENS = 4


def parse_yes_no(text: str) -> bool | None:
    """True for Yes, False for No (first word, case and surrounding punctuation ignored),
    None for anything else.

    Examples:
        >>> parse_yes_no("Yes, it does."), parse_yes_no("**No**"), parse_yes_no("Maybe")
        (True, False, None)
    """
    words = text.strip().split()
    word = words[0].strip(".,:;!?\"'*()[]").lower() if words else ""
    return {"yes": True, "no": False}.get(word)


class YesNoChecker:
    """Runs batches of Yes/No prompts through ``judge`` (see the module docstring).

    ``counts`` accumulates ``logprobs`` and ``text`` (labels by each route), ``bounds`` (log-prob
    labels whose soft value was only bounded), ``retried`` (text replies asked again) and
    ``unusable`` (no label after the retries);
    ``text_reason`` says why ``auto`` fell back to text (only on its first log-prob call).

    Examples:
        A judge without log-probs: ``auto`` falls back to text replies, parsed strictly:

        >>> from udcg.judge import Judge
        >>> class Replies(Judge):  # generates one fixed text, has no log-probs
        ...     name = fingerprint = "replies"
        ...     def __init__(self, text):
        ...         self.text = text
        ...     def yes_prob(self, prompts):
        ...         raise NotImplementedError("no log-probs")
        ...     abstain_prob = None  # not used here
        ...     def generate(self, prompts, max_new_tokens=64):
        ...         return [self.text] * len(prompts)
        >>> checker = YesNoChecker(Replies("Yes."))
        >>> checker([[{"role": "user", "content": "Is Paris in France?"}]], "check")
        ([None], [True])
        >>> checker.counts["text"], checker.text_reason.split(":")[0]
        (1, 'NotImplementedError')
    """

    def __init__(
        self, judge: Judge, mode: CheckMode = "auto", retries: int = 1, batch: int = 64
    ) -> None:
        if mode not in CHECK_MODES:
            raise UDCGInputError(
                f"unknown check mode {mode!r}; known: {', '.join(CHECK_MODES)}", field="checks"
            )
        self.judge = judge
        self.mode = mode
        self.retries = int(retries)
        self.batch = int(batch)
        self.counts: Counter[str] = Counter()
        self.text_reason: str | None = None

    def __call__(
        self, prompts: Sequence[Messages], label: str
    ) -> tuple[list[float | None], list[bool | None]]:
        """``(soft, hard)`` per prompt; soft is None for text labels, bounds, unusable replies."""
        prompts = list(prompts)
        soft: list[float | None] = [None] * len(prompts)
        hard: list[bool | None] = [None] * len(prompts)
        todo = list(range(len(prompts)))
        if self.mode != "text" and self.text_reason is None and prompts:
            try:
                values, bounds = judge_call(
                    self.judge, prompts, self.judge.yes_prob, label, self.batch
                )
            except (NotImplementedError, LogprobsUnavailable) as exc:
                if self.mode == "logprobs" or self.counts["logprobs"]:
                    raise
                self.text_reason = f"{type(exc).__name__}: {exc}"
                values, bounds = [math.nan] * len(prompts), [False] * len(prompts)
            todo = []
            for i, (value, bound) in enumerate(zip(values, bounds, strict=True)):
                value = float(value)
                if math.isfinite(value):
                    soft[i], hard[i] = (None if bound else value), value >= 0.5
                    self.counts.update(["logprobs", "bounds"] if bound else ["logprobs"])
                else:
                    todo.append(i)
        if todo:
            answers = self._by_text([prompts[i] for i in todo], label)
            for i, answer in zip(todo, answers, strict=True):
                hard[i] = answer
        return soft, hard

    def _by_text(self, prompts: list[Messages], label: str) -> list[bool | None]:
        conversations = [list(m) for m in prompts]
        out: list[bool | None] = [None] * len(prompts)
        pending = list(range(len(prompts)))
        for attempt in range(self.retries + 1):
            if not pending:
                break
            if attempt:
                self.counts["retried"] += len(pending)
            replies, _ = judge_call(
                self.judge,
                [conversations[i] for i in pending],
                lambda chunk, **stream: self.judge.generate(list(chunk), _TEXT_TOKENS, **stream),
                f"{label} (text)",
                self.batch,
            )
            still = []
            for i, reply in zip(pending, replies, strict=True):
                out[i] = parse_yes_no(reply)
                if out[i] is None:
                    conversations[i] = [
                        *conversations[i],
                        {"role": "assistant", "content": reply},
                        {"role": "user", "content": YES_NO_RETRY},
                    ]
                    still.append(i)
            pending = still
        self.counts["text"] += len(prompts) - len(pending)
        self.counts["unusable"] += len(pending)
        return out
