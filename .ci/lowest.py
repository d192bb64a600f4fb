"""Print ``name==floor`` for each distribution named on the command line, or with ``--extras
A,B`` for the base install and those extras: the lowest version pyproject.toml allows (its
``>=`` bound; where groups give different bounds, the highest of those considered binds), for
CI's runs on the lowest supported versions."""

import re
import sys
import tomllib
from pathlib import Path

project = tomllib.loads(Path(__file__).parent.parent.joinpath("pyproject.toml").read_text())
base, extras = project["project"]["dependencies"], project["project"]["optional-dependencies"]
groups = [base, *extras.values()]
names = sys.argv[1:]
if names[:1] == ["--extras"]:
    groups = [base, *(extras[e] for e in names[1].split(","))]
    names = list(dict.fromkeys(re.match(r"[\w.-]+", r)[0] for group in groups for r in group))
requirements = [r for group in groups for r in group]
for name in names:
    floors = {m[1] for r in requirements if (m := re.fullmatch(rf"{name}>=([\w.]+)", r))}
    if not floors:
        sys.exit(f"lowest.py: {name}: no '>=' bound in pyproject.toml")
    print(f"{name}=={max(floors, key=lambda v: [int(p) for p in v.split('.')])}")
