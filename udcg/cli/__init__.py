"""Command-line doors: argument parsing and wiring only; the work is done by the library.

``udcg COMMAND ...`` (or ``python -m udcg COMMAND ...``) dispatches to one module per command
(:mod:`udcg.cli.main`). ``udcg train`` and ``udcg benchmark`` (and the repository's ``train.py``
and ``evaluate.py``, thin wrappers of the same functions) are the Hydra doors
(:mod:`udcg.cli.train`, :mod:`udcg.cli.benchmark`), with their shared Hydra wiring and the
config location (``udcg/conf``) in :mod:`udcg.cli.hydra_config`.
"""
