"""The context model: contexts and passages, their checks, array views and JSONL files."""
