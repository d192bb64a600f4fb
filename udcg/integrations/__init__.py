"""udcg's measures inside the field's tools: :mod:`udcg.integrations.ir_measures` (ir_measures,
and PyTerrier's ``pt.Experiment``, which takes ir_measures measures)."""
