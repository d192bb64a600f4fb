"""Reading the JSON replies of OpenAI-compatible servers: pure functions raising
:class:`ReplyError` for a reply they cannot use (the caller prefixes the URL and item)."""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from udcg.errors import LogprobsUnavailable
from udcg.judge.openai_http import JudgeServerError, snippet

YES_TOKENS = frozenset({"Yes", " Yes"})
NO_TOKENS = frozenset({"No", " No"})
ECHO_FIELDS = ("tokens", "token_logprobs", "text_offset")
_LOGPROB_SLACK = 1e-4  # log-probs a little above 0 are rounding; larger ones are errors
_MASS_SLACK = 1e-3  # top-k probabilities adding up a little above 1 are rounding


class ReplyError(JudgeServerError):
    """A reply that lacks a field, or holds values that cannot be used."""


class NoLogprobsError(ReplyError, LogprobsUnavailable):
    """A reply without the log-probs it was asked for."""


class NoEchoError(ReplyError):
    """A reply to an echo request without the prompt's log-probs: the server cannot echo."""


class MisroutedReplyError(ReplyError):
    """A reply to another request than the one sent: of another model, with other choices, or
    echoing another prompt."""


def refuses_response_format(error: JudgeServerError) -> bool:
    """Whether ``error`` is HTTP 400/422 naming ``response_format`` or its JSON types."""
    reply = error.reply.lower()
    return error.status in (400, 422) and any(
        word in reply for word in ("response_format", "json_schema", "json_object")
    )


def _logprob(value: float, what: str) -> float:
    """``value`` as a log-prob, clamped to <= 0; NaN and positive values are errors."""
    if math.isnan(value) or value > _LOGPROB_SLACK:
        raise ReplyError(f"invalid log-prob {value!r}{what}")
    return min(value, 0.0)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number_logprob(value: int | float, what: str) -> float:
    """A JSON number of a reply as a log-prob (:func:`_logprob`); an integer too large for a
    float is an error too."""
    try:
        return _logprob(float(value), what)
    except OverflowError:
        raise ReplyError(f"invalid log-prob {str(value)[:20]}...{what}") from None


def logsumexp(values: list[float]) -> float:
    """log(sum(exp(values))) without overflow; ``values`` must not be empty."""
    top = max(values)
    if top == -math.inf:
        return top
    return top + math.log(sum(math.exp(v - top) for v in values))


def sigmoid(x: float) -> float:
    """1 / (1 + exp(-x)) without overflow."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def same_model(named: Any, model: str) -> bool:
    """Whether a reply's ``model`` is ``model`` or a dated version of it (OpenAI answers
    ``gpt-4o-mini-2024-07-18`` or ``gpt-4-0613`` to ``gpt-4o-mini`` or ``gpt-4``): another
    name that only starts with ``model`` (``gpt-4o-mini`` for ``gpt-4o``) is another model.

    >>> [same_model(m, "gpt-4o") for m in ("gpt-4o", "gpt-4o-2024-08-06", "gpt-4o-mini")]
    [True, True, False]
    """
    dated = re.escape(model) + r"-(\d{4}|\d{4}-\d{2}-\d{2})"
    return isinstance(named, str) and (named == model or re.fullmatch(dated, named) is not None)


def first_choice(reply: Any, model: str | None = None) -> dict[str, Any]:
    """The reply's one choice (``index`` 0, or the only entry when it has no index); a reply
    naming another model than ``model`` (:func:`same_model`) is an error, and so is one with
    several choices (batch results must also name their model: ``batch_files``).

    >>> first_choice({"model": "m", "choices": [{"index": 0, "text": "a"}]}, "m")["text"]
    'a'
    """
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ReplyError(f"reply has no 'choices' list: {snippet(str(reply))}")
    if model is not None and "model" in reply:
        if not same_model(reply["model"], model):
            named = snippet(json.dumps(reply["model"]))
            raise MisroutedReplyError(
                f"the reply is of model {named}, not of the judge's {model!r} (a server that"
                " answers under another name, such as an Azure deployment, needs the judge"
                " option reply_model=NAME)"
            )
    if len(choices) > 1 or choices[0].get("index", 0) != 0:
        found = [c.get("index") if isinstance(c, dict) else c for c in choices]
        raise MisroutedReplyError(
            f"the reply has choices {snippet(repr(found))}, not the one asked for"
        )
    return choices[0]


#: ``finish_reason`` values of a reply that was stopped, not answered (vLLM and SGLang abort)
STOPPED = frozenset({"content_filter", "abort", "error"})


def refuse_stopped(choice: Mapping[str, Any]) -> None:
    """Raise :class:`ReplyError` for a choice the server stopped instead of answering
    (``finish_reason`` ``content_filter``, ``abort`` or ``error``, or an object of such a
    ``type``): an error of this request, not a value, nor a sign the server lacks a feature.

    >>> refuse_stopped({"finish_reason": "length"})
    >>> refuse_stopped({"finish_reason": {"type": "abort"}})
    Traceback (most recent call last):
    ...
    udcg.judge.openai_replies.ReplyError: the server stopped the reply (finish_reason ...
    """
    reason = choice.get("finish_reason")
    kind = reason.get("type") if isinstance(reason, dict) else reason
    if isinstance(kind, str) and kind in STOPPED:
        raise ReplyError(
            f"the server stopped the reply (finish_reason {snippet(json.dumps(reason))})"
        )


def message_text(choice: Mapping[str, Any]) -> str:
    """The text of a chat completion choice (``message.content``); a reply the server stopped
    (:func:`refuse_stopped`) is an error, not an answer."""
    refuse_stopped(choice)
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else None
    if not isinstance(text, str):
        raise ReplyError(
            f"reply has no text in 'choices[0].message.content': {snippet(str(choice))}"
        )
    return text


def first_token_logprobs(choice: Mapping[str, Any]) -> dict[str, float]:
    """Token text -> log-prob of the first generated token's top alternatives, the chosen one
    included (largest if listed twice); chat format (``logprobs.content[0].top_logprobs``) or
    completions format (``logprobs.top_logprobs[0]``, llama-cpp-python); a reply the server
    stopped is :func:`refuse_stopped`'s error."""
    refuse_stopped(choice)
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        raise NoLogprobsError(
            f"the reply has no log-probs ('choices[0].logprobs' is "
            f"{type(logprobs).__name__}); the server ignores 'logprobs'/'top_logprobs'"
            " (transformers serve does; vLLM, llama.cpp's llama-server and llama-cpp-python"
            " return them)"
        )
    found: dict[str, float] = {}

    def add(token: Any, logprob: Any) -> None:
        if token is None and logprob is None:
            return
        if not isinstance(token, str) or isinstance(logprob, bool):
            raise ReplyError(f"malformed log-prob entry {token!r}: {logprob!r}")
        try:
            value = float(logprob)
        except (TypeError, ValueError, OverflowError):
            raise ReplyError(f"malformed log-prob entry {token!r}: {logprob!r}") from None
        value = _logprob(value, f" for token {token!r}")
        found[token] = max(value, found.get(token, -math.inf))

    content = logprobs.get("content")
    legacy = logprobs.get("top_logprobs")
    if isinstance(content, list) and content and isinstance(content[0], dict):
        first = content[0]
        entries = first.get("top_logprobs") or []
        if not isinstance(entries, list):
            raise ReplyError(f"malformed top_logprobs {snippet(repr(entries))}")
        for entry in entries:
            if not isinstance(entry, dict):
                raise ReplyError(f"malformed top_logprobs entry {entry!r}")
            add(entry.get("token"), entry.get("logprob"))
        add(first.get("token"), first.get("logprob"))
    elif isinstance(legacy, list) and legacy and isinstance(legacy[0], dict):
        for token, logprob in legacy[0].items():
            add(token, logprob)
        tokens, token_logprobs = logprobs.get("tokens"), logprobs.get("token_logprobs")
        if isinstance(tokens, list) and isinstance(token_logprobs, list):
            if tokens and token_logprobs:
                add(tokens[0], token_logprobs[0])
    if not found:
        raise ReplyError(
            f"the reply has no top log-probs for the first token: {snippet(str(logprobs))}"
        )
    mass = sum(math.exp(v) for v in found.values())
    if mass > 1.0 + _MASS_SLACK:
        raise ReplyError(
            f"the first token's top log-probs add up to probability {mass:.4g}, more than 1:"
            f" not a distribution ({snippet(str(found))})"
        )
    return found


def unlisted_logprob(top: Mapping[str, float]) -> float:
    """An upper bound of the log-prob of a token outside the top-k list ``top``:
    min(smallest listed log-prob, log(1 - sum of the listed probabilities)).

    >>> round(math.exp(unlisted_logprob({"No": math.log(0.95)})), 6)
    0.05
    >>> round(math.exp(unlisted_logprob({"a": math.log(0.5), "b": math.log(0.1)})), 6)
    0.1
    """
    rest = 1.0 - sum(math.exp(v) for v in top.values())
    return min(min(top.values()), math.log(rest) if rest > 0.0 else -math.inf)


def yes_ratio(top: Mapping[str, float], top_k: int) -> tuple[float, bool]:
    """(P(Yes) / (P(Yes) + P(No)), whether a bound was used) from the first token's top-k
    log-probs ``top``; a side outside them is taken at :func:`unlisted_logprob`, both outside
    is an error. With Yes outside, the value is an upper bound below 0.5 (the server ranked
    No above Yes); with No outside, a lower bound of at least 0.5: either way the true value
    lies on the same side of 0.5, farther from it.

    >>> yes_ratio({"The": math.log(0.5), "No": math.log(0.1)}, 2)
    (0.49999999999999994, True)
    >>> value, bound = yes_ratio({"Yes": math.log(0.6), "No": math.log(0.2)}, 2)
    >>> round(value, 6), bound
    (0.75, False)
    """
    yes = [lp for token, lp in top.items() if token in YES_TOKENS]
    no = [lp for token, lp in top.items() if token in NO_TOKENS]
    if not yes and not no:
        best = sorted(top, key=top.get, reverse=True)[:5]  # type: ignore[arg-type]
        raise ReplyError(
            f"neither 'Yes' nor 'No' is among the top {top_k} first tokens (top: {best}),"
            " so P(Yes)/(P(Yes)+P(No)) is undefined"
        )
    unlisted = unlisted_logprob(top)
    log_yes = logsumexp(yes) if yes else unlisted
    log_no = logsumexp(no) if no else unlisted
    if log_yes == -math.inf and log_no == -math.inf:
        raise ReplyError("both P(Yes) and P(No) are 0")
    value = sigmoid(log_yes - log_no)  # 1.0 / 0.0 when one side is -inf
    if not yes:  # at a tie with No the last listed token, still below 0.5
        value = min(value, math.nextafter(0.5, 0.0))
    return value, not yes or not no


def token_prob(top: Mapping[str, float], token: str) -> tuple[float, bool]:
    """(P(``token``), whether a bound was used) from the top-k log-probs ``top``; outside them,
    the upper bound exp(:func:`unlisted_logprob`)."""
    if token in top:
        return math.exp(top[token]), False
    return math.exp(unlisted_logprob(top)), True


def generated_tokens(reply: Any) -> int | None:
    """``usage.completion_tokens`` of a reply, or None."""
    usage = reply.get("usage") if isinstance(reply, dict) else None
    count = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        return None
    return count


def over_budget(reply: Any, limit: int) -> str | None:
    """Why ``reply`` cannot answer a request of at most ``limit`` new tokens (its
    ``usage.completion_tokens`` is larger), or None.

    >>> over_budget({"usage": {"completion_tokens": 40}}, 32)[:44]
    'the reply generated 40 tokens (usage.complet'
    >>> over_budget({"usage": {"completion_tokens": 32}}, 32) is None
    True
    """
    used = generated_tokens(reply)
    if used is None or used <= limit:
        return None
    return (
        f"the reply generated {used} tokens (usage.completion_tokens), more than the {limit}"
        " the request allowed (max_tokens)"
    )


def within_budget(reply: Any, limit: int) -> None:
    """Raise :class:`ReplyError` when ``reply`` generated more than ``limit`` tokens
    (:func:`over_budget`): the server, or a proxy in between, ignored ``max_tokens``."""
    reason = over_budget(reply, limit)
    if reason is not None:
        raise ReplyError(f"{reason}: the server, or a proxy in between, ignored it")


def _unit(text: str) -> str:
    """The letters and digits that stand for ``text`` (one character, or one with its combining
    marks) in an echo, however a server's tokenizer normalises it: compatibility-decomposed
    without accents (``é``, ``e`` + U+0301 -> ``e``; the Kelvin sign -> ``K``; ``ﬁ`` -> ``fi``)
    and composed again (a Hangul syllable stays one letter).

    >>> [_unit(c) for c in ("é", "e\u0301", "\u212a", "ﬁ", "각", "東", "?")]
    ['e', 'e', 'K', 'fi', '각', '東', '']
    """
    letters = "".join(c for c in unicodedata.normalize("NFKD", text) if c.isalnum())
    return unicodedata.normalize("NFC", letters)


def _clusters(text: str) -> list[str]:
    """``text`` as characters, each with the combining marks after it."""
    out: list[str] = []
    for char in text:
        if out and unicodedata.combining(char):
            out[-1] += char
        else:
            out.append(char)
    return out


def _skeleton(text: str) -> str:
    """The letters and digits of ``text`` compatibility-decomposed: :func:`_echoes`'s test of
    an echo that spells the prompt sent, at C speed.

    >>> _skeleton("Cafe\u0301 \u212a") == _skeleton("Café K") == "CafeK"
    True
    """
    return re.sub(r"[\W_]+", "", unicodedata.normalize("NFKD", text))


def _echoes(echoed: str, sent: str, specials: Iterable[str] = ()) -> bool:
    """Whether ``echoed`` can be a server's echo of the prompt ``sent``, both without the
    ``specials`` (a tokenizer's added tokens, which servers may echo or drop): the letters and
    digits of every script (:func:`_unit`, so without spacing, punctuation and accents) in
    order, where each character of ``sent`` that is not ASCII may be missing (split over
    tokens, it echoes as pieces that cannot be compared). Linear in the prompt's length but for
    characters whose letters are ASCII (``é``), which may match or be missing.

    >>> [_echoes(echo, "Phở, Hà Nội") for echo in ("Pho, Ha Noi", "Ph, H Ni", "Pho, Ha Nai")]
    [True, True, False]
    >>> _echoes("Кто East?", "Кто? 東京"), _echoes("Где?", "Кто?"), _echoes("Кто", "Кто? 東京")
    (False, False, True)
    >>> _echoes("373 at", "373 \u212a at"), _echoes("각", "가각"), _echoes("e", "e\u0301")
    (True, True, True)
    """
    for special in specials:
        echoed, sent = echoed.replace(special, ""), sent.replace(special, "")
    if _skeleton(echoed) == _skeleton(sent):
        return True
    echoed = "".join(_unit(c) for c in _clusters(unicodedata.normalize("NFC", echoed)))
    parts = [(unit, cluster.isascii()) for cluster in _clusters(sent) if (unit := _unit(cluster))]
    left = len(echoed) - sum(len(unit) for unit, _ in parts)  # echoed beyond what sent can give
    at = {0}  # the places in echoed that the start of sent read so far can reach
    for unit, required in parts:
        left += len(unit)
        if required:
            at = {i + len(unit) for i in at if echoed.startswith(unit, i)}
        elif any(c.isascii() for c in unit):  # é: its e may be the next letter's
            at |= {i + len(unit) for i in at if echoed.startswith(unit, i)}
        else:  # letters no ASCII character can stand for: taken where they match
            at = {i + len(unit) if echoed.startswith(unit, i) else i for i in at}
        at = {i for i in at if i >= left}  # the rest of sent must still reach the end
        if not at:
            return False
    return len(echoed) in at


def echoed_continuation(
    choice: Mapping[str, Any],
    prompt: str,
    text: str,
    generated: int | None = None,
    specials: Iterable[str] = (),
) -> list[tuple[str, float, dict[str, float]]]:
    """:func:`_echoed_continuation` of ``prompt`` and ``text`` as sent, or, when those do not
    align and differ from their NFC form, of that form: a server whose tokenizer normalises to
    NFC echoes ``é`` for ``e`` + U+0301, one character where two were sent."""
    try:
        return _echoed_continuation(choice, prompt, text, generated, specials)
    except ReplyError:
        composed = [unicodedata.normalize("NFC", part) for part in (prompt, text)]
        if composed == [prompt, text]:
            raise
        return _echoed_continuation(choice, *composed, generated, specials)


def _echoed_continuation(
    choice: Mapping[str, Any],
    prompt: str,
    text: str,
    generated: int | None,
    specials: Iterable[str],
) -> list[tuple[str, float, dict[str, float]]]:
    """(token, log-prob, top alternatives) of the echoed tokens of ``text``, sent with ``echo``
    after ``prompt``. ``text`` starts ``len(text)`` characters before the echoed prompt's end
    when the reply counts its ``generated`` tokens (echoes without special tokens' text,
    llama-cpp-python), else at ``len(prompt)``. A token spanning the start of ``text``, or one
    that is not ``text``'s at its offset (byte pieces of a split character aside), is an error;
    echoed tokens before ``text`` that do not spell ``prompt`` (compared without ``specials``,
    spacing, accents and other non-ASCII characters) are :class:`MisroutedReplyError`; a reply
    the server stopped is :func:`refuse_stopped`'s error."""
    refuse_stopped(choice)
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict) or not all(
        isinstance(logprobs.get(f), list) for f in ECHO_FIELDS
    ):
        raise NoEchoError(
            f"the reply has no prompt log-probs ('choices[0].logprobs' needs "
            f"{', '.join(ECHO_FIELDS)}); the server does not return log-probs of echoed "
            "prompts (vLLM and llama-cpp-python do; chat-only servers and llama.cpp's "
            "llama-server do not), so a given continuation cannot be scored"
        )
    entries = list(zip(*(logprobs[f] for f in ECHO_FIELDS), strict=False))
    previous = 0
    for token, _, offset in entries:
        if not isinstance(offset, int) or isinstance(offset, bool) or not isinstance(token, str):
            raise ReplyError(f"malformed echoed token {token!r} at text offset {offset!r}")
        if offset < previous:
            raise ReplyError(f"echoed token {token!r} at text offset {offset} goes back")
        previous = offset
    if generated is not None and generated < len(entries):
        echoed = entries[: len(entries) - generated]
        if not echoed:
            raise ReplyError("the reply echoes no prompt token")
        last_token, _, last_offset = echoed[-1]
        end = entries[len(echoed)][2] if generated else last_offset + len(last_token)
        start = end - len(text)
    else:
        echoed, start = entries, len(prompt)
        end = start + len(text)
    tops = logprobs.get("top_logprobs")
    picked: list[tuple[str, float, dict[str, float]]] = []
    first = None
    for index, (token, logprob, offset) in enumerate(echoed):
        if offset >= end:
            break
        if offset < start:
            if offset + len(token) > start:
                raise ReplyError(
                    f"token {token!r} spans the end of the prompt and the start of "
                    f"{text!r}; its tokens cannot be scored apart"
                )
            continue
        if not _is_number(logprob):
            raise ReplyError(f"malformed log-prob {logprob!r}")
        first = offset if first is None else first
        top = tops[index] if isinstance(tops, list) and index < len(tops) else None
        alternatives = {
            str(t): _number_logprob(lp, f" of {t!r}")
            for t, lp in (top.items() if isinstance(top, dict) else ())
            if _is_number(lp)
        }
        picked.append((token, _number_logprob(logprob, ""), alternatives))
    if first != start:
        raise ReplyError(f"no echoed token starts at the start of {text!r}")
    if not re.fullmatch(_spelling([token for token, _, _ in picked]), text):
        raise ReplyError(
            f"the echoed tokens {[t for t, _, _ in picked]!r} do not spell the scored text {text!r}"
        )
    before = "".join(t for t, _, at in echoed if at < start and not t.startswith("bytes:"))
    if not _echoes(before, prompt, specials):
        raise MisroutedReplyError(
            "the reply echoes another prompt than the one sent: a proxy or cache in between"
            " that answers another request?"
        )
    return picked


def _spelling(tokens: list[str]) -> str:
    """A pattern of the text that ``tokens`` spell in turn, each exactly once. A piece of a
    character split over tokens (``bytes:\\xe2\\x80`` in vLLM, U+FFFD elsewhere, ``''`` in
    llama-cpp-python, which drops the bytes it cannot decode) cannot be compared: each run of
    them stands for one or more non-ASCII characters.

    >>> bool(re.fullmatch(_spelling([" caf", "bytes:\\xc3", "bytes:\\xa9"]), " café"))
    True
    >>> bool(re.fullmatch(_spelling([" T", "", "", "kyo"]), " Tōkyo"))
    True
    >>> [bool(re.fullmatch(_spelling(t), " cafe")) for t in ([" caf", "\ufffd"], [" cafe", ""])]
    [False, False]
    """
    pieces: list[str | None] = []
    for token in tokens:
        if token.startswith("bytes:") or not token:
            pieces.append(None)
        else:
            pieces.extend(None if c == "\ufffd" else re.escape(c) for c in token)
    runs = [p for i, p in enumerate(pieces) if p is not None or i == 0 or pieces[i - 1] is not None]
    return "".join(r"[^\x00-\x7f]+" if p is None else p for p in runs)
