"""The queue tree: validated structure plus per-queue quotas as dense arrays.

A tree is built from a complete set of Queue objects and validated as a whole; an
invalid set is rejected with every problem named (object, field, fix) and the previous
tree stays in force, so a bad edit is never half-applied. Quotas live in arrays indexed
[queue, resource] over the resources that any queue names, so admission checks along a
path are a few vector operations.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from shoal.api.queue import DEFAULT_QUEUE, ElasticQuota, Queue, QueueOrdering

__all__ = ["UNLIMITED", "QueueDef", "QueueTree", "TreeError"]

UNLIMITED = np.iinfo(np.int64).max // 4


class TreeError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True)
class QueueDef:
    name: str
    parent: str = ""
    weight: int = 1
    guaranteed: dict[str, int] = field(default_factory=dict)
    maximum: dict[str, int] | None = None
    reclaimable: bool = True
    priority: int = 0
    ordering: QueueOrdering = "Priority"
    pools: tuple[str, ...] = ()
    source: str = "Queue"

    @classmethod
    def from_queue(cls, q: Queue) -> QueueDef:
        spec = q.spec
        return cls(
            name=q.metadata.name,
            parent=spec.parent,
            weight=spec.weight,
            guaranteed=q.guaranteed(),
            maximum=q.maximum(),
            reclaimable=spec.reclaimable,
            priority=spec.priority,
            ordering=spec.ordering,
            pools=tuple(spec.pools),
        )

    @classmethod
    def from_elastic_quota(cls, eq: ElasticQuota) -> QueueDef:
        from shoal.api.resources import parse_resource_list

        ns = eq.metadata.namespace or "default"
        return cls(
            name=ns,
            guaranteed=parse_resource_list(eq.spec.min),
            maximum=parse_resource_list(eq.spec.max) or None,
            source="ElasticQuota",
        )


class QueueTree:
    """Immutable once built. Index 0 is the virtual root (the cluster)."""

    def __init__(self, defs: Iterable[QueueDef], default_queue: str = DEFAULT_QUEUE) -> None:
        defs = list(defs)
        if not any(d.name == default_queue for d in defs):
            defs.append(QueueDef(name=default_queue, source="default"))
        problems = _validate(defs)
        if problems:
            raise TreeError(problems)
        self.default_queue = default_queue
        self.defs: dict[str, QueueDef] = {d.name: d for d in defs}
        self.names: list[str] = ["<root>", *sorted(self.defs)]
        self.index: dict[str, int] = {n: i for i, n in enumerate(self.names)}
        self.parent = np.zeros(len(self.names), dtype=np.intp)
        for name, d in self.defs.items():
            self.parent[self.index[name]] = self.index[d.parent] if d.parent else 0
        self.parent[0] = -1
        self.children: dict[int, list[int]] = {i: [] for i in range(len(self.names))}
        for i in range(1, len(self.names)):
            self.children[int(self.parent[i])].append(i)
        self.leaves = frozenset(i for i, kids in self.children.items() if not kids and i)
        # path from a queue up to (excluding) the root
        self.paths: dict[int, NDArray[np.intp]] = {}
        for i in range(1, len(self.names)):
            path = []
            j = i
            while j > 0:
                path.append(j)
                j = int(self.parent[j])
            self.paths[i] = np.array(path, dtype=np.intp)
        self.path_lists: dict[int, list[int]] = {i: p.tolist() for i, p in self.paths.items()}
        # Quota resources, plus the ones fair share always looks at.
        resources: set[str] = {"cpu", "memory", "nvidia.com/gpu"}
        for d in defs:
            resources.update(d.guaranteed)
            resources.update(d.maximum or {})
        self.resources = sorted(resources)
        self.resource_index = {r: k for k, r in enumerate(self.resources)}
        q, r = len(self.names), len(self.resources)
        self.guaranteed = np.zeros((q, r), dtype=np.int64)
        self.maximum = np.full((q, r), UNLIMITED, dtype=np.int64)
        self.weight = np.ones(q, dtype=np.float64)
        for name, d in self.defs.items():
            i = self.index[name]
            self.weight[i] = d.weight
            for res, amount in d.guaranteed.items():
                self.guaranteed[i, self.resource_index[res]] = amount
            for res, amount in (d.maximum or {}).items():
                self.maximum[i, self.resource_index[res]] = amount

        # Resources some queue guarantees or caps (the others are not under quota).
        guaranteed = np.any(self.guaranteed[1:] > 0, axis=0)
        capped = np.any(self.maximum[1:] < UNLIMITED, axis=0)
        self.quota_mask: NDArray[np.bool_] = np.asarray(guaranteed | capped, dtype=bool)
        # Plain lists for the per-pop fair-share walk (faster than numpy scalars).
        self.weight_list: list[float] = self.weight.tolist()
        self.maximum_lists: list[list[int]] = self.maximum.tolist()
        self.guaranteed_lists: list[list[int]] = self.guaranteed.tolist()
        self.quota_list: list[bool] = self.quota_mask.tolist()
        self._vectors: dict[tuple[tuple[str, int], ...], NDArray[np.int64]] = {}
        self.children_list: list[list[int]] = [self.children[i] for i in range(q)]

    def vector(self, requests: dict[str, int]) -> NDArray[np.int64]:
        """A request over the tree's quota resources (others do not count for quota).
        Cached by shape: workloads repeat a few request shapes. Do not mutate."""
        key = tuple(requests.items())
        vec = self._vectors.get(key)
        if vec is None:
            vec = np.array([requests.get(r, 0) for r in self.resources], dtype=np.int64)
            vec.flags.writeable = False
            if len(self._vectors) < 4096:
                self._vectors[key] = vec
        return vec

    def is_leaf(self, name: str) -> bool:
        i = self.index.get(name)
        return i is not None and i in self.leaves

    def has_limits(self) -> bool:
        """Whether any queue sets a maximum (else admission never rejects)."""
        return bool((self.maximum[1:] < UNLIMITED).any())


def _validate(defs: list[QueueDef]) -> list[str]:
    problems: list[str] = []
    by_name: dict[str, QueueDef] = {}
    for d in defs:
        if not d.name:
            problems.append(f"{d.source} <unnamed>: metadata.name is required")
            continue
        if d.name in by_name:
            problems.append(
                f"Queue {d.name}: defined twice (by {by_name[d.name].source} and {d.source})"
            )
        by_name[d.name] = d
    for d in by_name.values():
        where = f"Queue {d.name}"
        if d.parent and d.parent not in by_name:
            problems.append(
                f"{where}: spec.parent {d.parent!r} does not exist; create it or fix the name"
            )
        for res, g in d.guaranteed.items():
            m = (d.maximum or {}).get(res)
            if m is not None and g > m:
                problems.append(
                    f"{where}: spec.guaranteed.{res} ({g}) exceeds spec.max.{res} ({m}); "
                    "lower the guarantee or raise the maximum"
                )
    # cycles
    for d in by_name.values():
        seen = {d.name}
        p = d.parent
        while p and p in by_name:
            if p in seen:
                problems.append(f"Queue {d.name}: spec.parent forms a cycle through {p!r}")
                break
            seen.add(p)
            p = by_name[p].parent
    if any("cycle" in p for p in problems):
        return problems
    # children's guarantees within the parent's
    kids: dict[str, list[QueueDef]] = {}
    for d in by_name.values():
        if d.parent in by_name:
            kids.setdefault(d.parent, []).append(d)
    for parent, children in kids.items():
        pd = by_name[parent]
        total: dict[str, int] = {}
        for c in children:
            for res, g in c.guaranteed.items():
                total[res] = total.get(res, 0) + g
        for res, t in total.items():
            pg = pd.guaranteed.get(res, 0)
            if t > pg:
                problems.append(
                    f"Queue {parent}: children's spec.guaranteed.{res} add up to {t}, more than "
                    f"its own guarantee {pg}; raise the parent's guarantee or lower the children's"
                )
        for c in children:
            for res, m in (c.maximum or {}).items():
                pm = (pd.maximum or {}).get(res)
                if pm is not None and m > pm:
                    problems.append(
                        f"Queue {c.name}: spec.max.{res} ({m}) exceeds its parent {parent}'s "
                        f"max ({pm}); it can never use more than the parent"
                    )
    return problems
