"""What an OpenAI-compatible server offers each annotate step, asked with a handful of tiny
requests (``udcg probe``; docs/serving.md): models list, top log-probs, the abstention token,
Yes/No, echo, answer likelihood, exact abstention by echo, JSON output, generation.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from udcg.errors import LogprobsUnavailable
from udcg.judge.openai_backend import OpenAIJudge
from udcg.judge.openai_http import JudgeServerError, reply_json
from udcg.judge.openai_replies import (
    ECHO_FIELDS,
    ReplyError,
    first_choice,
    first_token_logprobs,
    message_text,
    refuses_response_format,
    unlisted_logprob,
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
from udcg.judge.prompts import Messages, abstain_messages
from udcg.judge.requests import RefusedRequest

ABSTAIN_EXAMPLE = ("Who wrote the novel Middlemarch?", "The Eiffel Tower is in Paris.")
ANSWER_EXAMPLE = ("What is the capital of France?", "Paris is the capital of France.", "Paris")
ECHO_PROMPT = "The capital of France is Paris"
JSON_MESSAGES: Messages = [
    {"role": "user", "content": 'Reply with the JSON object {"answer": "yes"} and nothing else.'}
]
JSON_TOKENS = 24
RETRIES = 1  # of each probe request (the server answered /v1/models already)


@dataclass
class ServerReport:
    """The findings of :func:`probe_server` (``None``: not checked); ``errors`` maps a check to
    why it failed."""

    url: str
    model: str
    models: list[str] | None = None
    chat_logprobs: bool = False
    top_logprobs_asked: int = 0
    top_logprobs_returned: int | None = None
    abstain_token: str | None = None
    abstain_token_source: str = "assumed"
    abstain_in_top: bool | None = None
    abstain_logprob: float | None = None
    abstain_exact: bool | None = None
    smallest_top_logprob: float | None = None
    #: the bound of a token outside the top log-probs (:func:`unlisted_logprob`), as stored
    abstain_bound: float | None = None
    relevance: str = "no"
    echo_logprobs: bool = False
    answer_likelihood: str = "no"
    json_output: str = "no"
    generate: bool = False
    errors: dict[str, str] = field(default_factory=dict)
    #: whether the server gave no log-probs (the abstention check's cause of failure)
    no_logprobs: bool = False

    @property
    def refused(self) -> bool:
        """Whether the abstention check's reply was refused for another cause than missing
        log-probs (another model's reply, a stopped reply, ...)."""
        return not self.chat_logprobs and "abstention" in self.errors and not self.no_logprobs

    @property
    def model_listed(self) -> bool | None:
        """Whether ``/v1/models`` lists the model (None: no list came back)."""
        return None if self.models is None else self.model in self.models

    def steps(self) -> dict[str, str]:
        """What each annotate step gets: ``exact``, ``upper bound``, ``yes`` or ``no`` (why)."""
        if not self.chat_logprobs:  # no log-probs, or a reply refused for another reason
            first = "no (failed check: abstention)" if self.refused else "no (no log-probs)"
        elif self.abstain_in_top:
            first = "exact"
        elif self.abstain_exact:
            first = "exact (by echo)"
        else:
            first = f"upper bound (token outside top {self.top_logprobs_returned})"
        qcare = {
            "accepted": "yes (JSON output)",
            "refused": "yes (JSON by prompt; response_format refused)",
            "not JSON": "no (the reply to a JSON request is not JSON)",
        }.get(self.json_output, "yes (JSON by prompt)" if self.generate else "no")
        return {
            "abstention first_token": first,
            "abstention sequence": "no (local backend only)",
            "answer_likelihood": self.answer_likelihood,
            "relevance llm": self.relevance,
            "outcomes": "yes" if self.generate else "no",
            "Q-CARE generate_json": qcare,
        }

    def as_json(self) -> dict[str, Any]:
        """The findings, ``model_listed`` and :meth:`steps` as one JSON-ready dict; a log-prob
        of -inf (probability 0: JSON has no infinity) is None."""
        found = {
            k: None if isinstance(v, float) and not math.isfinite(v) else v
            for k, v in asdict(self).items()
        }
        return {**found, "model_listed": self.model_listed, "steps": self.steps()}


def _models(judge: OpenAIJudge, report: ServerReport) -> None:
    """The model ids ``/v1/models`` lists."""
    reply = judge.http.get(judge.base_url + "/models", judge.http.timeout)
    try:
        data = reply_json(reply).get("data")
        report.models = [str(entry["id"]) for entry in data]
    except (ValueError, AttributeError, KeyError, TypeError):
        report.errors["models"] = f"HTTP {reply.status_code}: no model list in the reply"


def _first_token(judge: OpenAIJudge, messages: Messages) -> dict[str, float]:
    url = judge.base_url + CHAT_PATH
    body = first_token_body(judge.model, messages, judge.extra_body, judge.top_logprobs)
    reply = judge.http.post(url, body, RETRIES)
    return first_token_logprobs(first_choice(reply, judge.reply_model))


def _abstention(judge: OpenAIJudge, report: ServerReport) -> None:
    """The abstention token and whether it is among the first token's top log-probs."""
    token, source = judge.abstain_token, "given"
    if token is None:
        token, source = judge.server_abstain_token(), "tokenizer endpoint"
    if token is None:
        token, source = "NO", "assumed"
    report.abstain_token, report.abstain_token_source = token, source
    top = _first_token(judge, abstain_messages(*ABSTAIN_EXAMPLE))
    report.chat_logprobs = True
    report.top_logprobs_returned = len(top)
    report.smallest_top_logprob = min(top.values())
    report.abstain_bound = unlisted_logprob(top)
    report.abstain_in_top = token in top
    report.abstain_logprob = top.get(token)


def _relevance(relevance: Messages, judge: OpenAIJudge, report: ServerReport) -> None:
    """``exact`` with Yes and No among the top log-probs, ``upper bound`` with one."""
    top = _first_token(judge, relevance)
    try:
        _, bound = yes_ratio(top, judge.top_logprobs)
    except ReplyError as exc:
        report.relevance = "no (Yes and No outside the top log-probs)"
        report.errors["relevance"] = str(exc)
        return
    report.relevance = "upper bound (Yes or No outside the top log-probs)" if bound else "exact"


def _echo(judge: OpenAIJudge, report: ServerReport) -> None:
    """Prompt log-probs by echo; with ``template_tokenizer``, one answer likelihood and one
    exact abstention value."""
    url = judge.base_url + COMPLETIONS_PATH
    reply = judge.http.post(url, echo_body(judge.model, ECHO_PROMPT, judge.extra_body), RETRIES)
    logprobs = first_choice(reply, judge.reply_model).get("logprobs")
    report.echo_logprobs = (  # the prompt's own tokens come back, with log-probs
        isinstance(logprobs, dict)
        and all(isinstance(logprobs.get(f), list) for f in ECHO_FIELDS)
        and ECHO_PROMPT in "".join(t for t in logprobs["tokens"] if isinstance(t, str))
        and sum(isinstance(v, int | float) for v in logprobs["token_logprobs"]) > 1
    )
    if not report.echo_logprobs:
        report.errors["echo"] = "no prompt log-probs in the reply of /v1/completions with echo"
        return
    if judge.template_tokenizer is None:
        report.answer_likelihood = "untested (pass --template-tokenizer)"
        return
    question, passage, answer = ANSWER_EXAMPLE
    try:
        value = judge.answer_prob([question], [passage], [[answer]])[0]
    except JudgeServerError as exc:
        report.answer_likelihood = "no (echoed prompt not aligned)"
        report.errors["answer_likelihood"] = str(exc)
        return
    report.answer_likelihood = "yes" if math.isfinite(value) else "no"
    if report.abstain_in_top is False and judge.scores_continuations:
        values = judge.abstain_prob(*([text] for text in ABSTAIN_EXAMPLE))
        report.abstain_exact = not values.upper_bound[0]


def _json_output(judge: OpenAIJudge, report: ServerReport) -> None:
    """Whether the server accepts ``response_format`` JSON output, and that it generates."""
    url = judge.base_url + CHAT_PATH
    body = generate_body(judge.model, JSON_MESSAGES, judge.extra_body, JSON_TOKENS)
    try:
        reply = judge.http.post(url, {**body, "response_format": json_response_format()}, RETRIES)
    except JudgeServerError as exc:
        if not refuses_response_format(exc):
            raise
        refused = str(exc)
        reply = judge.http.post(url, body, RETRIES)
    else:
        refused = None
    text = message_text(first_choice(reply, judge.reply_model))  # no text: no generation
    report.generate = bool(text.strip())
    if refused is None and not text.lstrip().startswith(("{", "[", "```")):
        # taken, not followed (a JSON value cut at JSON_TOKENS still starts as one, fenced or not)
        report.json_output = "not JSON"
        report.errors["json_output"] = f"the reply to a JSON request is not JSON: {text!r}"
        return
    report.json_output = "accepted" if refused is None else "refused"
    if refused is not None:
        report.errors["json_output"] = refused


def probe_server(judge: OpenAIJudge, relevance: Messages) -> ServerReport:
    """What the server of ``judge`` offers; ``relevance`` is a prompt whose answer is Yes. No
    answer from ``/v1/models`` is a one-line :class:`~udcg.errors.UDCGInputError`."""
    judge.probe()
    report = ServerReport(
        url=judge.base_url, model=judge.model, top_logprobs_asked=judge.top_logprobs
    )
    names = ("models", "abstention", "relevance", "echo", "json_output")
    checks = (_models, _abstention, functools.partial(_relevance, relevance), _echo, _json_output)
    for name, check in zip(names, checks, strict=True):
        try:
            check(judge, report)
        except (JudgeServerError, RefusedRequest) as exc:  # a prompt over the context: refused
            report.errors[name] = str(exc)
            report.no_logprobs |= name == "abstention" and isinstance(exc, LogprobsUnavailable)
    return report


def report_json(report: ServerReport) -> str:
    """:meth:`ServerReport.as_json` as indented JSON text."""
    return json.dumps(report.as_json(), indent=2, ensure_ascii=False, allow_nan=False)
