"""Evaluation datasets: questions + a corpus to retrieve from, or contexts already retrieved.

Relevance of a corpus passage to a question is answer containment (:func:`udcg.labels.answers.
contains_answer`: a normalised acceptable answer occurs on word boundaries), the same rule as
``annotate --relevance string``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage, read_contexts
from udcg.io.contexts.model import distinct_contexts
from udcg.io.files import PathType, open_text
from udcg.io.manifests import recorded_judges
from udcg.labels.answers import normalize
from udcg.retrieval import Query
from udcg.validation import positive_int


@dataclass
class Dataset:
    """Queries and a corpus (``contexts`` None), or ready contexts (``retriever=given``);
    ``notes`` say what the loader skipped and why."""

    name: str
    queries: list[Query]
    corpus: list[Passage]
    contexts: list[Context] | None = None
    notes: list[str] = field(default_factory=list)
    #: who made the values the given contexts hold, as their file's manifest records it:
    #: judge key -> annotate step -> fingerprint (:func:`udcg.io.manifests.recorded_judges`)
    judges: dict[str, dict[str, str]] = field(default_factory=dict)

    def fingerprint(self) -> str:
        """SHA-256 of everything a stage reads from the dataset, in order: each query (id,
        question, answers, relevant corpus indices), each corpus passage and each given context
        (every field). A file edited at the same path loads to another fingerprint.

        Examples:
            >>> data = Dataset("d", [Query("q1", "who?", ["A"])], [Passage("p1", "A did")])
            >>> other = Dataset("d", [Query("q1", "who?", ["B"])], [Passage("p1", "A did")])
            >>> data.fingerprint() == other.fingerprint()
            False
        """
        digest = hashlib.sha256()
        for query in self.queries:
            record = [query.qid, query.question, query.answers, sorted(query.relevant)]
            digest.update(_canonical(["query", record]))
        for passage in self.corpus:
            digest.update(_canonical(["passage", passage.to_json()]))
        for context in self.contexts or []:
            digest.update(_canonical(["context", context.to_json()]))
        return digest.hexdigest()


def _canonical(record: object) -> bytes:
    """``record`` as one line of canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(record, sort_keys=True, separators=(",", ":"), default=str)
    return (text + "\n").encode()


#: Where the file of :func:`nq_open` comes from.
NQ_OPEN_SOURCE = (
    "the Lost in the Middle NQ-open oracle file (nq-open-oracle.jsonl.gz in qa_data/ of "
    "github.com/nelson-liu/lost-in-the-middle)"
)


def _check_limit(limit: int | None) -> None:
    if limit is not None:
        positive_int(limit, "limit")


def answer_relevance(
    answers: Sequence[Sequence[str]], corpus: Sequence[Passage]
) -> list[frozenset]:
    """Per question, the corpus indices whose text contains one of its answers."""
    texts = [f" {normalize(p.text or '')} " for p in corpus]
    out = []
    for options in answers:
        needles = [f" {n} " for n in (normalize(a) for a in options) if n]
        out.append(frozenset(i for i, t in enumerate(texts) if any(n in t for n in needles)))
    return out


def _queries(rows: list[tuple[str, str, list[str]]], corpus: list[Passage]) -> list[Query]:
    relevant = answer_relevance([answers for _, _, answers in rows], corpus)
    return [Query(q, text, a, r) for (q, text, a), r in zip(rows, relevant, strict=True)]


def demo_source(path: PathType | None = None, limit: int | None = 12) -> Dataset:
    """The shipped demo source: its first ``limit`` questions; corpus = every passage."""
    from udcg.demo_data.demo import SOURCE, load_source

    _check_limit(limit)
    questions = load_source(Path(path) if path else SOURCE)
    corpus = [
        Passage(doc_id=p["doc_id"], text=p["text"], extra={"kind": p["kind"]})
        for q in questions
        for p in q["passages"]
    ]
    rows = [(q["qid"], q["question"], list(q["answers"])) for q in questions[:limit]]
    return Dataset("demo", _queries(rows, corpus), corpus)


def nq_open(path: PathType, limit: int | None = 200) -> Dataset:
    """NQ-open with gold passages (``{"question", "answers", "ctxs": [{"title", "text",
    "isgold"}]}`` per line; :data:`NQ_OPEN_SOURCE`): the first ``limit`` questions; corpus =
    every gold passage of the file, de-duplicated by text."""
    _check_limit(limit)
    if not Path(path).exists():
        raise UDCGInputError(
            f"no such file; dataset=nq_open reads {NQ_OPEN_SOURCE}: download it and set "
            "dataset.path=...",
            path=path,
        )
    rows, corpus, seen = [], [], {}
    with open_text(path) as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                question, answers = obj["question"], list(obj["answers"])
                gold = [c for c in obj["ctxs"] if c.get("isgold")]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise UDCGInputError(
                    f"not an NQ-open line ({exc})", path=path, line=number
                ) from None
            for ctx in gold:
                if ctx["text"] not in seen:
                    seen[ctx["text"]] = len(corpus)
                    corpus.append(
                        Passage(
                            doc_id=f"nq-gold-{len(corpus)}",
                            text=ctx["text"],
                            extra={"title": ctx.get("title")},
                        )
                    )
            if limit is None or len(rows) < limit:
                rows.append((f"nq-{number}", question, answers))
    return Dataset("nq_open", _queries(rows, corpus), corpus)


def contexts_jsonl(path: PathType) -> Dataset:
    """Retrieved (and possibly annotated) contexts, one JSON line each (DESIGN §3); a context
    held twice is refused (:func:`udcg.io.contexts.model.distinct_contexts`)."""
    contexts = distinct_contexts(read_contexts(path))
    return Dataset("jsonl", [], [], contexts, judges=recorded_judges(path))


def contexts_hf(id_or_path: str, split: str = "train") -> Dataset:
    """Contexts from a Hugging Face dataset: a Hub id, a ``save_to_disk`` folder or a folder of
    data files (columns: :mod:`udcg.io.formats.hf_datasets`)."""
    from udcg.io.formats.hf_datasets import load_contexts_dataset

    return Dataset("hf", [], [], load_contexts_dataset(id_or_path, split))


def reference_json(path: PathType) -> Dataset:
    """Contexts in the reference UDCG JSON format (relevance and abstention included)."""
    from udcg.io.formats.reference import read_reference_json

    return Dataset("reference", [], [], read_reference_json(path))


def trec(
    run: PathType,
    qrels: PathType,
    utilities: PathType,
    outcomes: PathType,
    judge: str,
    k: int,
    utility_field: str = "abstain_prob",
) -> Dataset:
    """Annotated contexts from a TREC run + qrels + per-passage judge probabilities + per-query
    outcomes: each judged query's top-k of the run in trec_eval order, relevant = grade >= 1
    (unjudged: not relevant), no passage text
    (:func:`udcg.io.joins.trec_contexts.read_trec_contexts`
    gives the file formats). Run queries without qrels are skipped and counted in ``notes``."""
    from udcg.io.joins.trec_contexts import read_trec_contexts

    contexts, notes = read_trec_contexts(run, qrels, utilities, outcomes, judge, k, utility_field)
    return Dataset("trec", [], [], contexts, notes)


def ir_datasets_source(
    id: str, limit: int | None = 200, run: PathType | None = None, k: int | None = None
) -> Dataset:
    """An ir_datasets dataset by id (the ir-datasets extra; :mod:`udcg.io.formats.ir_datasets`).

    Without ``run``, questions and a corpus for a retriever: the first ``limit`` queries (in
    ``queries_iter()`` order) that the qrels judge, counted in ``notes`` when some are
    skipped; corpus = every document (``docs_iter()``, held in memory); relevant = qrels
    grade >= 1 (a dataset without qrels: answer containment, as ``nq_open``); answers = the
    queries' ``answers`` field, when they have one.

    With ``run`` (a TREC run; use ``retriever=given``): its top-``k`` contexts, passages looked
    up in the docs store, as ``udcg contexts RUN --dataset ID -k K`` builds them."""
    from udcg.io.formats.ir_datasets import load_ir_dataset

    _check_limit(limit)
    source = load_ir_dataset(id)
    judged = source.qrels() if source.has("qrels") else None
    if run is not None:
        from udcg.io.formats.trec import qrels_from_dict
        from udcg.io.joins.run_contexts import build_run_contexts

        if k is None:
            raise UDCGInputError("k is needed with a run", field="k")
        qrels = None if judged is None else qrels_from_dict(judged)
        contexts = build_run_contexts(run, source.topics, source.passages, k, qrels=qrels)
        return Dataset("ir_datasets", [], [], list(contexts))
    source.require("queries")
    source.require("docs")
    corpus = [
        Passage(doc_id=d.doc_id, text=d.text, extra={} if d.title is None else {"title": d.title})
        for d in source.iter_passages()
    ]
    topics, skipped = [], 0
    for topic in source.iter_topics():
        if limit is not None and len(topics) >= limit:
            break
        if judged is not None and topic.qid not in judged:
            skipped += 1
            continue
        topics.append(topic)
    notes = [f"{skipped} queries without qrels skipped"] if skipped else []
    if judged is None:
        rows = [(t.qid, t.text, list(t.answers or [])) for t in topics]
        return Dataset("ir_datasets", _queries(rows, corpus), corpus, notes=notes)
    index = {p.doc_id: i for i, p in enumerate(corpus)}
    queries = [
        Query(
            t.qid,
            t.text,
            list(t.answers or []),
            frozenset(index[d] for d, g in judged[t.qid].items() if g >= 1 and d in index),
        )
        for t in topics
    ]
    return Dataset("ir_datasets", queries, corpus, notes=notes)
