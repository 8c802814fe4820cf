"""PodDisruptionBudgets: how many of a set of victims an eviction would over-disrupt."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from shoal.api.podinfo import PodInfo
from shoal.api.queue import PodDisruptionBudget
from shoal.api.selectors import label_selector_matches
from shoal.cache.cluster import PlacedPods
from shoal.framework.handle import Handle
from shoal.preemption.evaluator import no_violations

__all__ = ["BudgetChecker", "DisruptionBudgets"]

SERVICE_KEY = "shoal.pdbs"


class DisruptionBudgets:
    def __init__(self) -> None:
        self.budgets: dict[str, PodDisruptionBudget] = {}

    @classmethod
    def of(cls, handle: Handle) -> DisruptionBudgets:
        found = handle.services.get(SERVICE_KEY)
        if found is None:
            found = handle.services[SERVICE_KEY] = cls()
        assert isinstance(found, DisruptionBudgets)
        return found

    def add(self, pdb: PodDisruptionBudget) -> None:
        meta = pdb.metadata
        self.budgets[f"{meta.namespace or 'default'}/{meta.name}"] = pdb

    def remove(self, namespace: str, name: str) -> None:
        self.budgets.pop(f"{namespace}/{name}", None)

    def violations(self, victims: Iterable[PodInfo], cluster: PlacedPods) -> int:
        """Victims beyond what the budgets allow (kube counts these per candidate)."""
        return self.checker(cluster)(victims)

    def checker(self, cluster: PlacedPods) -> Callable[[Iterable[PodInfo]], int]:
        """`violations` with the budgets' healthy counts taken once, for a victim search
        that asks about many sets against the same cluster."""
        budgets = [p for p in self.budgets.values() if p.spec.selector is not None]
        if not budgets:
            return no_violations
        return BudgetChecker(budgets, cluster)


class BudgetChecker:
    """Victims beyond what `budgets` allow, with the budgets' healthy counts taken when
    it is made (before any tentative eviction of the search). `namespaces` are where the
    budgets select pods: victims elsewhere never violate one (the columnar victim search
    reads it to stay columnar when no candidate victim is there)."""

    def __init__(self, budgets: list[PodDisruptionBudget], cluster: PlacedPods) -> None:
        self.budgets = budgets
        self.namespaces = frozenset(p.metadata.namespace or "default" for p in budgets)
        self.allowed: list[int] = []
        placed = cluster.placed.values()
        for pdb in budgets:
            ns = pdb.metadata.namespace or "default"
            selector = pdb.spec.selector
            assert selector is not None
            healthy = sum(
                1
                for r in placed
                if r.pod.namespace == ns and label_selector_matches(selector, r.pod.labels)
            )
            self.allowed.append(_allowed(pdb, healthy))

    def __call__(self, victims: Iterable[PodInfo]) -> int:
        victims = list(victims)
        total = 0
        for pdb, limit in zip(self.budgets, self.allowed, strict=True):
            ns = pdb.metadata.namespace or "default"
            selector = pdb.spec.selector
            assert selector is not None
            hit = sum(
                1
                for v in victims
                if v.namespace == ns and label_selector_matches(selector, v.labels)
            )
            total += max(0, hit - limit)
        return total


def _allowed(pdb: PodDisruptionBudget, healthy: int) -> int:
    spec = pdb.spec
    if spec.min_available is not None:
        minimum = _scaled(spec.min_available, healthy, up=True)
        return max(0, healthy - minimum)
    if spec.max_unavailable is not None:
        return max(0, _scaled(spec.max_unavailable, healthy, up=False))
    return healthy


def _scaled(value: int | str, total: int, up: bool) -> int:
    if isinstance(value, int):
        return value
    pct = float(value.rstrip("%")) / 100
    return math.ceil(pct * total) if up else math.floor(pct * total)
