"""Every reader, fed damaged versions of valid inputs, returns or raises a located
UDCGInputError, within a time limit; an undamaged input reads without error.

The generators live in ``bench/fuzz_readers.py``, which runs them with a large budget
(``python bench/fuzz_readers.py --per-reader 10000``); here each reader gets a small,
derandomised budget so the run is the same on every machine.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from hypothesis import given

_BENCH = Path(__file__).resolve().parents[2] / "bench" / "fuzz_readers.py"
_SPEC = importlib.util.spec_from_file_location("fuzz_readers", _BENCH)
fuzz = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault(_SPEC.name, fuzz)  # dataclasses look their module up there
_SPEC.loader.exec_module(fuzz)

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
