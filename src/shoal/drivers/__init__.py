"""Backends feed the scheduler core and carry out its decisions (simulator, Kubernetes)."""
