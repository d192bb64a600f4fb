"""udcg inside PyTerrier pipelines: judge utilities added to result frames, scored by
``pt.Experiment``.

* :class:`JudgeUtilities`: a transformer that adds the judge's probability and the passage
  utility ``u`` to each row (query, passage) of a result frame (columns ``qid``, ``query``,
  ``docno``, ``text``), through the judge and its on-disk cache (:func:`udcg.judge.open_judge`),
  with the relevance label when asked, so ``retriever >> JudgeUtilities(judge)`` composes.
* :data:`UDCG` and :data:`UDCGtheta`: the measures of :mod:`udcg.integrations.ir_measures`
  reading ``u`` from that ``utility`` column: ``pt.Experiment(..., eval_metrics=[UDCG @ 5])``
  gives ``udcg.evaluate``'s UDCG@5 of each pipeline.
* :class:`Retrieve`: a udcg retriever (:mod:`udcg.retrieval`, e.g. BM25 through bm25s) over a
  corpus in memory as a PyTerrier retriever: topics in, a ranked result frame out, no Java.

Importing this module needs the ``pyterrier`` extra (``pip install 'udcg[pyterrier]'``);
``import udcg`` never imports PyTerrier.

Examples:
    Two queries over three passages, P(abstain) from a precomputed judge file:

    >>> import json, tempfile
    >>> import pandas as pd
    >>> from pathlib import Path
    >>> from udcg.io.contexts.jsonl import Passage
    >>> from udcg.retrieval.bm25 import BM25Retriever
    >>> corpus = [Passage("d0", text="Jane Austen wrote Emma."),
    ...           Passage("d1", text="Canberra is the capital of Australia."),
    ...           Passage("d2", text="Emma is a novel by Jane Austen.")]
    >>> topics = pd.DataFrame({"qid": ["q1", "q2"],
    ...                        "query": ["who wrote emma", "capital of australia"]})
    >>> rows = [{"question": q, "passage": p.text, "abstain_prob": 0.1 + 0.2 * i}
    ...         for q in topics["query"] for i, p in enumerate(corpus)]
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "judge.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in rows))
    >>> utilities = JudgeUtilities(f"precomputed:{folder}/judge.jsonl", cache=folder / "cache")
    >>> pipeline = Retrieve(BM25Retriever(), corpus, k=2) >> utilities
    >>> pipeline(topics)[["qid", "docno", "rank", "abstain_prob", "utility"]].round(2)
      qid docno  rank  abstain_prob  utility
    0  q1    d0     0           0.1      0.9
    1  q1    d2     1           0.5      0.5
    2  q2    d1     0           0.3      0.7
    3  q2    d0     1           0.1      0.9

    With d0 relevant to q1 and d1 to q2, UDCG@2 is the mean of ``sigmoid((0.9 - 0.5/3) / 2)``
    and ``sigmoid((0.7 - 0.9/3) / 2)``:

    >>> qrels = pd.DataFrame({"qid": ["q1", "q2"], "docno": ["d0", "d1"], "label": [1, 1]})
    >>> table = pt.Experiment([pipeline], topics, qrels, [UDCG @ 2], names=["bm25"])
    >>> round(float(table["UDCG@2"].iloc[0]), 4)
    0.5702
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

try:
    import pandas as pd
    import pyterrier as pt
except ModuleNotFoundError as missing:
    raise ModuleNotFoundError(
        "udcg.integrations.pyterrier needs the 'pyterrier' extra: pip install 'udcg[pyterrier]'",
        name=missing.name,
    ) from missing

from udcg.errors import UDCGInputError
from udcg.integrations import ir_measures as _measures
from udcg.io.contexts.model import Context, Passage
from udcg.io.joins.utility_sources import DEFAULT_SOURCE, get_source
from udcg.judge import Judge, open_judge
from udcg.labels.annotate import BOUNDS, RELEVANCE_MODES, annotate
from udcg.retrieval.base import Query, Retriever

__all__ = ["UDCG", "JudgeUtilities", "Retrieve", "UDCGtheta"]

#: the column of ``u``, which :data:`UDCG` and :data:`UDCGtheta` read
UTILITY_COLUMN = "utility"


def _text(value: Any) -> str | None:
    """A non-blank string, else None."""
    return value if isinstance(value, str) and value.strip() else None


class JudgeUtilities(pt.Transformer):
    """Adds the judge's utility of each (query, passage) row to a result frame.

    Input: a result frame with ``qid``, ``query``, ``docno`` and ``text`` (any other column is
    kept, rows stay in order). Output columns added (replaced if present):

    * ``abstain_prob`` (``utility="abstention"``, the default) or ``answer_prob``
      (``utility="answer_likelihood"``, needs answers): the judge's probability, one judge call
      per distinct (query, passage) (:func:`udcg.labels.annotate.annotate`);
    * ``utility``: ``u = 1 - abstain_prob`` or ``u = answer_prob``
      (:mod:`udcg.io.joins.utility_sources`);
    * ``upper_bound``: True where the judge could only bound the probability from above (a
      server's top log-probs lacked the token);
    * with ``relevance="string"``: ``relevant``, whether a normalised acceptable answer occurs
      in the passage; ``relevance="llm"``: ``relevant`` (P(Yes) >= 0.5) and ``relevance_prob``.

    ``judge``: a judge spec (``"smollm2-135m"``, ``"openai:MODEL@URL"``,
    ``"precomputed:PATH"``, a transformers model), opened with :func:`udcg.judge.open_judge`
    behind the on-disk cache ``cache`` (None: the shared default) with ``name`` and
    ``options``; or a :class:`udcg.judge.Judge` used as it is. ``answers``: acceptable answers
    per qid (else each query's ``answers`` column). ``mode`` and ``batch`` as in
    :func:`~udcg.labels.annotate.annotate`.

    Examples:
        >>> import json, tempfile
        >>> from pathlib import Path
        >>> row = {"question": "Who wrote Emma?", "passage": "Austen did.", "abstain_prob": 0.25}
        >>> folder = Path(tempfile.mkdtemp())
        >>> _ = (folder / "llama3.jsonl").write_text(json.dumps(row))
        >>> frame = pd.DataFrame({"qid": ["q1"], "query": [row["question"]], "docno": ["d1"],
        ...                       "text": [row["passage"]], "score": [3.5], "rank": [0]})
        >>> judge = JudgeUtilities(f"precomputed:{folder}/llama3.jsonl", cache=folder / "c",
        ...                        relevance="string", answers={"q1": ["Austen"]})
        >>> judge(frame)[["docno", "abstain_prob", "utility", "upper_bound", "relevant"]]
          docno  abstain_prob  utility  upper_bound  relevant
        0    d1          0.25     0.75        False      True
    """

    def __init__(
        self,
        judge: str | Judge,
        *,
        utility: str = DEFAULT_SOURCE,
        relevance: str | None = None,
        answers: Mapping[str, Sequence[str]] | None = None,
        cache: str | os.PathLike[str] | None = None,
        name: str | None = None,
        options: Mapping[str, Any] | None = None,
        mode: str = "first_token",
        batch: int = 64,
    ) -> None:
        if relevance is not None and relevance not in RELEVANCE_MODES:
            raise UDCGInputError(
                f"relevance is None, {' or '.join(RELEVANCE_MODES)}, not {relevance!r}",
                field="relevance",
            )
        self.source = get_source(utility)
        self.relevance = relevance
        self.answers = None if answers is None else {str(q): list(a) for q, a in answers.items()}
        self.mode, self.batch = mode, batch
        if isinstance(judge, Judge):
            self.judge = judge
        else:
            self.judge = open_judge(judge, name=name, options=options, cache=cache)

    def __repr__(self) -> str:
        relevance = f", relevance={self.relevance!r}" if self.relevance else ""
        return f"JudgeUtilities({self.judge.name!r}, utility={self.source.name!r}{relevance})"

    def _added(self) -> list[str]:
        """The columns this transformer writes, in order."""
        added = [self.source.field, UTILITY_COLUMN, "upper_bound"]
        if self.relevance is not None:
            added.append("relevant")
        if self.relevance == "llm":
            added.append("relevance_prob")
        return added

    def transform_outputs(self, input_columns: list[str]) -> list[str]:
        """The output columns for ``input_columns`` (PyTerrier's pipeline inspection).

        Examples:
            >>> import json, tempfile
            >>> from pathlib import Path
            >>> path = Path(tempfile.mkdtemp()) / "judge.jsonl"
            >>> row = {"question": "q", "passage": "p", "abstain_prob": 0.5}
            >>> _ = path.write_text(json.dumps(row))
            >>> judge = JudgeUtilities(f"precomputed:{path}", cache=path.parent / "cache")
            >>> judge.transform_outputs(["qid", "query", "docno", "text"])
            ['qid', 'query', 'docno', 'text', 'abstain_prob', 'utility', 'upper_bound']
        """
        pt.validate.result_frame(input_columns, extra_columns=["query", "text"])
        added = self._added()
        return [c for c in input_columns if c not in added] + added

    def _answers_of(self, frame: pd.DataFrame, rows: np.ndarray, qid: str) -> list[str] | None:
        if self.answers is not None:
            return self.answers.get(qid)
        if "answers" not in frame.columns:
            return None
        value = frame["answers"].iloc[rows[0]]
        if isinstance(value, str):
            return [value]
        return None if value is None or isinstance(value, float) else [str(a) for a in value]

    def _contexts(self, frame: pd.DataFrame) -> tuple[list[Context], list[np.ndarray]]:
        """One context per (qid, query), its passages the rows' texts in order, and the row
        positions of each context's passages."""
        needs_answers = self.relevance is not None or self.source.needs_answers
        contexts, positions = [], []
        docnos, texts = frame["docno"].to_numpy(), frame["text"].to_numpy()
        groups = frame.groupby(["qid", "query"], sort=False, dropna=False).indices
        for (qid, query), rows in groups.items():
            qid = str(qid)
            if _text(query) is None:
                raise UDCGInputError(f"query {qid!r}: empty or missing query", field="query")
            passages = []
            for row in rows:
                docno, text = docnos[row], texts[row]
                if _text(text) is None:
                    raise UDCGInputError(
                        f"query {qid!r}, document {docno!r}: empty or missing text", field="text"
                    )
                passages.append(Passage(str(docno), text=text))
            answers = self._answers_of(frame, rows, qid) if needs_answers else None
            if needs_answers and not answers:
                raise UDCGInputError(
                    f"query {qid!r}: no acceptable answers (pass answers= or an 'answers' "
                    "column) for the relevance or answer-likelihood labels",
                    field="answers",
                )
            contexts.append(Context(qid, passages, question=query, answers=answers))
            positions.append(rows)
        return contexts, positions

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        """``inp`` with the judge's columns added (see the class)."""
        pt.validate.result_frame(inp, extra_columns=["query", "text"])
        added = self._added()
        out = inp.drop(columns=[c for c in added if c in inp.columns])
        n = len(out)
        columns: dict[str, np.ndarray] = {
            self.source.field: np.full(n, np.nan),
            "upper_bound": np.zeros(n, dtype=bool),
        }
        if self.relevance is not None:
            columns["relevant"] = np.zeros(n, dtype=bool)
        if self.relevance == "llm":
            columns["relevance_prob"] = np.full(n, np.nan)
        if n:
            steps = [self.source.step] + (["relevance"] if self.relevance else [])
            contexts, positions = self._contexts(out)
            labelled, _ = annotate(
                contexts,
                self.judge,
                steps=steps,
                relevance=self.relevance or "string",
                mode=self.mode,  # type: ignore[arg-type]
                batch=self.batch,
            )
            self._fill(columns, labelled, positions)
        columns[UTILITY_COLUMN] = self.source.from_probs(columns[self.source.field])
        return out.assign(**{name: columns[name] for name in added})

    def _fill(
        self, columns: dict[str, np.ndarray], labelled: list[Context], positions: list[np.ndarray]
    ) -> None:
        name, field = self.judge.name, self.source.field
        for ctx, rows in zip(labelled, positions, strict=True):
            for passage, row in zip(ctx.passages, rows, strict=True):
                columns[field][row] = getattr(passage, field)[name]
                columns["upper_bound"][row] = field in passage.extra.get(BOUNDS, {}).get(name, [])
                if "relevant" in columns:
                    columns["relevant"][row] = bool(passage.relevant)
                if "relevance_prob" in columns:
                    columns["relevance_prob"][row] = passage.extra["relevance_prob"][name]


def _ordered_scores(scores: np.ndarray) -> list[float]:
    """``scores`` when finite and strictly decreasing, also as float32 (trec_eval, so
    pytrec_eval and ir_measures, and udcg rank by scores rounded to float32: closer ones tie
    and go by docno), else ``n, n - 1, ..., 1``: scores that rank a ranking's n passages in
    its order.

    Examples:
        >>> _ordered_scores(np.array([2.5, 1.0])), _ordered_scores(np.array([np.nan, 1.0]))
        ([2.5, 1.0], [2.0, 1.0])
        >>> _ordered_scores(np.array([0.3, 1.0, 1.0]))
        [3.0, 2.0, 1.0]
        >>> _ordered_scores(np.array([1.0, 1.0 - 1e-12]))  # one float32
        [2.0, 1.0]
    """
    rounded = scores.astype(np.float32)
    if np.isfinite(rounded).all() and (np.diff(rounded) < 0).all():
        return scores.astype(float).tolist()
    return np.arange(len(scores), 0, -1, dtype=float).tolist()


class Retrieve(pt.Transformer):
    """A udcg retriever (:class:`udcg.retrieval.base.Retriever`: BM25, dense, hybrid, the
    controls) over ``corpus`` as a PyTerrier retriever: a query frame (``qid``, ``query``) in,
    each query's ``k`` best passages out (``qid``, ``query``, ``docno``, ``text``, ``score``,
    ``rank`` from 0), best first. ``corpus``: passages with ``doc_id`` and ``text``, or a
    frame with ``docno`` and ``text``.

    ``score`` ranks the passages in the retriever's order, as PyTerrier and ir_measures rank
    by score: a ranking's own scores when they are finite and strictly decreasing, else
    ``n - rank`` for its n passages (ties, and the controls of :mod:`udcg.retrieval.controls`,
    whose scores are NaN or ascending).

    Examples:
        >>> from udcg.retrieval.bm25 import BM25Retriever
        >>> corpus = pd.DataFrame({"docno": ["d0", "d1"],
        ...                        "text": ["Jane Austen wrote Emma.", "Paris is in France."]})
        >>> bm25 = Retrieve(BM25Retriever(), corpus, k=1)
        >>> bm25.search("who wrote emma")[["qid", "docno", "rank"]]
          qid docno  rank
        0   1    d0     0
    """

    def __init__(
        self, retriever: Retriever, corpus: Sequence[Passage] | pd.DataFrame, k: int = 10
    ) -> None:
        if isinstance(corpus, pd.DataFrame):
            pt.validate.document_frame(corpus, extra_columns=["text"])
            corpus = [
                Passage(str(d), text=t)
                for d, t in zip(corpus["docno"], corpus["text"], strict=True)
            ]
        self.retriever, self.corpus, self.k = retriever, list(corpus), k

    def __repr__(self) -> str:
        return f"Retrieve({type(self.retriever).__name__}, {len(self.corpus)} passages, k={self.k})"

    def transform_outputs(self, input_columns: list[str]) -> list[str]:
        """The output columns for ``input_columns`` (PyTerrier's pipeline inspection).

        Examples:
            >>> from udcg.retrieval.bm25 import BM25Retriever
            >>> Retrieve(BM25Retriever(), [Passage("d0", text="Emma")]).transform_outputs(
            ...     ["qid", "query"])
            ['qid', 'query', 'docno', 'text', 'score', 'rank']
        """
        pt.validate.query_frame(input_columns, extra_columns=["query"])
        added = ["docno", "text", "score", "rank"]
        return [c for c in input_columns if c not in added] + added

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        """Each query's ``k`` best passages, best first (see the class)."""
        pt.validate.query_frame(inp, extra_columns=["query"])
        queries = [Query(str(q), text) for q, text in zip(inp["qid"], inp["query"], strict=True)]
        rankings = self.retriever.retrieve(queries, self.corpus, self.k) if queries else []
        rows: list[dict[str, Any]] = []
        for record, ranking in zip(inp.to_dict("records"), rankings, strict=True):
            for rank, (index, score) in enumerate(
                zip(ranking.indices.tolist(), _ordered_scores(ranking.scores), strict=True)
            ):
                passage = self.corpus[index]
                rows.append(
                    {
                        **record,
                        "docno": passage.doc_id,
                        "text": passage.text,
                        "score": score,
                        "rank": rank,
                    }
                )
        return pd.DataFrame(rows, columns=self.transform_outputs(list(inp.columns)))


UDCG = _measures.UDCG(utility_column=UTILITY_COLUMN)
"""``UDCG@k`` (``gamma=``, ``rel=``) of the ``utility`` column :class:`JudgeUtilities`
adds: :data:`udcg.integrations.ir_measures.UDCG` with ``utility_column="utility"``."""
UDCGtheta = _measures.UDCGtheta(utility_column=UTILITY_COLUMN)
"""``UDCGtheta(weights=W)@k`` of the ``utility`` column :class:`JudgeUtilities` adds."""
