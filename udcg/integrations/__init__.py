"""udcg's measures inside the field's tools: :mod:`udcg.integrations.ir_measures` (ir_measures,
and PyTerrier's ``pt.Experiment``, which takes ir_measures measures) and
:mod:`udcg.integrations.pyterrier` (judge utilities as a PyTerrier transformer). Neither is
imported by ``import udcg``."""
