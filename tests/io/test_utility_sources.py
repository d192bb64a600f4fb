"""The utility-source registry: fields, formulas and errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage, read_contexts
from udcg.io.joins.utility_sources import DEFAULT_SOURCE, SOURCES, get_source


def test_each_source_names_its_field_step_and_formula() -> None:
    assert DEFAULT_SOURCE == "abstention"
    abstention, likelihood = get_source("abstention"), get_source("answer_likelihood")
    assert (abstention.field, abstention.step, abstention.needs_answers) == (
        "abstain_prob",
        "abstain",
        False,
    )
    assert (likelihood.field, likelihood.step, likelihood.needs_answers) == (
        "answer_prob",
        "answer_likelihood",
        True,
    )
    p = np.array([0.0, 0.25, 1.0])
    np.testing.assert_array_equal(abstention.from_probs(p), [1.0, 0.75, 0.0])
    np.testing.assert_array_equal(likelihood.from_probs(p), p)
    assert likelihood.from_probs(p) is not p  # a copy: callers may modify u
    from udcg.labels.annotate import STEPS

    assert {s.step for s in SOURCES.values()} <= set(STEPS)


def test_unknown_source_lists_the_known_ones() -> None:
    with pytest.raises(UDCGInputError, match="unknown utility source 'x'; known: abstention, "):
        get_source("x")


def test_utilities_read_the_sources_field_and_name_what_is_missing(tmp_path: Path) -> None:
    both = {"abstain_prob": {"j": 0.2}, "answer_prob": {"j": 0.9}}
    lines = [
        {"qid": "a", "passages": [both, both]},
        {"qid": "b", "passages": [both, {"abstain_prob": {"j": 0.5}}]},
    ]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    contexts = list(read_contexts(path))
    u = get_source("abstention").utilities(contexts, "j")
    np.testing.assert_allclose(np.concatenate(u), [0.8, 0.8, 0.8, 0.5])
    source = get_source("answer_likelihood")
    with pytest.raises(UDCGInputError) as err:
        source.utilities(contexts, "j")
    assert str(err.value).startswith(f"{path}:2: field 'passages[1].answer_prob.j'")
    np.testing.assert_allclose(source.passage_utilities(contexts[0], "j"), [0.9, 0.9])
    assert source.passage_utilities(contexts[1], "j") is None
    assert source.has(contexts[1].passages[0], "j") and not source.has(contexts[1].passages[1], "j")
    assert get_source("abstention").passage_utilities(Context("q", [Passage()]), "j") is None
