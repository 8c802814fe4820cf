"""Reproducible experiments built on the scheduler (e.g. the openb GPU-sharing study)."""
