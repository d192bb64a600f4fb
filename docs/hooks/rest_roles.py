"""Griffe extension for the API pages: reST roles in docstrings (``:func:`udcg.evaluate```,
``:class:`~udcg.judge.cached.CachedJudge```) become Markdown code spans (`udcg.evaluate`), so
mkdocstrings does not print the role's name."""

from __future__ import annotations

import re
from typing import Any

import griffe

#: a Sphinx cross-reference role and its target (``~`` keeps only the last name in Sphinx)
ROLE = re.compile(r":(?:func|class|meth|mod|data|attr|exc|obj):`~?([^`]+)`")


class ReSTRoles(griffe.Extension):
    """Rewrites the roles of every docstring as it is loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"`\1`", obj.docstring.value)
