"""The evaluation pipeline (``evaluate.py``): datasets, cached stages, scoring, correlation,
report and the cross-retriever sweep summary."""
