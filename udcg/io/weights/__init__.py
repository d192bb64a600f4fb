"""UDCG-theta weight files and their model cards."""
