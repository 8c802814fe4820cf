"""Shoal: a Kubernetes scheduler for AI, HPC and big-data workloads."""

__version__ = "0.1.0"
