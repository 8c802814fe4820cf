"""PodDisruptionBudgets: how many of a set of victims an eviction would over-disrupt."""

from __future__ import annotations

import math
from collections.abc import Iterable

from shoal.api.podinfo import PodInfo
from shoal.api.queue import PodDisruptionBudget
from shoal.api.selectors import label_selector_matches
from shoal.cache.cluster import ClusterState
from shoal.framework.handle import Handle

__all__ = ["DisruptionBudgets"]

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

    def violations(self, victims: Iterable[PodInfo], cluster: ClusterState) -> int:
        """Victims beyond what the budgets allow (kube counts these per candidate)."""
        victims = list(victims)
        total = 0
        for pdb in self.budgets.values():
            selector = pdb.spec.selector
            if selector is None:
                continue
            ns = pdb.metadata.namespace or "default"
            hit = [
                v
                for v in victims
                if v.namespace == ns and label_selector_matches(selector, v.labels)
            ]
            if not hit:
                continue
            healthy = sum(
                1
                for r in cluster.placed.values()
                if r.pod.namespace == ns and label_selector_matches(selector, r.pod.labels)
            )
            allowed = _allowed(pdb, healthy)
            total += max(0, len(hit) - allowed)
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
