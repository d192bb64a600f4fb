"""Every reader, fed damaged versions of valid inputs, returns or raises a located
UDCGInputError, within a time limit; an undamaged input reads without error.

The generators live in ``bench/fuzz_readers.py``, which runs them with a large budget
(``python bench/fuzz_readers.py --per-reader 10000``); here each reader gets a small,
derandomised budget so the run is the same on every machine.
"""

from __future__ import annotations

import pytest
from hypothesis import given

from tests.bench_scripts import load

fuzz = load("fuzz_readers")

EXAMPLES = 150
TIME_LIMIT = 10.0  # seconds per call: generous for a loaded CI machine


@pytest.mark.parametrize("name", list(fuzz.READERS))
def test_reader_survives_damaged_input(name: str) -> None:
    reader = fuzz.READERS[name]
    reader.setup()
    with fuzz.scratch() as fresh:

        @fuzz.fuzz_settings(EXAMPLES, derandomize=True)
        @given(fuzz.cases(reader))
        def check(case: fuzz.Case) -> None:
            outcome = fuzz.run_case(reader, case, fresh(), TIME_LIMIT)
            assert outcome.kind in ("ok", "input_error"), f"{outcome.kind}: {outcome.detail}"

        check()


@pytest.mark.parametrize("name", ["contexts", "contexts_score"])
def test_contexts_batches_survive_damage(name: str) -> None:
    """The bench's way for contexts (ten damaged inputs per drawn file), on a small sample."""
    reader = fuzz.READERS[name]
    with fuzz.scratch() as fresh:

        @fuzz.fuzz_settings(20, derandomize=True)
        @given(fuzz.case_batches(reader, 10))
        def check(cases: list[fuzz.Case]) -> None:
            for case in cases:
                outcome = fuzz.run_case(reader, case, fresh(), TIME_LIMIT)
                assert outcome.kind in ("ok", "input_error"), f"{outcome.kind}: {outcome.detail}"

        check()
