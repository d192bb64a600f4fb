"""The ``README.md`` model card of a UDCG-theta weights folder, rendered from its config.

One template (:data:`TEMPLATE`) with YAML front matter that the Hugging Face Hub reads
(``library_name``, ``license``, ``tags``, ``base_model``: the judge, ``datasets``, ``metrics``
and ``model-index`` results: held-out correlations with their CIs), then a short description,
the compatibility fields, the held-out table and the alpha/beta table. Values in the front
matter are JSON scalars, which YAML reads as written. Card strings in the text are written
with control and format characters escaped (:func:`udcg.validation.printable`), never raw.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from string import Template
from typing import Any

from udcg.validation import printable

__all__ = ["TEMPLATE", "render"]

TEMPLATE = Template(
    """---
library_name: udcg
license: $license
tags:
- udcg
- udcg-theta
- rag
- retrieval-evaluation
base_model: $base_model
datasets: $datasets
metrics:
- $correlation
model-index:
- name: $yaml_name
  results:
$results
---

# $name

UDCG-theta weights for retrieved contexts of exactly k=$k passages: a logistic model over
$n_features positional features (alpha: relevant passages, beta: irrelevant passages) that
predicts whether the generator answers correctly from the context.

```python
from udcg.theta import UDCGTheta

model = UDCGTheta.from_pretrained("PATH_OR_HUB_ID")  # checks the SHA-256 of the weights
```

Apply the weights only to utilities from the same judge, prompt, abstention mode and utility
source; `udcg score --weights`, `evaluate.py theta_weights=` and `UDCGtheta@k` refuse others
unless told `--allow-mismatch FIELD`.

## Compatibility

| field | value |
|---|---|
$compat

## Training data

$data

## Held-out correlations with end-to-end correctness

| metric | $correlation_name | 95% CI |
|---|---|---|
$heldout

## Weights

$figure| position | alpha (helpful) | beta (distracting) |
|---|---|---|
$weights
"""
)


def _yaml(value: Any) -> str:
    """A YAML scalar (JSON is a subset of YAML)."""
    return json.dumps(value)


def _cell(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, float):
        return f"{value:.4f}"
    return printable(str(value).replace("|", "\\|").replace("\n", " "))


def _calibration(value: Any) -> str:
    """``method name=value, ... (N contexts)`` of a card's ``calibration``, or ``none``."""
    if not isinstance(value, Mapping):
        return "none"
    params = value.get("parameters")
    pairs = (
        ", ".join(f"{k}={v:.6g}" for k, v in params.items()) if isinstance(params, Mapping) else ""
    )
    return f"{value.get('method')} {pairs} ({value.get('n_contexts')} contexts)"


def _rows(card: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = card.get("heldout")
    return [r for r in rows if isinstance(r, Mapping)] if isinstance(rows, list) else []


def render(card: Mapping[str, Any], alpha: Sequence[float], beta: Sequence[float]) -> str:
    """The model card of a weights folder whose ``config.json`` is ``card``.

    Examples:
        >>> text = render({"k": 2, "judge_model": "llama3"}, alpha=[1.0, 0.5], beta=[-0.5, -0.25])
        >>> text.splitlines()[0], "# udcg-theta-k2-llama3" in text
        ('---', True)
    """
    k = card.get("k", len(alpha))
    judge = card.get("judge_model")
    correlation = str(card.get("correlation") or "spearman")
    name = str(card.get("name") or f"udcg-theta-k{k}" + (f"-{judge}" if judge else ""))
    rows = _rows(card)
    results = []
    for row in rows:
        value = row.get(correlation)
        if value is None:
            continue
        results.append(
            "  - task: {type: text-retrieval, name: RAG context evaluation}\n"
            f"    metrics:\n    - type: {_yaml(correlation)}\n"
            f"      name: {_yaml(str(row.get('metric')) + ' held-out correlation')}\n"
            f"      value: {_yaml(value)}"
        )
    prompt = card.get("prompt") if isinstance(card.get("prompt"), Mapping) else {}
    serving = card.get("judge_serving")
    compat = {
        "k": k,
        "judge": judge,
        "utility source": card.get("utility"),
        "abstention mode": card.get("abstention_mode"),
        "prompt SHA-256": prompt.get("sha256"),
        "judge serving": json.dumps(serving, sort_keys=True) if serving else None,
        "generator": card.get("generator"),
        "gamma": card.get("gamma"),
        "calibration": _calibration(card.get("calibration")),
        "udcg version": card.get("udcg_version"),
        "weights SHA-256": card.get("weights_sha256"),
    }
    heldout = []
    for row in rows:
        ci95 = row.get("ci95")
        ok = isinstance(ci95, list) and len(ci95) == 2 and None not in ci95
        ci = f"[{_cell(ci95[0])}, {_cell(ci95[1])}]" if ok else "n/a"
        heldout.append(f"| {_cell(row.get('metric'))} | {_cell(row.get(correlation))} | {ci} |")
    dataset = card.get("dataset")
    data = [
        "\n".join(map(printable, str(card.get("training_data_description") or "").splitlines()))
        or "No description given.",
        "",
        f"Fingerprint: `{printable(str(card.get('training_data_fingerprint') or 'unknown'))}`",
    ]
    figure = card.get("figure")
    return TEMPLATE.substitute(
        license=_yaml(card.get("license") or "other"),
        base_model=_yaml(judge),
        datasets=_yaml([dataset] if isinstance(dataset, str) else (dataset or [])),
        correlation=_yaml(correlation),
        name=printable(name),
        yaml_name=_yaml(name),
        correlation_name=printable(correlation),
        results="\n".join(results) or "  - task: {type: text-retrieval}\n    metrics: []",
        k=k,
        n_features=2 * int(k),
        compat="\n".join(f"| {key} | {_cell(v)} |" for key, v in compat.items()),
        data="\n".join(data),
        heldout="\n".join(heldout) or "| (none recorded) | | |",
        figure=f"![alpha and beta by position]({printable(str(figure))})\n\n" if figure else "",
        weights="\n".join(
            f"| {i} | {a:.6g} | {b:.6g} |"
            for i, (a, b) in enumerate(zip(alpha, beta, strict=True), 1)
        ),
    )
