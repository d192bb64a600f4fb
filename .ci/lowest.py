"""Print ``name==floor`` for each distribution named on the command line, or with ``--extras
A,B`` for the base install and those extras: the lowest version pyproject.toml allows (its
``>=`` bound, the same in every group that names it), for CI's runs on the lowest supported
versions."""

import re
import sys
import tomllib
from pathlib import Path

project = tomllib.loads(Path(__file__).parent.parent.joinpath("pyproject.toml").read_text())
base, extras = project["project"]["dependencies"], project["project"]["optional-dependencies"]
requirements = [r for group in [base, *extras.values()] for r in group]
names = sys.argv[1:]
if names[:1] == ["--extras"]:
    groups = [base, *(extras[e] for e in names[1].split(","))]
    names = list(dict.fromkeys(re.match(r"[\w.-]+", r)[0] for group in groups for r in group))
for name in names:
    floors = {m[1] for r in requirements if (m := re.fullmatch(rf"{name}>=([\w.]+)", r))}
    if len(floors) != 1:
        sys.exit(f"lowest.py: {name}: expected one '>=' bound in pyproject.toml, found {floors}")
    print(f"{name}=={floors.pop()}")
