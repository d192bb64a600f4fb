"""Joins: runs, qrels and utilities joined with passages into contexts."""
