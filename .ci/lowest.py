"""Print ``name==floor`` for each distribution named on the command line: the lowest version
pyproject.toml's extras allow (their ``>=`` bound), for CI's run on the lowest supported
versions."""

import re
import sys
from pathlib import Path

import tomllib

project = tomllib.loads(Path(__file__).parent.parent.joinpath("pyproject.toml").read_text())
requirements = [r for group in project["project"]["optional-dependencies"].values() for r in group]
for name in sys.argv[1:]:
    floors = {m[1] for r in requirements if (m := re.fullmatch(rf"{name}>=([\w.]+)", r))}
    if len(floors) != 1:
        sys.exit(f"lowest.py: {name}: expected one '>=' bound in pyproject.toml, found {floors}")
    print(f"{name}=={floors.pop()}")
