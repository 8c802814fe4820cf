"""Preemption: victim search through the framework, and disruption budgets."""

from shoal.preemption.budgets import DisruptionBudgets
from shoal.preemption.evaluator import Candidate, VictimSearch

__all__ = ["Candidate", "DisruptionBudgets", "VictimSearch"]
