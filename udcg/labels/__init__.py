"""Annotation steps built on the judge: utilities, relevance, end-to-end outcomes and Q-CARE
labels, written into contexts."""
