"""Library calls leave the interpreter as they found it: ``import udcg``, importing the
command modules, ``udcg.evaluate`` (files and dicts), ``udcg.compare``, contexts read and
scored, and a command run in-process keep ``sys.meta_path``, ``sys.path``, the warnings
filters, the garbage collector, ``os.environ``, Arrow's default memory pool and numpy's
huge-page advice as they were, also while a call runs. Only the processes that the entry
points start make their settings (docs/cli.md, "Process settings").

Each check runs in a fresh interpreter, where nothing has been imported or set yet."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from udcg._threads import _BLAS_THREAD_VARIABLES

REPO = Path(__file__).resolve().parents[1]

_STATE = r'''
import gc, json, os, sys, warnings


def light():
    """What a bare interpreter has: nothing here imports numpy or Arrow."""
    return {
        "meta_path": [f"{type(f).__qualname__}@{id(f)}" for f in sys.meta_path],
        "path": list(sys.path),
        "warnings": [repr(f) for f in warnings.filters],
        "gc": [gc.get_freeze_count(), gc.isenabled(), gc.get_threshold()],
        "environ": dict(os.environ),
    }


def full():
    """``light()``, Arrow's default pool and numpy's huge-page advice (numpy's private
    switch: set to True, which returns the setting, then set back)."""
    import numpy
    import pyarrow

    try:
        from numpy._core.multiarray import _set_madvise_hugepage as switch
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import _set_madvise_hugepage as switch
    advice = switch(True)
    switch(advice)
    return {
        **light(),
        "arrow_pool": pyarrow.default_memory_pool().backend_name,
        "numpy_huge_pages": bool(advice),
    }
'''

_LIBRARY = (
    _STATE
    + r'''
import contextlib, io
from pathlib import Path

checks = {}
if sys.argv[1] == "bare":  # nothing imported: the environment as numpy would read it
    before = light()
    import udcg
    import udcg.cli.trec
    import udcg.cli.main
    checks["import udcg, udcg.cli.trec, udcg.cli.main"] = (before, light())
    print(json.dumps(checks))
    sys.exit()
# the user's libraries, imported before udcg: their imports add warnings filters of their own
import numpy, pandas, pyarrow, scipy.stats

outside = full()
import udcg
import udcg.cli.trec
import udcg.cli.main
checks["import udcg, udcg.cli.trec, udcg.cli.main"] = (outside, full())

seen = []


class Recording(dict):
    """Qrels that record the process's state when the evaluation reads them."""

    def items(self):
        seen.append(full())
        return super().items()


qrels = {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 2}, "q3": {"d1": 1}}
run = {"q1": {"d1": 2.0, "d2": 1.0}, "q2": {"d3": 0.5, "d1": 0.7}, "q3": {"d2": 1.0, "d1": 0.2}}
other = {q: {d: -s for d, s in docs.items()} for q, docs in run.items()}
folder = Path(sys.argv[2])
qrels_file, run_file = folder / "qrels.trec", folder / "run.trec"
qrels_file.write_text("".join(f"{q} 0 {d} {g}\n" for q, ds in qrels.items() for d, g in ds.items()))
run_file.write_text(
    "".join(f"{q} Q0 {d} 0 {s} t\n" for q, ds in run.items() for d, s in ds.items())
)
contexts_file = folder / "contexts.jsonl"
measures = ["nDCG@10", "AP", "RR", "P@1"]


def contexts_round_trip():
    udcg.write_contexts(contexts_file, udcg.demo_contexts())
    return list(udcg.read_contexts(contexts_file))


calls = {
    "udcg.evaluate(files)": lambda: udcg.evaluate(qrels_file, run_file, measures),
    "udcg.evaluate(dicts)": lambda: udcg.evaluate(Recording(qrels), run, measures),
    "udcg.compare": lambda: udcg.compare(qrels, {"a": run, "b": other}, measures),
    "udcg.write_contexts, read_contexts": contexts_round_trip,
    "udcg.score_contexts": lambda: udcg.score_contexts(udcg.demo_contexts()),
    "udcg.cli.main.main(['trec', ...])": lambda: udcg.cli.main.main(
        ["trec", str(qrels_file), str(run_file), "-m", "AP"]
    ),
    "udcg.cli.trec.main([...])": lambda: udcg.cli.trec.main([str(qrels_file), str(run_file)]),
}
for name, call in calls.items():
    with contextlib.redirect_stdout(io.StringIO()):
        call()
    checks[name] = (outside, full())
checks["udcg.evaluate(dicts), while it runs"] = (outside, seen[0])
print(json.dumps(checks))
'''
)


def _python(code: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _differences(before: dict, after: dict) -> dict:
    """The entries of ``after`` that differ from ``before`` (environment: the variables)."""
    changed = {k: after[k] for k in before if k != "environ" and before[k] != after[k]}
    env_before, env_after = before["environ"], after["environ"]
    variables = {
        k for k in env_before.keys() | env_after.keys() if env_before.get(k) != env_after.get(k)
    }
    if variables:
        changed["environ"] = {k: env_after.get(k) for k in sorted(variables)}
    return changed


def _changes(checks: dict) -> dict:
    changes = {name: _differences(*pair) for name, pair in checks.items()}
    return {name: change for name, change in changes.items() if change}


def test_imports_into_a_bare_interpreter_change_nothing_but_warnings_filters() -> None:
    (check,) = json.loads(_python(_LIBRARY, "bare").splitlines()[-1]).values()
    changes = _differences(*check)
    changes.pop("warnings", None)  # numpy's import adds filters (the other test checks ours)
    assert changes == {}


def test_library_calls_leave_the_process_as_they_found_it(tmp_path: Path) -> None:
    checks = json.loads(
        _python(_LIBRARY, "with the user's libraries", str(tmp_path)).splitlines()[-1]
    )
    assert len(checks) == 9
    assert _changes(checks) == {}


_ENTRY = (
    _STATE
    + r"""
import atexit, runpy
outside = light()
atexit.register(lambda: print(json.dumps([outside, light()])))
sys.argv = sys.argv[1:]
if sys.argv[0] == "udcg":
    from udcg.cli.main import main
    sys.exit(main())
runpy.run_module("udcg.trec", run_name="__main__", alter_sys=True)
"""
)


def test_the_entry_points_keep_their_process_settings(examples: Path) -> None:
    files = [str(examples / "trec" / "qrels.trec"), str(examples / "trec" / "run.trec")]
    for entry in (["udcg", "trec", *files], ["udcg.trec", *files]):
        outside, inside = json.loads(_python(_ENTRY, *entry).splitlines()[-1])
        assert outside["gc"][0] == 0 and inside["gc"][0] > 0, entry  # imported modules frozen
        blas_set = any(outside["environ"].get(v) for v in _BLAS_THREAD_VARIABLES)
        expected = {} if blas_set else {"OPENBLAS_NUM_THREADS": "1"}
        assert _differences(outside, inside).get("environ", {}) == expected, entry
