"""Command-line doors: argument parsing and wiring only; the work is done by the library.

``udcg COMMAND ...`` (or ``python -m udcg COMMAND ...``) dispatches to one module per command
(:mod:`udcg.cli.main`); ``train.py`` and ``evaluate.py`` are the Hydra doors, with their shared
Hydra wiring in :mod:`udcg.cli.hydra_config`.
"""
