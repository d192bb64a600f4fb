"""File formats: TREC runs and qrels, passage collections, topics, reference JSON, interop."""
