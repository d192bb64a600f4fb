"""Data simulated from a known UDCG-theta model, for tests, benchmarks and sanity checks."""

from __future__ import annotations

import numpy as np

from udcg.io.contexts.jsonl import Context, Passage


def u_shaped_weights(k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(alpha, beta)``: helpful weights high at both ends of the prompt (2 mid, 3.5 at the
    ends), distracting weights -1 everywhere.

    Examples:
        >>> alpha, beta = u_shaped_weights(3)
        >>> alpha.tolist(), beta.tolist()
        ([3.5, 2.0, 3.5], [-1.0, -1.0, -1.0])
    """
    position = np.linspace(-1.0, 1.0, k) if k > 1 else np.zeros(1)
    return 2.0 + 1.5 * position**2, -np.ones(k)


def simulate_arrays(
    n: int, k: int, seed: int = 0, intercept: float = -1.0, p_relevant: float = 0.35
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(relevant, utility, correct)`` drawn with
    ``P(correct) = sigmoid(b + alpha.(rel*u) + beta.((1-rel)*u))`` under
    :func:`u_shaped_weights`; utilities ~ Beta(2, 2).

    Examples:
        >>> relevant, utility, correct = simulate_arrays(n=4, k=3)
        >>> relevant.shape, utility.shape, correct.shape, set(relevant.flat) <= {0.0, 1.0}
        ((4, 3), (4, 3), (4,), True)
    """
    rng = np.random.default_rng(seed)
    alpha, beta = u_shaped_weights(k)
    relevant = (rng.random((n, k)) < p_relevant).astype(np.float64)
    utility = rng.beta(2.0, 2.0, size=(n, k))
    logits = intercept + (relevant * utility) @ alpha + ((1 - relevant) * utility) @ beta
    correct = (rng.random(n) < 1.0 / (1.0 + np.exp(-logits))).astype(np.float64)
    return relevant, utility, correct


def simulate_contexts(
    n_queries: int, k: int, per_query: int = 6, seed: int = 0, judge: str = "sim"
) -> list[Context]:
    """The same model as contexts: ``per_query`` contexts per query, utilities stored as
    ``abstain_prob[judge] = 1 - u`` and correctness as ``outcomes[judge].correct``.

    Examples:
        >>> contexts = simulate_contexts(n_queries=2, k=3, per_query=2)
        >>> [(c.qid, c.run, len(c.passages)) for c in contexts]
        [('q0', 'r0', 3), ('q0', 'r1', 3), ('q1', 'r0', 3), ('q1', 'r1', 3)]
    """
    relevant, utility, correct = simulate_arrays(n_queries * per_query, k, seed)
    contexts = []
    for i in range(n_queries * per_query):
        q, r = divmod(i, per_query)
        passages = [
            Passage(
                doc_id=f"d{q}-{r}-{j}",
                relevant=bool(relevant[i, j]),
                abstain_prob={judge: float(1.0 - utility[i, j])},
            )
            for j in range(k)
        ]
        outcomes = {judge: {"correct": bool(correct[i])}}
        contexts.append(Context(f"q{q}", passages, run=f"r{r}", outcomes=outcomes))
    return contexts
