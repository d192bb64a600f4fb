"""Judge backend for any OpenAI-compatible chat server (vLLM, llama.cpp's llama-server,
llama-cpp-python, ``transformers serve``, hosted APIs), for scaling the judge out.

Requests go out through :class:`~udcg.judge.openai_http.JudgeHTTPClient` (the ``openai``
SDK's ``AsyncOpenAI``), up to ``max_concurrency`` in flight (default 64), with the retries,
waits, ``timeout`` (60 s), ``connect_timeout`` (10 s) and ``deadline`` (300 s) its module
docstring describes; replies are read by :mod:`udcg.judge.openai_replies`, the server's
tokenizer asked by :mod:`udcg.judge.openai_tokenizer`. Replies missing a field are not
retried; the first failure cancels the rest of the call. Every failure raises
:class:`JudgeServerError`, naming the URL and the reason; no value is ever NaN or silently 0.
The API key, from the environment variable ``api_key_env`` (default ``OPENAI_API_KEY``; unset
for servers that need none), is never stored on the judge or put in its ``fingerprint``.

:meth:`OpenAIJudge.probe` (called by :func:`udcg.judge.open_judge` before any work) asks
``/v1/models`` once, within 5 s and without retries, so that a server that does not answer is
one line naming its URL instead of a traceback after every retry.

The judge streams (``streams_results``): ``abstain_prob``, ``answer_prob``, ``yes_prob`` and
``generate`` take ``on_result(i, value, upper_bound)``, called in the calling thread as soon as
item i is done (see :class:`~udcg.judge.base.Judge`).

Operations:

* ``generate``: ``/v1/chat/completions`` at temperature 0, the reply's message content.
* ``yes_prob``: one token at temperature 0 with ``logprobs`` and ``top_logprobs`` (20 by
  default, the OpenAI maximum). P(Yes) / (P(Yes) + P(No)) is computed from the first token's top
  log-probs, with Yes = the tokens ``"Yes"`` and ``" Yes"`` and No = ``"No"`` and ``" No"``
  (their probabilities summed), as in the local backend. When only one of the two is among the
  top-k, the other's probability is taken at its upper bound, the smallest top-k probability;
  such a value is marked in the returned :class:`~udcg.judge.base.JudgeValues`' ``upper_bound``
  mask and counted in ``stats["yes_no_bound"]`` (one warning per judge). When neither is among
  the top-k, the ratio is undefined and :class:`JudgeServerError` is raised.
* ``abstain_prob(mode="first_token")``: the reference abstention prompt, one token with top
  log-probs; the probability of the top token whose text equals the first token of
  ``NO-RESPONSE`` exactly. That token's text is ``abstain_token`` when given, else it is asked of
  the server's tokenizer once per judge (after a probe; ``/tokenize`` + ``/detokenize`` of vLLM
  and llama.cpp's server, ``/extras/tokenize`` of llama-cpp-python, each retried as any
  request), else ``"NO"`` with a one-line warning saying it is assumed. The text used is part
  of the cache key of every ``abstain_prob`` item (:meth:`OpenAIJudge.key_settings`; with
  ``abstain_token`` it is in the fingerprint), so values computed with an assumed token are
  never read back by a judge whose tokenizer answers otherwise. When it is not among
  the top-k, P(abstain) is below the smallest top-k probability. With ``exact_bounds="auto"``
  (the default) and ``template_tokenizer``, the exact probability is then read from
  ``/v1/completions`` with ``echo``: the rendered prompt followed by the token, whose echoed
  log-prob is the token's (counted in ``stats["abstain_exact"]``). It is used only when the
  echo scores the token as one token and agrees with the chat reply (the chat reply's most
  likely first token is among the echo's top log-probs at that position, within 0.05 in
  log-prob, and the token's probability is below its bound), else the bound stays
  (``stats["exact_mismatch"]``); a server without echoed log-probs is not asked again
  (``stats["exact_unavailable"]``). Otherwise that bound (at most 1/top_logprobs) is
  returned, marked in ``upper_bound`` and counted in ``stats["abstain_bound"]`` (one warning
  per judge). Whether misses are scored by echo is part of the cache key of every
  ``abstain_prob`` item (``{"exact_bounds": "echo"}`` in :meth:`OpenAIJudge.key_settings`), so
  a judge that keeps bounds never reads values a judge that scores them wrote, and back.
* ``abstain_prob(mode="sequence")`` raises NotImplementedError: it needs the teacher-forced
  probabilities of every marker token after the chat template's assistant prefix, which chat
  completion APIs do not return. Use the local transformers backend for it.

* ``answer_prob``: teacher-forced answer log-probs from the completions endpoint
  (``/v1/completions`` with ``echo`` and ``logprobs``, which vLLM serves): the prompt is the
  abstention conversation rendered by the chat template of ``template_tokenizer`` (a
  transformers tokenizer id or path; the server's own template cannot be asked for) followed
  by the answer, and the answer's tokens are the echoed tokens that end where the echoed
  prompt ends (before the generated tokens the reply's ``usage`` counts; without a count,
  those whose text offsets fall inside the answer in the prompt as sent), so servers whose echo
  leaves out the text of special tokens (llama-cpp-python) are read right.
  Normalisation as in :meth:`~udcg.judge.base.Judge.answer_prob`. Without
  ``template_tokenizer``, or from a server that does not return prompt log-probs with ``echo``
  (chat-only servers, llama.cpp's llama-server, llama-cpp-python with ``logits_all`` off), it
  fails with a message naming the limitation.

* ``generate_json``: with ``structured_output="auto"`` (the default) the completions ask for
  JSON output, ``response_format`` ``{"type": "json_schema", ...}`` when the caller passes a
  ``schema``, else ``{"type": "json_object"}``; the replies are parsed and validated as for any
  backend (:mod:`udcg.judge.structured`). A server that refuses the field (HTTP 400/422 naming
  it) is asked without it for the rest of the judge's life (``stats
  ["structured_output_refused"]`` counts the refusals). ``structured_output="off"`` never sends
  it. The option is not part of the fingerprint: it changes no request but those of
  ``generate_json``, whose results pass the same parsing and validator either way.

Servers that ignore ``logprobs`` (``transformers serve`` as of transformers 5) can serve
``generate`` and ``generate_json`` only; log-prob operations then fail with a message saying so.
"""

from __future__ import annotations

import math
import threading
import warnings
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from udcg.errors import UDCGInputError, UDCGWarning
from udcg.judge.base import JSONResult, Judge, JudgeValues, OnResult, judge_values
from udcg.judge.cache import canonical_json
from udcg.judge.openai_http import JudgeHTTPClient, JudgeServerError, split_base_url
from udcg.judge.openai_replies import (
    ReplyError,
    echoed_answer_logprob,
    echoed_continuation,
    first_choice,
    first_token_logprobs,
    generated_tokens,
    message_text,
    refuses_response_format,
    token_prob,
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
from udcg.judge.openai_tokenizer import first_token_text
from udcg.judge.prompts import ABSTAIN_MARKER, Messages, abstain_messages
from udcg.judge.requests import Request, column
from udcg.judge.structured import Completions, generate_json
from udcg.validation import positive_int, show

__all__ = ["JudgeServerError", "OpenAIJudge"]

R = TypeVar("R")
T = TypeVar("T")

#: Seconds :meth:`OpenAIJudge.probe` waits for the server.
PROBE_TIMEOUT = 5.0
#: ``structured_output`` values: ask for JSON output in ``generate_json`` when the server
#: accepts it, or never.
STRUCTURED_OUTPUT = ("auto", "off")
#: ``exact_bounds`` values: score the abstention token by echo when it misses the top
#: log-probs (with ``template_tokenizer``), or never.
EXACT_BOUNDS = ("auto", "off")
#: Largest difference, in log-prob, between the chat reply's most likely first token and the
#: echo reply's at the same position for the two to count as the same prompt.
ECHO_AGREEMENT = 0.05

#: The warning of each kind of bound, given once per judge (counts are in ``stats``).
BOUND_WARNINGS = {
    "abstain_bound": (
        "abstain_prob: the abstention token was not among the server's top log-probs for some"
        " pairs; their values are upper bounds (the smallest top-k probability), marked in the"
        " result's upper_bound mask and counted in the judge's stats['abstain_bound']"
    ),
    "yes_no_bound": (
        "yes_prob: only one of Yes/No was among the server's top log-probs for some prompts; the"
        " other was taken at its upper bound (the smallest top-k probability), marked in the"
        " result's upper_bound mask and counted in the judge's stats['yes_no_bound']"
    ),
}


def _agrees(alternatives: Mapping[str, float], token: str, logprob: float) -> bool:
    """Whether the echo reply's top ``alternatives`` at a position hold the chat reply's most
    likely ``token`` there, within :data:`ECHO_AGREEMENT` of its ``logprob``."""
    other = alternatives.get(token)
    return other is not None and abs(other - logprob) <= ECHO_AGREEMENT


class OpenAIJudge(Judge):
    """A judge served by an OpenAI-compatible HTTP server; see the module docstring.

    ``model`` is the model name the server expects; ``base_url`` its API root (``/v1`` is added
    when the URL has no path). ``name`` (default: ``model``) keys the values it produces.
    ``server_id`` replaces the URL in the fingerprint, to keep cache entries valid when the same
    deployment moves to another address. ``extra_body`` is merged into every request (e.g.
    ``{"chat_template_kwargs": {"enable_thinking": False}}`` for vLLM) and is part of the
    fingerprint. ``template_tokenizer`` (a transformers tokenizer id or local path, part of the
    fingerprint) renders prompts for ``answer_prob``. ``timeout``, ``connect_timeout``,
    ``max_retries``, ``backoff``, ``max_backoff`` and ``deadline`` bound the waits (see the
    module docstring); they change no value and are not in the fingerprint.
    ``structured_output`` (``"auto"`` or ``"off"``) says whether ``generate_json`` asks for
    JSON output. ``exact_bounds`` (``"auto"`` or ``"off"``) says whether ``abstain_prob``
    scores an abstention token outside the top log-probs by echo (with
    ``template_tokenizer``; see the module docstring). ``stats`` counts HTTP attempts
    (``requests``), ``retries``, the bounds used (``yes_no_bound``, ``abstain_bound``) and the
    exact values scored by echo (``abstain_exact``). Option mistakes raise
    :class:`~udcg.errors.UDCGInputError` naming the option.
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
    ) -> None:
        if not model:
            raise UDCGInputError("must be the name of the model on the server", field="model")
        if not 1 <= top_logprobs <= 20:
            raise UDCGInputError(f"must be within 1..20, got {top_logprobs}", field="top_logprobs")
        if abstain_token is not None and not abstain_token:
            raise UDCGInputError("must be a non-empty token text, or None", field="abstain_token")
        if exact_bounds not in EXACT_BOUNDS:
            raise UDCGInputError(
                f"must be 'auto' or 'off', got {exact_bounds!r}", field="exact_bounds"
            )
        if structured_output not in STRUCTURED_OUTPUT:
            raise UDCGInputError(
                f"must be 'auto' or 'off', got {structured_output!r}", field="structured_output"
            )
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
        self.base_url, self._api, self._root = split_base_url(base_url)
        self.name = name or model
        self.abstain_token = abstain_token
        self.top_logprobs = int(top_logprobs)
        self.extra_body = dict(extra_body or {})
        self.template_tokenizer = template_tokenizer
        self.structured_output = structured_output
        self.exact_bounds = exact_bounds
        settings: dict[str, Any] = {
            "model": model,
            "server": server_id or self.base_url,
            "top_logprobs": self.top_logprobs,
        }
        if abstain_token is not None:
            settings["abstain_token"] = abstain_token
        if self.extra_body:
            settings["extra_body"] = self.extra_body
        if template_tokenizer is not None:
            settings["template_tokenizer"] = template_tokenizer
        self.fingerprint = "openai:" + canonical_json(settings)
        self._lock = threading.Lock()
        self._template: Any = None
        self._resolved_abstain_token: str | None = None
        self._server_token_asked = False
        # False once the server refused ``response_format``; kinds of bound already warned of.
        self._structured = structured_output == "auto"
        # False once the server could not score a continuation (no echoed prompt log-probs).
        self._echo = self.scores_continuations
        self._warned: set[str] = set()

    @property
    def stats(self) -> Counter[str]:
        """Counts of HTTP attempts, retries and bounds used, over the judge's life."""
        return self.http.stats

    def __repr__(self) -> str:
        return f"OpenAIJudge(model={self.model!r}, base_url={self.base_url!r}, name={self.name!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for transient in ("_lock", "_template"):
            state.pop(transient)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._template = None

    def close(self) -> None:
        """Nothing to release: every call closes its own connections."""

    def __enter__(self) -> OpenAIJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def probe(self, timeout: float = PROBE_TIMEOUT) -> None:
        """One GET of ``/v1/models`` within ``timeout`` seconds (at most the judge's own),
        never retried: any reply but HTTP 401/403 counts as an answer. A server that does
        not answer, or refuses the API key, is a one-line error naming its URL."""
        url = self._api + "/models"
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
            raise self.http.error(f"{where}: {exc}") from None

    # -- requests -------------------------------------------------------------------------------

    async def _first_token_logprobs(self, messages: Messages) -> dict[str, float]:
        """Token text -> log-prob of the top alternatives for the first generated token."""
        url = self._api + CHAT_PATH
        body = first_token_body(self.model, messages, self.extra_body, self.top_logprobs)
        choice = self._read(url, first_choice, await self.http.apost(url, body))
        return self._read(url, first_token_logprobs, choice)

    def _bounded(
        self,
        one: Callable[[int, T], Awaitable[tuple[float, bool]]],
        items: Sequence[T],
        kind: str,
        on_result: OnResult | None,
    ) -> JudgeValues:
        """:class:`JudgeValues` of ``(value, is_bound)`` results, each streamed to
        ``on_result``; bounds are counted in ``stats[kind]`` and warned about once per judge
        and kind."""

        async def counted(i: int, item: T) -> tuple[float, bool]:
            value, bound = await one(i, item)
            if bound:
                self.http.count(kind)
            return value, bound

        deliver = None if on_result is None else lambda i, r: on_result(i, r[0], r[1])
        results = self.http.map(counted, items, deliver)
        values = judge_values([v for v, _ in results], [b for _, b in results])
        if values.upper_bound.any() and kind not in self._warned:
            self._warned.add(kind)
            warnings.warn(BOUND_WARNINGS[kind], stacklevel=3)
        return values

    # -- operations ---------------------------------------------------------------------------

    def compute(self, op: str, requests: list[Request], on_result: OnResult | None) -> Any:
        """The values of one call of ``op`` (see :meth:`Judge.compute`), streamed."""
        params = requests[0].params
        if op == "generate":
            return self._generate(
                column(requests, "messages"), params["max_new_tokens"], None, on_result
            )
        if op == "generate_json":
            return self._generate_json(column(requests, "messages"), **params)
        if op == "yes_prob":
            return self._yes(column(requests, "messages"), on_result)
        questions, passages = column(requests, "question"), column(requests, "passage")
        if op == "abstain_prob":
            return self._abstain(questions, passages, params["mode"], on_result)
        return self._answer(questions, passages, column(requests, "answers"), on_result)

    def _generate(
        self,
        prompts: Sequence[Messages],
        max_new_tokens: int,
        response_format: Mapping[str, Any] | None,
        on_result: OnResult | None = None,
    ) -> list[str]:
        """Greedy completions; with ``response_format`` (while the server accepts the field:
        a refusal naming it drops it for the rest of the judge's life)."""
        max_new_tokens = positive_int(max_new_tokens, "max_new_tokens")
        url = self._api + CHAT_PATH

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
            choice = self._read(url, first_choice, reply)
            return self._read(f"{url}: item {i}", message_text, choice)

        deliver = None if on_result is None else lambda i, text: on_result(i, text, False)
        return self.http.map(one, list(prompts), deliver)

    def _generate_json(
        self,
        prompts: Sequence[Messages],
        validate: Callable[[Any], Any] | None,
        max_new_tokens: int,
        retries: int,
        schema: Mapping[str, Any] | None = None,
    ) -> list[JSONResult]:
        """:meth:`Judge.generate_json`, asking the server for JSON output (see the module
        docstring); replies are parsed and validated the same way either way."""
        response_format = None
        if self.structured_output == "auto":
            response_format = json_response_format(schema)

        def ask(batch: Sequence[Messages], tokens: int = 64) -> list[str]:
            return self._generate(batch, tokens, response_format)

        return generate_json(Completions(ask), prompts, validate, max_new_tokens, retries)

    def _yes(self, prompts: Sequence[Messages], on_result: OnResult | None) -> JudgeValues:
        url = self._api + CHAT_PATH

        async def one(i: int, messages: Messages) -> tuple[float, bool]:
            top = await self._first_token_logprobs(messages)
            return self._read(f"{url}: item {i}", yes_ratio, top, self.top_logprobs)

        return self._bounded(one, list(prompts), "yes_no_bound", on_result)

    def _abstain(
        self, questions: list[str], passages: list[str], mode: str, on_result: OnResult | None
    ) -> JudgeValues:
        if mode == "sequence":
            raise NotImplementedError(
                "OpenAIJudge cannot compute abstain_prob(mode='sequence'): it needs the"
                " teacher-forced probability of every NO-RESPONSE token, which chat completion"
                " APIs do not return; use mode='first_token' or the local transformers backend"
            )
        if mode != "first_token":
            raise UDCGInputError(f"must be 'first_token' or 'sequence', got {mode!r}", field="mode")
        marker = self.abstain_token_text()

        async def one(i: int, pair: tuple[str, str]) -> tuple[float, bool]:
            messages = abstain_messages(*pair)
            top = await self._first_token_logprobs(messages)
            value, bound = token_prob(top, marker)
            if bound and self._echo:
                exact = await self._token_after(messages, marker, top, i)
                if exact is not None:
                    return exact, False
            return value, bound

        pairs = list(zip(questions, passages, strict=True))
        return self._bounded(one, pairs, "abstain_bound", on_result)

    def _answer(
        self,
        questions: list[str],
        passages: list[str],
        answers: list[list[str]],
        on_result: OnResult | None,
    ) -> np.ndarray:
        """Max over acceptable answers of exp(mean log-prob of the answer's tokens), read from
        ``/v1/completions`` with ``echo`` (see the module docstring); pair i reaches
        ``on_result`` once all its answers are read."""
        prompts = [
            self._render(abstain_messages(q, p)) for q, p in zip(questions, passages, strict=True)
        ]
        flat = [(i, a) for i, options in enumerate(answers) for a in dict.fromkeys(options)]
        best = np.zeros(len(questions), dtype=np.float64)
        left = Counter(i for i, _ in flat)

        async def one(k: int, item: tuple[int, str]) -> float:
            i, answer = item
            return await self._answer_mean_logprob(prompts[i], answer, k)

        def done(k: int, mean_logprob: float) -> None:
            i = flat[k][0]
            best[i] = max(best[i], math.exp(mean_logprob))
            left[i] -= 1
            if left[i] == 0 and on_result is not None:
                on_result(i, float(best[i]), False)

        self.http.map(one, flat, done)
        return best

    def _render(self, messages: Messages) -> str:
        """``messages`` rendered by the chat template of ``template_tokenizer``."""
        if self.template_tokenizer is None:
            raise NotImplementedError(
                "OpenAIJudge.answer_prob needs the model's chat template to build a raw prompt "
                "for /v1/completions (the server's own template cannot be asked for): pass "
                "template_tokenizer='<transformers id or path of the served model>'"
            )
        with self._lock:
            if self._template is None:
                from transformers import AutoTokenizer

                self._template = AutoTokenizer.from_pretrained(self.template_tokenizer)
        return self._template.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )

    async def _answer_mean_logprob(self, prompt: str, answer: str, item: int) -> float:
        """Mean log-prob of the tokens of ``answer`` after ``prompt``, from echoed log-probs."""
        url = self._api + COMPLETIONS_PATH
        body = echo_body(self.model, prompt + answer, self.extra_body)
        reply = await self.http.apost(url, body)
        choice = self._read(url, first_choice, reply)
        return self._read(
            f"{url}: item {item}",
            echoed_answer_logprob,
            choice,
            len(prompt),
            answer,
            generated_tokens(reply),
        )

    @property
    def scores_continuations(self) -> bool:
        """Whether ``abstain_prob`` asks for the exact probability of an abstention token
        outside the top log-probs (``exact_bounds="auto"`` with ``template_tokenizer``)."""
        return self.exact_bounds == "auto" and self.template_tokenizer is not None

    async def _token_after(
        self, messages: Messages, token: str, top: Mapping[str, float], item: int
    ) -> float | None:
        """The probability of ``token`` as the first reply token to ``messages``, read from
        the echoed log-probs of the rendered prompt followed by ``token``; None (the caller
        keeps its bound) when the echo does not score it as one token, or disagrees with the
        chat reply's top log-probs ``top`` (another chat template than the server's), or the
        server returns no echoed log-probs (then never asked again)."""
        prompt = self._render(messages)
        url = self._api + COMPLETIONS_PATH
        try:
            reply = await self.http.apost(
                url, echo_body(self.model, prompt + token, self.extra_body)
            )
            picked = echoed_continuation(
                first_choice(reply), len(prompt), token, generated_tokens(reply)
            )
        except JudgeServerError as exc:
            if not isinstance(exc, ReplyError) and exc.status not in (400, 404, 422):
                raise
            self._echo = False
            self.http.count("exact_unavailable")
            return None
        best = max(top, key=top.__getitem__)
        if len(picked) != 1 or picked[0][0] != token or not _agrees(picked[0][2], best, top[best]):
            self.http.count("exact_mismatch")
            return None
        logprob = picked[0][1]
        if logprob > min(top.values()) + 1e-6:  # above its own bound: not the same prompt
            self.http.count("exact_mismatch")
            return None
        self.http.count("abstain_exact")
        return math.exp(logprob)

    # -- the first token of the abstention marker ---------------------------------------------

    def key_settings(self, operation: str) -> dict[str, Any]:
        """For ``abstain_prob`` without ``abstain_token``: the abstention token text used
        (:meth:`abstain_token_text`, resolved once per judge); nothing for other operations,
        whose values depend on the fingerprint's settings alone."""
        settings: dict[str, Any] = {}
        if operation == "abstain_prob" and self.abstain_token is None:
            settings["abstain_token"] = self.abstain_token_text()
        if operation == "abstain_prob" and self.scores_continuations:
            settings["exact_bounds"] = "echo"
        return settings

    def server_abstain_token(self) -> str | None:
        """The text of the first token of NO-RESPONSE per the server's tokenizer, asked once
        per judge after a :meth:`probe` (a server that does not answer is a one-line error; a
        cached judge then falls back on the token an earlier run recorded); None when no
        tokenizer endpoint says."""
        with self._lock:
            if self._server_token_asked:
                return self._resolved_abstain_token
        self.probe()
        text = first_token_text(self.http, self._root, self.model, ABSTAIN_MARKER)
        with self._lock:
            self._server_token_asked = True
            self._resolved_abstain_token = text
        return text

    def abstain_token_text(self) -> str:
        """The text of the first token of NO-RESPONSE that ``abstain_prob`` looks for:
        ``abstain_token`` when given, else the server tokenizer's answer
        (:meth:`server_abstain_token`), else ``"NO"``, with a one-line warning the first
        time."""
        if self.abstain_token is not None:
            return self.abstain_token
        resolved = self.server_abstain_token()
        if resolved is not None:
            return resolved
        with self._lock:
            first = "assumed" not in self._warned
            self._warned.add("assumed")
        if first:
            warnings.warn(
                f"{self._root}: no tokenizer endpoint answered (/tokenize, /extras/tokenize);"
                f" assuming the first token of {ABSTAIN_MARKER} is 'NO' (pass abstain_token to"
                " set it); values computed with it are cached under that token",
                UDCGWarning,
                stacklevel=3,
            )
        return "NO"
