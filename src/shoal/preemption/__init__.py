"""Preemption building blocks shared by DefaultPreemption and queue reclaim: minimal
victim sets per node and PodDisruptionBudget accounting. No scheduler imports here, so
plugins can use it without cycles."""

from shoal.preemption.budgets import DisruptionBudgets
from shoal.preemption.victims import Victims, find_victims

__all__ = ["DisruptionBudgets", "Victims", "find_victims"]
