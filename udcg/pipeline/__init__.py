"""Pipelines built on the layers below: the benchmark behind ``evaluate.py`` / ``udcg benchmark``
(datasets, cached stages, scoring, correlation, report, sweep summary, the order study),
training behind ``train.py``, the ``udcg report`` journey, and the Python path of the top level
(:func:`~udcg.pipeline.label.label`, :func:`~udcg.pipeline.context_scores.score_contexts`,
:func:`~udcg.pipeline.training.fit_theta`)."""
