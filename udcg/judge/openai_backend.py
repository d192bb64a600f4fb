"""Judge backend for any OpenAI-compatible chat server (vLLM, llama.cpp's llama-server,
llama-cpp-python, ``transformers serve``, hosted APIs), for scaling the judge out.

Requests go out concurrently (at most ``max_concurrency`` at once, from a thread pool over one
pooled ``httpx`` client). Connection errors, timeouts and HTTP 408/409/425/429/5xx replies are
retried up to ``max_retries`` times with exponential backoff and jitter (a numeric
``Retry-After`` header is honoured, capped at ``max_backoff``); other HTTP errors, malformed JSON
and replies missing a field are not retried. Every failure raises :class:`JudgeServerError`,
naming the URL and the reason; no value is ever NaN or silently 0.

The API key is read from the environment variable ``api_key_env`` (default
``OPENAI_API_KEY``) when the client is built, sent as a bearer token, and never stored on the
judge, logged, or put in its ``fingerprint``, ``repr`` or error messages (any echo of it in a
server reply is masked). Servers that need no key work with the variable unset.

Operations:

* ``generate``: ``/v1/chat/completions`` at temperature 0, the reply's message content.
* ``yes_prob``: one token at temperature 0 with ``logprobs`` and ``top_logprobs`` (20 by
  default, the OpenAI maximum). P(Yes) / (P(Yes) + P(No)) is computed from the first token's top
  log-probs, with Yes = the tokens ``"Yes"`` and ``" Yes"`` and No = ``"No"`` and ``" No"``
  (their probabilities summed), as in the local backend. When only one of the two is among the
  top-k, the other's
  probability is taken at its upper bound, the smallest top-k probability, and counted in
  ``stats["yes_no_bound"]`` with a warning; when neither is, the ratio is undefined and
  :class:`JudgeServerError` is raised.
* ``abstain_prob(mode="first_token")``: the reference abstention prompt, one token with top
  log-probs; the probability of the top token whose text equals the first token of
  ``NO-RESPONSE`` exactly. That token's text is ``abstain_token`` when given, else it is asked of
  the server's tokenizer (``/tokenize`` + ``/detokenize`` of vLLM and llama.cpp's server,
  ``/extras/tokenize`` of llama-cpp-python), else ``"NO"`` with a warning. When it is not among
  the top-k, P(abstain) is below the smallest top-k probability; that bound (at most
  1/top_logprobs) is returned and counted in ``stats["abstain_bound"]`` with a warning.
* ``abstain_prob(mode="sequence")`` raises NotImplementedError: it needs the teacher-forced
  probabilities of every marker token after the chat template's assistant prefix, which chat
  completion APIs do not return. Use the local transformers backend for it.

* ``answer_prob``: teacher-forced answer log-probs from the completions endpoint
  (``/v1/completions`` with ``echo`` and ``logprobs``, which vLLM serves): the prompt is the
  abstention conversation rendered by the chat template of ``template_tokenizer`` (a
  transformers tokenizer id or path; the server's own template cannot be asked for) followed
  by the answer, and the answer's tokens are the echoed tokens whose text offsets fall inside
  it. Normalisation as in :meth:`~udcg.judge.base.Judge.answer_prob`. Without
  ``template_tokenizer``, or from a server that does not return prompt log-probs with ``echo``
  (chat-only servers, llama.cpp's llama-server, llama-cpp-python without ``logits_all``), it
  fails with a message naming the limitation.

Servers that ignore ``logprobs`` (``transformers serve`` as of transformers 5) can serve
``generate`` and ``generate_json`` only; log-prob operations then fail with a message saying so.
"""

from __future__ import annotations

import math
import os
import random
import threading
import time
import urllib.parse
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any, TypeVar

import httpx
import numpy as np

from udcg.judge.base import AbstainMode, Judge, check_answer_inputs
from udcg.judge.cache import canonical_json
from udcg.judge.prompts import ABSTAIN_MARKER, Messages, abstain_messages

T = TypeVar("T")
R = TypeVar("R")

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
YES_TOKENS = frozenset({"Yes", " Yes"})
NO_TOKENS = frozenset({"No", " No"})
_SNIPPET = 300


class JudgeServerError(RuntimeError):
    """An OpenAI-compatible server could not be reached, refused a request, or sent a reply
    that cannot be used."""


def _split_base_url(base_url: str) -> tuple[str, str, str]:
    """(display URL, API base ending in /v1, server root) of ``base_url``."""
    parts = urllib.parse.urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, got {base_url!r}"
        )
    if parts.username or parts.password:
        raise ValueError(
            "base_url must not hold credentials; put the API key in the environment variable"
            " named by api_key_env"
        )
    if parts.query or parts.fragment:
        raise ValueError("base_url must not have a query string or fragment")
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        api, root = path, path[: -len("/v1")]
    elif path == "":
        api, root = "/v1", ""
    else:
        api, root = path, path
    origin = f"{parts.scheme}://{netloc}"
    return origin + api, origin + api, origin + root


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SNIPPET else text[:_SNIPPET] + "..."


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    if top == -math.inf:
        return top
    return top + math.log(sum(math.exp(v - top) for v in values))


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


class OpenAIJudge(Judge):
    """A judge served by an OpenAI-compatible HTTP server; see the module docstring.

    ``model`` is the model name the server expects; ``base_url`` its API root (``/v1`` is added
    when the URL has no path). ``name`` (default: ``model``) keys the values it produces.
    ``server_id`` replaces the URL in the fingerprint, to keep cache entries valid when the same
    deployment moves to another address. ``extra_body`` is merged into every chat request (e.g.
    ``{"chat_template_kwargs": {"enable_thinking": False}}`` for vLLM) and is part of the
    fingerprint. ``template_tokenizer`` (a transformers tokenizer id or local path, part of the
    fingerprint) renders prompts for ``answer_prob``. ``stats`` counts HTTP attempts
    (``requests``), ``retries`` and the bounds used.
    """

    def __init__(
        self,
        model: str,
        base_url: str = "http://127.0.0.1:8000/v1",
        name: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        max_concurrency: int = 8,
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
    ) -> None:
        if not model:
            raise ValueError("model must be the name of the model on the server")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if not 1 <= top_logprobs <= 20:
            raise ValueError(f"top_logprobs must be within 1..20, got {top_logprobs}")
        if abstain_token is not None and not abstain_token:
            raise ValueError("abstain_token must be a non-empty token text, or None")
        self.model = model
        self.base_url, self._api, self._root = _split_base_url(base_url)
        self.name = name or model
        self.api_key_env = api_key_env
        self.max_concurrency = int(max_concurrency)
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.abstain_token = abstain_token
        self.top_logprobs = int(top_logprobs)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.extra_body = dict(extra_body or {})
        settings: dict[str, Any] = {
            "model": model,
            "server": server_id or self.base_url,
            "top_logprobs": self.top_logprobs,
        }
        if abstain_token is not None:
            settings["abstain_token"] = abstain_token
        if self.extra_body:
            settings["extra_body"] = self.extra_body
        self.template_tokenizer = template_tokenizer
        if template_tokenizer is not None:
            settings["template_tokenizer"] = template_tokenizer
        self._template: Any = None
        self.fingerprint = "openai:" + canonical_json(settings)
        self.stats: Counter[str] = Counter()
        self._stats_lock = threading.Lock()
        self._client_lock = threading.Lock()
        self._client: httpx.Client | None = None
        self._resolved_abstain_token: str | None = None

    def __repr__(self) -> str:
        return f"OpenAIJudge(model={self.model!r}, base_url={self.base_url!r}, name={self.name!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for transient in ("_client", "_stats_lock", "_client_lock", "_template"):
            state.pop(transient, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._stats_lock = threading.Lock()
        self._client_lock = threading.Lock()
        self._client = None
        self._template = None

    # -- HTTP -----------------------------------------------------------------------------------

    def _http(self) -> httpx.Client:
        with self._client_lock:
            if self._client is None:
                headers = {"Accept": "application/json"}
                key = os.environ.get(self.api_key_env)
                if key:
                    headers["Authorization"] = f"Bearer {key}"
                self._client = httpx.Client(
                    timeout=httpx.Timeout(self.timeout),
                    limits=httpx.Limits(
                        max_connections=self.max_concurrency,
                        max_keepalive_connections=self.max_concurrency,
                    ),
                    headers=headers,
                )
            return self._client

    def close(self) -> None:
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __enter__(self) -> OpenAIJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _count(self, what: str, n: int = 1) -> None:
        with self._stats_lock:
            self.stats[what] += n

    def _mask(self, text: str) -> str:
        key = os.environ.get(self.api_key_env)
        if key and len(key) >= 4:
            text = text.replace(key, "***")
        return text

    def _error(self, message: str) -> JudgeServerError:
        return JudgeServerError(self._mask(message))

    def _post(self, url: str, body: Mapping[str, Any], retries: int | None = None) -> Any:
        """POST ``body`` as JSON and return the decoded JSON reply, retrying transient failures."""
        retries = self.max_retries if retries is None else retries
        client = self._http()
        last = "no attempt made"
        for attempt in range(retries + 1):
            retry_after: float | None = None
            self._count("requests")
            try:
                response = client.post(url, json=body)
            except httpx.TimeoutException:
                last = f"timed out after {self.timeout:g} s"
            except httpx.TransportError as exc:
                last = f"connection failed ({type(exc).__name__}: {exc})"
            else:
                status = response.status_code
                if status in RETRY_STATUS:
                    last = f"HTTP {status}: {_snippet(response.text)}"
                    header = response.headers.get("retry-after")
                    try:
                        retry_after = float(header) if header is not None else None
                    except ValueError:
                        retry_after = None
                elif status >= 400:
                    hint = ""
                    if status in (401, 403):
                        hint = (
                            f" (check the API key in the environment variable {self.api_key_env})"
                        )
                    elif status == 404:
                        hint = f" (check base_url and that the server serves model {self.model!r})"
                    raise self._error(f"{url}: HTTP {status}{hint}: {_snippet(response.text)}")
                else:
                    try:
                        return response.json()
                    except ValueError:
                        reply = _snippet(response.text)
                        raise self._error(
                            f"{url}: malformed JSON reply (HTTP {status}): {reply}"
                        ) from None
            if attempt < retries:
                self._count("retries")
                if retry_after is not None:
                    delay = min(self.max_backoff, max(0.0, retry_after))
                else:
                    delay = min(self.max_backoff, self.backoff * 2**attempt)
                    delay *= random.uniform(0.5, 1.5)
                time.sleep(delay)
        raise self._error(
            f"{url}: server unreachable or failing after {retries + 1} attempt(s): {last}"
        )

    def _map(self, function: Callable[[int, T], R], items: Sequence[T]) -> list[R]:
        """``function(i, item)`` for every item, at most ``max_concurrency`` at a time, in order.

        The first failure (in input order among those that failed) is raised once the requests
        in flight have ended; requests not yet started are cancelled.
        """
        if not items:
            return []
        workers = min(self.max_concurrency, len(items))
        if workers == 1:
            return [function(i, item) for i, item in enumerate(items)]
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="udcg-openai")
        try:
            futures = [pool.submit(function, i, item) for i, item in enumerate(items)]
            wait(futures, return_when=FIRST_EXCEPTION)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        for future in futures:
            if not future.cancelled() and future.exception() is not None:
                raise future.exception()  # type: ignore[misc]
        return [future.result() for future in futures]

    # -- chat completions -----------------------------------------------------------------------

    def _chat(self, messages: Messages, **options: Any) -> dict[str, Any]:
        """The first choice of a chat completion at temperature 0."""
        url = self._api + "/chat/completions"
        body = {**self.extra_body, "model": self.model, "messages": messages, "temperature": 0.0}
        body.update(options)
        reply = self._post(url, body)
        choices = reply.get("choices") if isinstance(reply, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self._error(f"{url}: reply has no 'choices' list: {_snippet(str(reply))}")
        return choices[0]

    def _first_token_logprobs(self, messages: Messages) -> dict[str, float]:
        """Token text -> log-prob of the top alternatives for the first generated token."""
        url = self._api + "/chat/completions"
        choice = self._chat(messages, max_tokens=1, logprobs=True, top_logprobs=self.top_logprobs)
        logprobs = choice.get("logprobs")
        if not isinstance(logprobs, dict):
            raise self._error(
                f"{url}: the reply has no log-probs ('choices[0].logprobs' is "
                f"{type(logprobs).__name__}); the server ignores 'logprobs'/'top_logprobs'"
                " (transformers serve does; vLLM, llama.cpp's llama-server and llama-cpp-python"
                " return them)"
            )
        found: dict[str, float] = {}

        def add(token: Any, logprob: Any) -> None:
            if token is None and logprob is None:
                return
            if not isinstance(token, str) or isinstance(logprob, bool):
                raise self._error(f"{url}: malformed log-prob entry {token!r}: {logprob!r}")
            try:
                value = float(logprob)
            except (TypeError, ValueError):
                raise self._error(
                    f"{url}: malformed log-prob entry {token!r}: {logprob!r}"
                ) from None
            if math.isnan(value) or value > 1e-4:
                raise self._error(f"{url}: invalid log-prob {value!r} for token {token!r}")
            value = min(value, 0.0)
            found[token] = max(value, found.get(token, -math.inf))

        content = logprobs.get("content")
        legacy = logprobs.get("top_logprobs")
        if isinstance(content, list) and content and isinstance(content[0], dict):
            # OpenAI chat format: content[0] = {token, logprob, top_logprobs: [{token, logprob}]}
            first = content[0]
            for entry in first.get("top_logprobs") or []:
                if not isinstance(entry, dict):
                    raise self._error(f"{url}: malformed top_logprobs entry {entry!r}")
                add(entry.get("token"), entry.get("logprob"))
            add(first.get("token"), first.get("logprob"))
        elif isinstance(legacy, list) and legacy and isinstance(legacy[0], dict):
            # Completions format (llama-cpp-python): top_logprobs[0] = {token: logprob}
            for token, logprob in legacy[0].items():
                add(token, logprob)
            tokens, token_logprobs = logprobs.get("tokens"), logprobs.get("token_logprobs")
            if isinstance(tokens, list) and isinstance(token_logprobs, list) and tokens:
                add(tokens[0], token_logprobs[0])
        if not found:
            raise self._error(
                f"{url}: the reply has no top log-probs for the first token: "
                f"{_snippet(str(logprobs))}"
            )
        return found

    # -- operations ---------------------------------------------------------------------------

    def generate(self, prompts: Sequence[Messages], max_new_tokens: int = 64) -> list[str]:
        url = self._api + "/chat/completions"

        def one(i: int, messages: Messages) -> str:
            choice = self._chat(messages, max_tokens=int(max_new_tokens))
            message = choice.get("message")
            text = message.get("content") if isinstance(message, dict) else None
            if not isinstance(text, str):
                raise self._error(
                    f"{url}: item {i}: reply has no text in 'choices[0].message.content': "
                    f"{_snippet(str(choice))}"
                )
            return text

        return self._map(one, list(prompts))

    def yes_prob(self, prompts: Sequence[Messages]) -> np.ndarray:
        url = self._api + "/chat/completions"
        bounded = [0]

        def one(i: int, messages: Messages) -> float:
            top = self._first_token_logprobs(messages)
            yes = [lp for token, lp in top.items() if token in YES_TOKENS]
            no = [lp for token, lp in top.items() if token in NO_TOKENS]
            if not yes and not no:
                best = sorted(top, key=top.get, reverse=True)[:5]  # type: ignore[arg-type]
                raise self._error(
                    f"{url}: item {i}: neither 'Yes' nor 'No' is among the top"
                    f" {self.top_logprobs} first tokens (top: {best}), so P(Yes)/(P(Yes)+P(No))"
                    " is undefined"
                )
            floor = min(top.values())
            if not yes or not no:
                self._count("yes_no_bound")
                bounded[0] += 1
            log_yes = _logsumexp(yes) if yes else floor
            log_no = _logsumexp(no) if no else floor
            if log_yes == -math.inf and log_no == -math.inf:
                raise self._error(f"{url}: item {i}: both P(Yes) and P(No) are 0")
            if log_no == -math.inf:
                return 1.0
            if log_yes == -math.inf:
                return 0.0
            return _sigmoid(log_yes - log_no)

        values = np.asarray(self._map(one, list(prompts)), dtype=np.float64)
        if bounded[0]:
            warnings.warn(
                f"yes_prob: for {bounded[0]} of {len(values)} prompts only one of Yes/No was"
                f" among the top {self.top_logprobs} tokens; the other was taken at its upper"
                " bound (the smallest top-k probability)",
                stacklevel=2,
            )
        return values

    def abstain_prob(
        self, questions: Sequence[str], passages: Sequence[str], mode: AbstainMode = "first_token"
    ) -> np.ndarray:
        if mode == "sequence":
            raise NotImplementedError(
                "OpenAIJudge cannot compute abstain_prob(mode='sequence'): it needs the"
                " teacher-forced probability of every NO-RESPONSE token, which chat completion"
                " APIs do not return; use mode='first_token' or the local transformers backend"
            )
        if mode != "first_token":
            raise ValueError(f"mode must be 'first_token' or 'sequence', got {mode!r}")
        questions, passages = list(questions), list(passages)
        if len(questions) != len(passages):
            raise ValueError(
                f"abstain_prob needs one passage per question, got {len(questions)} questions"
                f" and {len(passages)} passages"
            )
        if not questions:
            return np.zeros(0, dtype=np.float64)
        marker = self.abstain_token_text()
        bounded = [0]

        def one(i: int, pair: tuple[str, str]) -> float:
            top = self._first_token_logprobs(abstain_messages(*pair))
            if marker in top:
                return math.exp(top[marker])
            self._count("abstain_bound")
            bounded[0] += 1
            return math.exp(min(top.values()))

        values = np.asarray(
            self._map(one, list(zip(questions, passages, strict=True))), dtype=np.float64
        )
        if bounded[0]:
            warnings.warn(
                f"abstain_prob: for {bounded[0]} of {len(values)} pairs the token {marker!r} was"
                f" not among the top {self.top_logprobs}; its probability was set to its upper"
                " bound, the smallest top-k probability",
                stacklevel=2,
            )
        return values

    def answer_prob(
        self,
        questions: Sequence[str],
        passages: Sequence[str],
        answers: Sequence[Sequence[str]],
    ) -> np.ndarray:
        """Max over acceptable answers of exp(mean log-prob of the answer's tokens), read from
        ``/v1/completions`` with ``echo`` (see the module docstring)."""
        questions, passages, answers = check_answer_inputs(questions, passages, answers)
        if not questions:
            return np.zeros(0, dtype=np.float64)
        prompts = [
            self._render(abstain_messages(q, p)) for q, p in zip(questions, passages, strict=True)
        ]
        flat = [(i, a) for i, options in enumerate(answers) for a in dict.fromkeys(options)]

        def one(k: int, item: tuple[int, str]) -> float:
            i, answer = item
            return self._answer_mean_logprob(prompts[i], answer, k)

        best = np.zeros(len(questions), dtype=np.float64)
        np.maximum.at(best, [i for i, _ in flat], np.exp(self._map(one, flat)))
        return best

    def _render(self, messages: Messages) -> str:
        """``messages`` rendered by the chat template of ``template_tokenizer``."""
        if self.template_tokenizer is None:
            raise NotImplementedError(
                "OpenAIJudge.answer_prob needs the model's chat template to build a raw prompt "
                "for /v1/completions (the server's own template cannot be asked for): pass "
                "template_tokenizer='<transformers id or path of the served model>'"
            )
        with self._client_lock:
            if self._template is None:
                from transformers import AutoTokenizer

                self._template = AutoTokenizer.from_pretrained(self.template_tokenizer)
        return self._template.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )

    def _answer_mean_logprob(self, prompt: str, answer: str, item: int) -> float:
        """Mean log-prob of the tokens of ``answer`` after ``prompt``, from echoed log-probs."""
        url = self._api + "/completions"
        body = {
            **self.extra_body,
            "model": self.model,
            "prompt": prompt + answer,
            "max_tokens": 1,
            "temperature": 0.0,
            "echo": True,
            "logprobs": 1,
        }
        reply = self._post(url, body)
        choices = reply.get("choices") if isinstance(reply, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self._error(f"{url}: reply has no 'choices' list: {_snippet(str(reply))}")
        logprobs = choices[0].get("logprobs")
        fields = ("tokens", "token_logprobs", "text_offset")
        if not isinstance(logprobs, dict) or not all(
            isinstance(logprobs.get(f), list) for f in fields
        ):
            raise self._error(
                f"{url}: item {item}: the reply has no prompt log-probs ('choices[0].logprobs' "
                f"needs {', '.join(fields)}); the server does not return log-probs of echoed "
                "prompts (vLLM does; chat-only servers, llama.cpp's llama-server and "
                "llama-cpp-python without logits_all do not), so answer likelihoods cannot be "
                "read from it"
            )
        start, end = len(prompt), len(prompt) + len(answer)
        picked: list[float] = []
        for token, logprob, offset in zip(*(logprobs[f] for f in fields), strict=False):
            if not isinstance(offset, int) or offset >= end:
                if isinstance(offset, int):
                    break
                raise self._error(f"{url}: item {item}: malformed text offset {offset!r}")
            if offset < start:
                if isinstance(token, str) and offset + len(token) > start:
                    raise self._error(
                        f"{url}: item {item}: token {token!r} spans the end of the prompt and "
                        f"the start of answer {answer!r}; its tokens cannot be scored apart"
                    )
                continue
            if isinstance(logprob, bool) or not isinstance(logprob, int | float):
                raise self._error(f"{url}: item {item}: malformed log-prob {logprob!r}")
            if math.isnan(logprob) or logprob > 1e-4:
                raise self._error(f"{url}: item {item}: invalid log-prob {logprob!r}")
            picked.append(min(float(logprob), 0.0))
        if not picked:
            raise self._error(
                f"{url}: item {item}: no echoed token starts inside answer {answer!r}"
            )
        return sum(picked) / len(picked)

    # -- the first token of the abstention marker ---------------------------------------------

    def abstain_token_text(self) -> str:
        """The text of the first token of NO-RESPONSE that ``abstain_prob`` looks for."""
        if self.abstain_token is not None:
            return self.abstain_token
        with self._client_lock:
            resolved = self._resolved_abstain_token
        if resolved is None:
            resolved = self._first_token_text(ABSTAIN_MARKER)
            if resolved is None:
                resolved = "NO"
                warnings.warn(
                    f"{self._root}: no tokenizer endpoint answered (/tokenize, /extras/tokenize);"
                    f" assuming the first token of {ABSTAIN_MARKER} is 'NO' (pass abstain_token"
                    " to set it)",
                    stacklevel=3,
                )
            with self._client_lock:
                self._resolved_abstain_token = resolved
        return resolved

    def _try_post(self, path: str, body: Mapping[str, Any]) -> Any:
        """One POST to the server root, or None when it fails in any way."""
        try:
            return self._post(self._root + path, body, retries=0)
        except JudgeServerError:
            return None

    def _first_token_text(self, text: str) -> str | None:
        """The text of the first token of ``text`` per the server's tokenizer, if it says."""
        styles: list[tuple[str, Callable[[str], dict[str, Any]], str]] = [
            # vLLM (prompt, add_special_tokens) and llama.cpp's llama-server (content, add_special)
            (
                "/tokenize",
                lambda s: {
                    "model": self.model,
                    "prompt": s,
                    "content": s,
                    "add_special_tokens": False,
                    "add_special": False,
                },
                "/detokenize",
            ),
            # llama-cpp-python (always adds BOS: stripped below as the prefix of "")
            ("/extras/tokenize", lambda s: {"model": self.model, "input": s}, "/extras/detokenize"),
        ]
        for tokenize, body, detokenize in styles:
            ids = self._token_ids(self._try_post(tokenize, body(text)))
            if not ids:
                continue
            prefix = self._token_ids(self._try_post(tokenize, body("")))
            if prefix is None:
                continue
            if ids[: len(prefix)] == prefix:
                ids = ids[len(prefix) :]
            if not ids:
                continue
            reply = self._try_post(detokenize, {"model": self.model, "tokens": ids[:1]})
            if isinstance(reply, dict):
                for field in ("prompt", "content", "text"):
                    if isinstance(reply.get(field), str) and reply[field]:
                        return reply[field]
        return None

    @staticmethod
    def _token_ids(reply: Any) -> list[int] | None:
        if not isinstance(reply, dict) or not isinstance(reply.get("tokens"), list):
            return None
        ids = []
        for token in reply["tokens"]:
            if isinstance(token, dict):
                token = token.get("id")
            if not isinstance(token, int) or isinstance(token, bool):
                return None
            ids.append(token)
        return ids
