"""Judge backend for any OpenAI-compatible chat server (vLLM, llama.cpp, llama-cpp-python,
``transformers serve``, hosted APIs). Requests go out through
:class:`~udcg.judge.openai_http.JudgeHTTPClient`; every failure is a :class:`JudgeServerError`
naming the URL, never a NaN or a silent 0. ``yes_prob`` and ``abstain_prob(mode="first_token")``
read the first reply token's top log-probs (a side outside them is an upper bound, marked and
counted in ``stats``; abstention misses are scored by echo with ``template_tokenizer`` and
``exact_bounds="auto"``); ``answer_prob`` reads echoed prompt log-probs of ``/v1/completions``;
``generate_json`` asks for ``response_format`` JSON output while the server accepts it.
What each server offers, the exact-by-echo checks and the cache keys: docs/serving.md; the
fingerprint, retries and timeouts: docs/integrity.md.
"""

from __future__ import annotations

import functools
import json
import math
import threading
import warnings
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from udcg.errors import UDCGInputError, UDCGWarning
from udcg.judge.base import Judge, JudgeValues, OnResult, judge_values
from udcg.judge.cache import canonical_json
from udcg.judge.file_digest import folder_sha256
from udcg.judge.openai_http import JudgeHTTPClient, JudgeServerError, split_base_url
from udcg.judge.openai_replies import (
    MisroutedReplyError,
    NoEchoError,
    ReplyError,
    echoed_continuation,
    first_choice,
    first_token_logprobs,
    generated_tokens,
    message_text,
    refuses_response_format,
    token_prob,
    unlisted_logprob,
    within_budget,
    yes_ratio,
)
from udcg.judge.openai_requests import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    echo_body,
    first_token_body,
    generate_body,
    json_response_format,
)
from udcg.judge.prompts import ABSTAIN_MARKER, Messages, abstain_messages
from udcg.judge.requests import Request, column
from udcg.judge.structured import Completions, generate_json
from udcg.validation import positive_int, show

__all__ = ["JudgeServerError", "OpenAIJudge"]

R = TypeVar("R")
T = TypeVar("T")
#: failed echoes, none of them working, after which a server is taken as unable to echo
ECHO_TRIES = 3

_LOCK = threading.Lock()  # of the judges' lazy state (a lock attribute would not pickle)
PROBE_TIMEOUT = 5.0  # seconds :meth:`OpenAIJudge.probe` waits
#: Largest log-prob difference of the chat reply's top first token in the echo reply.
ECHO_AGREEMENT = 0.05
#: How a token outside the top log-probs is bounded, in the cache key of the values that may
#: use it: the smaller of the last listed probability and the mass the list leaves.
UNLISTED_BOUND = "min(last,rest)"
#: The warning of each kind of bound, given once per judge (counts are in ``stats``).
BOUND_WARNINGS = {
    "abstain_bound": (
        "abstain_prob: the abstention token was not among the server's top log-probs for some"
        " pairs; their values are upper bounds (the smaller of the last listed probability and"
        " the probability the list leaves), marked in the result's upper_bound mask and counted"
        " in the judge's stats['abstain_bound']"
    ),
    "yes_no_bound": (
        "yes_prob: only one of Yes/No was among the server's top log-probs for some prompts; the"
        " other was taken at its upper bound (the smaller of the last listed probability and the"
        " probability the list leaves), so the value is an upper bound (below 0.5) when Yes is"
        " missing and a lower bound (0.5 or more) when No is: the label holds either way; marked"
        " in the result's upper_bound mask and counted in the judge's stats['yes_no_bound']"
    ),
}


def _tokenizer_identity(source: str | None) -> str | None:
    """A template tokenizer in the fingerprint: a local folder by its resolved path and the
    SHA-256 of the files loaded from it (an edited chat template is a new judge), a Hub id as
    given."""
    if source is None or not Path(source).is_dir():
        return source
    folder = Path(source).resolve()
    return f"{folder}|files={folder_sha256(folder)[:16]}"


#: What :class:`OpenAIJudge` names in its fingerprint, fixed once it is made.
_FINGERPRINTED = frozenset(
    "model base_url top_logprobs abstain_token extra_body template_tokenizer reply_model".split()
)


class OpenAIJudge(Judge):
    """A judge served by an OpenAI-compatible HTTP server at ``base_url`` (``/v1`` added when
    it has no path). The fingerprint holds ``model``, ``server_id`` (default: the URL),
    ``top_logprobs``, ``abstain_token``, ``extra_body`` (merged into every request) and
    ``template_tokenizer`` (renders raw prompts for echo); the waits (``timeout``...) change no
    value and are not in it. ``structured_output`` and ``exact_bounds`` (``"auto"``/``"off"``)
    switch JSON output and exact values by echo (in :meth:`key_settings`). ``stats`` counts
    requests, retries, bounds and echo outcomes.
    """

    streams_results = True

    def __init__(
        self,
        model: str,
        base_url: str = "http://127.0.0.1:8000/v1",
        name: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        max_concurrency: int = 64,
        timeout: float = 60.0,
        max_retries: int = 5,
        *,
        abstain_token: str | None = None,
        top_logprobs: int = 20,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        server_id: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        template_tokenizer: str | None = None,
        structured_output: str = "auto",
        connect_timeout: float = 10.0,
        deadline: float = 300.0,
        exact_bounds: str = "auto",
        reply_model: str | None = None,
    ) -> None:
        if not model:
            raise UDCGInputError("must be the name of the model on the server", field="model")
        if not 1 <= top_logprobs <= 20:
            raise UDCGInputError(f"must be within 1..20, got {top_logprobs}", field="top_logprobs")
        if abstain_token is not None and not abstain_token:
            raise UDCGInputError("must be a non-empty token text, or None", field="abstain_token")
        for field, value in (
            ("exact_bounds", exact_bounds),
            ("structured_output", structured_output),
        ):
            if value not in ("auto", "off"):
                raise UDCGInputError(f"must be 'auto' or 'off', got {value!r}", field=field)
        if extra_body is not None and not isinstance(extra_body, Mapping):
            raise UDCGInputError(
                f'must be a JSON object such as {{"top_k": 1}}, got {show(extra_body)}',
                field="extra_body",
            )
        self.http = JudgeHTTPClient(
            model,
            api_key_env=api_key_env,
            max_concurrency=max_concurrency,
            timeout=timeout,
            max_retries=max_retries,
            backoff=backoff,
            max_backoff=max_backoff,
            connect_timeout=connect_timeout,
            deadline=deadline,
        )
        self.model = model
        self.base_url, self._root = split_base_url(base_url)
        self.name = name or model
        self.abstain_token = abstain_token
        self.top_logprobs = int(top_logprobs)
        self._extra_body = canonical_json(dict(extra_body or {}))  # a fixed copy
        self.template_tokenizer = template_tokenizer
        self.reply_model = reply_model or model  # the model the replies must be of
        self.structured_output = structured_output
        self.exact_bounds = exact_bounds
        settings = {
            "model": model,
            "server": server_id or self.base_url,
            "top_logprobs": self.top_logprobs,
            "abstain_token": abstain_token,
            "extra_body": dict(extra_body or {}) or None,
            "template_tokenizer": _tokenizer_identity(template_tokenizer),
            "reply_model": reply_model if reply_model != model else None,
        }
        settings = {k: v for k, v in settings.items() if v is not None}
        self.fingerprint = "openai:" + canonical_json(settings)
        #: the fingerprint without ``reply_model``, which changes no request, only the check
        #: of the replies (batch calls exported before it was set are imported with it)
        self.unchecked_fingerprint = "openai:" + canonical_json(
            {k: v for k, v in settings.items() if k != "reply_model"}
        )
        self._template: Any = None
        self._server_token: str | None = None
        self._server_token_asked = False
        self._structured = structured_output == "auto"  # False once the server refused it
        self._echo = self.scores_continuations  # False once the server could not echo
        self._echo_failures, self._echo_worked = 0, False
        self._warned: set[str] = set()  # kinds of warning given

    @property
    def extra_body(self) -> dict[str, Any]:
        """The fields merged into every request (a new copy each time: the fingerprint names
        them, so they are fixed)."""
        return json.loads(self._extra_body)

    @property
    def stats(self) -> Counter[str]:
        """Counts of HTTP attempts, retries and bounds used, over the judge's life."""
        return self.http.stats

    def __repr__(self) -> str:
        return f"OpenAIJudge(model={self.model!r}, base_url={self.base_url!r}, name={self.name!r})"

    def __setattr__(self, attribute: str, value: Any) -> None:
        """The settings in the fingerprint are fixed once it is made (a request with another
        one would store its value under the old key)."""
        if attribute in _FINGERPRINTED and "fingerprint" in vars(self):
            raise UDCGInputError(
                f"is fixed when the judge is built (its fingerprint, the cache key, names it):"
                f" load the judge again with {attribute}={value!r}",
                field=attribute,
            )
        super().__setattr__(attribute, value)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_template": None}

    def _warn_once(self, kind: str, message: str, category: type[Warning], stacklevel: int) -> None:
        """``message`` as a warning, the first time of its ``kind`` for this judge."""
        with _LOCK:
            first = kind not in self._warned
            self._warned.add(kind)
        if first:
            warnings.warn(message, category, stacklevel=stacklevel + 1)

    def probe(self, timeout: float = PROBE_TIMEOUT) -> None:
        """One GET of ``/v1/models`` within ``timeout`` seconds, never retried; no answer, or
        HTTP 401/403, is a one-line error naming the URL."""
        url = self.base_url + "/models"
        try:
            status = self.http.get(url, min(timeout, self.http.timeout)).status_code
        except JudgeServerError as exc:
            raise UDCGInputError(
                f"the server at {self.base_url} does not answer ({exc})", field="judge"
            ) from None
        if status in (401, 403):
            raise UDCGInputError(
                f"the server at {self.base_url} refuses the API key (HTTP {status}): check the "
                f"environment variable {self.http.api_key_env}",
                field="judge",
            )

    def _read(self, where: str, parse: Callable[..., R], *args: Any) -> R:
        """``parse(*args)``, its :class:`ReplyError` re-raised with ``where`` in front."""
        try:
            return parse(*args)
        except ReplyError as exc:
            raise self.http.error(f"{where}: {exc}", kind=type(exc)) from None

    async def _first_token_logprobs(self, messages: Messages) -> dict[str, float]:
        url = self.base_url + CHAT_PATH
        body = first_token_body(self.model, messages, self.extra_body, self.top_logprobs)
        choice = self._read(url, first_choice, await self.http.apost(url, body), self.reply_model)
        return self._read(url, first_token_logprobs, choice)

    def _bounded(
        self,
        one: Callable[[int, T], Awaitable[tuple[float, bool]]],
        items: Sequence[T],
        kind: str,
        on_result: OnResult | None,
    ) -> JudgeValues:
        """:class:`JudgeValues` of ``one``'s ``(value, is_bound)``, streamed; bounds counted in
        ``stats[kind]`` and warned of once per judge."""

        async def counted(i: int, item: T) -> tuple[float, bool]:
            value, bound = await one(i, item)
            if bound:
                self.http.count(kind)
            return value, bound

        deliver = None if on_result is None else lambda i, r: on_result(i, r[0], r[1])
        results = self.http.map(counted, items, deliver, owner=_itself)
        values = judge_values([v for v, _ in results], [b for _, b in results])
        if values.upper_bound.any():
            self._warn_once(kind, BOUND_WARNINGS[kind], UDCGWarning, stacklevel=2)
        return values

    def compute(self, op: str, requests: list[Request], on_result: OnResult | None) -> Any:
        """The values of one call of ``op`` (see :meth:`Judge.compute`), streamed."""
        params = requests[0].params
        if op == "generate":
            return self._generate(
                column(requests, "messages"), params["max_new_tokens"], None, on_result
            )
        if op == "generate_json":  # JSON output asked for while the server accepts it
            schema = params.get("schema")
            fmt = json_response_format(schema) if self.structured_output == "auto" else None
            ask = Completions(lambda batch, tokens: self._generate(batch, tokens, fmt))
            args = params["validate"], params["max_new_tokens"], params["retries"]
            return generate_json(ask, column(requests, "messages"), *args)
        if op == "yes_prob":
            return self._bounded(self._yes, column(requests, "messages"), "yes_no_bound", on_result)
        pairs = list(zip(column(requests, "question"), column(requests, "passage"), strict=True))
        if op == "abstain_prob":
            one = functools.partial(self._abstain, self._abstain_marker(params["mode"]))
            return self._bounded(one, pairs, "abstain_bound", on_result)
        return self._answer(pairs, column(requests, "answers"), on_result)

    def _generate(
        self,
        prompts: Sequence[Messages],
        max_new_tokens: int,
        response_format: Mapping[str, Any] | None,
        on_result: OnResult | None = None,
    ) -> list[str]:
        """Greedy completions, with ``response_format`` until the server refuses it."""
        max_new_tokens = positive_int(max_new_tokens, "max_new_tokens")
        url = self.base_url + CHAT_PATH

        async def one(i: int, messages: Messages) -> str:
            body = generate_body(self.model, messages, self.extra_body, max_new_tokens)
            reply = None
            if response_format is not None and self._structured:
                try:
                    reply = await self.http.apost(url, {**body, "response_format": response_format})
                except JudgeServerError as exc:
                    if not refuses_response_format(exc):
                        raise
                    self._structured = False
                    self.http.count("structured_output_refused")
            if reply is None:
                reply = await self.http.apost(url, body)
            choice = self._read(url, first_choice, reply, self.reply_model)
            self._read(f"{url}: item {i}", within_budget, reply, max_new_tokens)
            return self._read(f"{url}: item {i}", message_text, choice)

        deliver = None if on_result is None else lambda i, text: on_result(i, text, False)
        return self.http.map(one, list(prompts), deliver, owner=_itself)

    async def _yes(self, i: int, messages: Messages) -> tuple[float, bool]:
        top = await self._first_token_logprobs(messages)
        where = f"{self.base_url}{CHAT_PATH}: item {i}"
        return self._read(where, yes_ratio, top, self.top_logprobs)

    def _abstain_marker(self, mode: str) -> str:
        """:meth:`abstain_token_text`, once ``mode`` is checked."""
        if mode == "sequence":
            raise NotImplementedError(
                "OpenAIJudge cannot compute abstain_prob(mode='sequence'): it needs the"
                " teacher-forced probability of every NO-RESPONSE token, which chat completion"
                " APIs do not return; use mode='first_token' or the local transformers backend"
            )
        if mode != "first_token":
            raise UDCGInputError(f"must be 'first_token' or 'sequence', got {mode!r}", field="mode")
        return self.abstain_token_text()

    async def _abstain(self, marker: str, i: int, pair: tuple[str, str]) -> tuple[float, bool]:
        messages = abstain_messages(*pair)
        top = await self._first_token_logprobs(messages)
        value, bound = token_prob(top, marker)
        if bound and self._echo:
            exact = await self._token_after(messages, marker, top, i)
            if exact is not None:
                return exact, False
        return value, bound

    def _answer(
        self, pairs: list[tuple[str, str]], answers: list[list[str]], on_result: OnResult | None
    ) -> np.ndarray:
        """Max over answers of exp(mean log-prob of the answer's echoed tokens, read by
        :func:`echoed_continuation`); pair i is streamed once all its answers are read."""
        prompts = [self._render(abstain_messages(q, p)) for q, p in pairs]
        flat = [(i, a) for i, options in enumerate(answers) for a in dict.fromkeys(options)]
        best = np.zeros(len(pairs), dtype=np.float64)
        left = Counter(i for i, _ in flat)
        url = self.base_url + COMPLETIONS_PATH

        async def one(k: int, item: tuple[int, str]) -> float:
            prompt, answer = prompts[item[0]], item[1]
            reply = await self.http.apost(
                url, echo_body(self.model, prompt + answer, self.extra_body)
            )
            choice = self._read(url, first_choice, reply, self.reply_model)
            args = (prompt, answer, generated_tokens(reply), self._specials())
            picked = self._read(f"{url}: item {k}", echoed_continuation, choice, *args)
            return sum(logprob for _, logprob, _ in picked) / len(picked)

        def done(k: int, mean_logprob: float) -> None:
            i = flat[k][0]
            best[i] = max(best[i], math.exp(mean_logprob))
            left[i] -= 1
            if left[i] == 0 and on_result is not None:
                on_result(i, float(best[i]), False)

        self.http.map(one, flat, done, owner=lambda k: flat[k][0])
        return best

    def _render(self, messages: Messages) -> str:
        """``messages`` rendered by the chat template of ``template_tokenizer``."""
        if self.template_tokenizer is None:
            raise NotImplementedError(
                "OpenAIJudge.answer_prob needs the model's chat template to build a raw prompt "
                "for /v1/completions (the server's own template cannot be asked for): pass "
                "template_tokenizer='<transformers id or path of the served model>'"
            )
        with _LOCK:
            if self._template is None:
                from transformers import AutoTokenizer

                try:  # transformers, tokenizers and jinja raise what they raise
                    tokenizer = AutoTokenizer.from_pretrained(self.template_tokenizer)
                    if not getattr(tokenizer, "chat_template", None):
                        raise ValueError("it has no chat template: give the served model's own")
                    tokenizer.apply_chat_template(
                        abstain_messages("Q?", "P."), tokenize=False, add_generation_prompt=True
                    )
                except Exception as exc:  # each named in the one line
                    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    raise UDCGInputError(
                        f"cannot use the tokenizer {self.template_tokenizer!r}: {reason}",
                        field="template_tokenizer",
                    ) from None
                self._template = tokenizer
        return self._template.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )

    @property
    def scores_continuations(self) -> bool:
        """Whether ``abstain_prob`` scores a token outside the top log-probs by echo."""
        return self.exact_bounds == "auto" and self.template_tokenizer is not None

    def _specials(self) -> list[str]:
        """The added tokens of ``template_tokenizer`` (special tokens, chat markers), which a
        server may echo as text or drop."""
        return [added.content for added in self._template.added_tokens_decoder.values()]

    async def _token_after(
        self, messages: Messages, token: str, top: Mapping[str, float], item: int
    ) -> float | None:
        """P(``token`` first in the reply to ``messages``) from the echo of the rendered prompt
        plus ``token``; None (keep the bound) when it is not one token, disagrees with the chat
        reply's ``top``, or this echo fails (HTTP 400/422, e.g. a prompt over the context, or
        tokens that do not align). A server that cannot echo (HTTP 404/405/501, no prompt
        log-probs, or :data:`ECHO_TRIES` failures before any echo worked) is not asked again; a
        reply to another request (another model's, other choices, another prompt) is an
        error."""
        prompt = self._render(messages)
        url = self.base_url + COMPLETIONS_PATH
        try:
            reply = await self.http.apost(
                url, echo_body(self.model, prompt + token, self.extra_body)
            )
            picked = echoed_continuation(
                first_choice(reply, self.reply_model),
                prompt,
                token,
                generated_tokens(reply),
                self._specials(),
            )
        except MisroutedReplyError as exc:
            raise JudgeServerError(f"{url}: item {item}: {exc}") from None
        except JudgeServerError as exc:
            if not isinstance(exc, ReplyError) and exc.status not in (400, 404, 405, 422, 501):
                raise
            self._echo_failures += 1
            if (
                isinstance(exc, NoEchoError)
                or exc.status in (404, 405, 501)
                or (self._echo_failures >= ECHO_TRIES and not self._echo_worked)
            ):
                self._echo = False
                self.http.count("exact_unavailable")
            else:
                self.http.count("exact_failed")
            return None
        self._echo_worked = True
        best = max(top, key=top.__getitem__)
        echoed = picked[0][2].get(best) if len(picked) == 1 else None
        if (
            echoed is None
            or picked[0][0] != token
            or abs(echoed - top[best]) > ECHO_AGREEMENT
            or picked[0][1] > unlisted_logprob(top) + 1e-6  # above its own bound
        ):
            self.http.count("exact_mismatch")
            return None
        self.http.count("abstain_exact")
        return math.exp(picked[0][1])

    def key_settings(self, operation: str) -> dict[str, Any]:
        """For ``abstain_prob`` and ``yes_prob``: how a token outside the top log-probs is
        bounded (``unlisted``, :func:`unlisted_logprob`); for ``abstain_prob`` also the
        abstention token used when not given, and ``exact_bounds: "echo"`` when misses are
        scored by echo; for ``generate_json`` with ``structured_output="off"``, that setting (the
        replies differ from those asked with ``response_format``); else nothing."""
        settings: dict[str, Any] = {}
        if operation == "generate_json" and self.structured_output == "off":
            settings["structured_output"] = "off"
        if operation in ("abstain_prob", "yes_prob"):
            settings["unlisted"] = UNLISTED_BOUND
        if operation == "abstain_prob" and self.abstain_token is None:
            settings["abstain_token"] = self.abstain_token_text()
        if operation == "abstain_prob" and self.scores_continuations:
            settings["exact_bounds"] = "echo"
        return settings

    def server_abstain_token(self) -> str | None:
        """The first token of NO-RESPONSE per the server's tokenizer, asked once per judge
        after a :meth:`probe`; None when no tokenizer endpoint says."""
        if not self._server_token_asked:
            self.probe()
            self._server_token = _first_token_text(self.http, self._root, self.model)
            self._server_token_asked = True
        return self._server_token

    def abstain_token_text(self) -> str:
        """``abstain_token``, else :meth:`server_abstain_token`, else ``"NO"`` (warned once)."""
        if self.abstain_token is not None:
            return self.abstain_token
        resolved = self.server_abstain_token()
        if resolved is not None:
            return resolved
        self._warn_once(
            "assumed",
            f"{self._root}: no tokenizer endpoint answered (/tokenize, /extras/tokenize);"
            f" assuming the first token of {ABSTAIN_MARKER} is 'NO' (pass abstain_token to"
            " set it); values computed with it are cached under that token",
            UDCGWarning,
            stacklevel=3,
        )
        return "NO"


def _token_ids(reply: Any) -> list[int] | None:
    """The ids of a tokenize reply (``{"tokens": [id or {"id": id}, ...]}``), or None."""
    tokens = reply.get("tokens") if isinstance(reply, dict) else None
    if not isinstance(tokens, list):
        return None
    ids = [token.get("id") if isinstance(token, dict) else token for token in tokens]
    return ids if all(isinstance(i, int) and not isinstance(i, bool) for i in ids) else None


def _first_token_text(http: JudgeHTTPClient, root: str, model: str) -> str | None:
    """The first token of NO-RESPONSE per the tokenizer at the server ``root`` (``/tokenize``,
    ``/detokenize``: vLLM, llama-server; ``/extras/...``: llama-cpp-python), or None; requests
    are retried as any, an endpoint that still fails is skipped."""

    def ask(path: str, body: Mapping[str, Any]) -> Any:
        try:
            return http.post(root + path, body)
        except JudgeServerError:
            return None

    flags = {"add_special_tokens": False, "add_special": False}
    styles: list[tuple[str, Callable[[str], dict[str, Any]]]] = [
        # vLLM (prompt, add_special_tokens) and llama.cpp's llama-server (content, add_special)
        ("", lambda s: {"model": model, "prompt": s, "content": s, **flags}),
        # llama-cpp-python (always adds BOS: stripped below as the prefix of "")
        ("/extras", lambda s: {"model": model, "input": s}),
    ]
    for where, body in styles:
        ids = _token_ids(ask(where + "/tokenize", body(ABSTAIN_MARKER)))
        prefix = _token_ids(ask(where + "/tokenize", body(""))) if ids else None
        if not ids or prefix is None:
            continue
        if ids[: len(prefix)] == prefix:
            ids = ids[len(prefix) :]
        reply = ask(where + "/detokenize", {"model": model, "tokens": ids[:1]}) if ids else None
        for field in ("prompt", "content", "text"):
            if isinstance(reply, dict) and isinstance(reply.get(field), str) and reply[field]:
                return reply[field]
    return None


def _itself(i: int) -> int:
    """The request of item i when each item is one request."""
    return i
