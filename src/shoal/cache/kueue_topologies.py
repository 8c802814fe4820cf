"""Kueue's Topology objects: which levels are coarser than a node label.

A Kueue `Topology` lists a fabric's levels as node labels, highest first
(`spec.levels[].nodeLabel`: block, rack, kubernetes.io/hostname). A pod set that asks
`kueue.x-k8s.io/podset-preferred-topology: rack` is placed, by Kueue's topology-aware
scheduling, in one rack if one holds it, else in one block, and so on up the levels the
Topology lists above rack, else over several domains of the highest. `coarser("rack")`
gives those levels (nearest first) so a gang's preferred levels can be the same.

Several Topologies may list one label (one per ResourceFlavor in Kueue; Shoal does not
read flavors): the first by name that lists it decides what is coarser. Malformed ones
(no levels, an empty `nodeLabel`, a label listed twice) are skipped, each with a problem
naming it and the field (`problems`). Costs: an object changed is checked in
O(its levels); the label -> coarser levels map is rebuilt when next read, in O(all
levels); nothing runs per node or per pod.
"""

from __future__ import annotations

from shoal.api.errors import ManifestError
from shoal.api.hypernode import Topology

__all__ = ["KueueTopologies"]

KIND = "Topology"


def _problem(obj: Topology) -> str:
    """What is wrong with a Topology ("" when nothing), naming the field."""
    name = obj.metadata.name

    def bad(path: str, why: str) -> str:
        return str(ManifestError(KIND, name, path, f"{why}; the Topology is skipped"))

    if not name:
        return bad("metadata.name", "a Topology needs a name")
    if not obj.spec.levels:
        return bad("spec.levels", "lists no levels (give one nodeLabel per level, highest first)")
    first: dict[str, int] = {}
    for i, level in enumerate(obj.spec.levels):
        label = level.node_label.strip()
        if not label:
            return bad(f"spec.levels[{i}].nodeLabel", "is empty (name the node label of the level)")
        if label in first:
            return bad(
                f"spec.levels[{i}].nodeLabel",
                f"{label!r} is listed twice (also spec.levels[{first[label]}].nodeLabel); "
                "each level is a different node label",
            )
        first[label] = i
    return ""


class KueueTopologies:
    """The Topologies of the cluster, and the levels coarser than a label (module
    docstring)."""

    def __init__(self) -> None:
        self._levels: dict[str, tuple[str, ...]] = {}  # well-formed ones: highest first
        self._problems: dict[str, str] = {}
        # label -> the levels above it, nearest first (None: rebuild when read).
        self._coarser: dict[str, tuple[str, ...]] | None = None

    def upsert(self, obj: Topology) -> bool:
        """A Topology created or changed; False when nothing that matters changed (its
        problem, if any, is in `problems`)."""
        name = obj.metadata.name
        problem = _problem(obj)
        levels = () if problem else tuple(level.node_label.strip() for level in obj.spec.levels)
        before = self._levels.get(name)
        if problem:
            self._problems[name] = problem
            self._levels.pop(name, None)
        else:
            self._problems.pop(name, None)
            self._levels[name] = levels
        if before == self._levels.get(name):
            return False
        self._coarser = None
        return True

    def remove(self, name: str) -> bool:
        """A Topology deleted; False when it gave no levels."""
        self._problems.pop(name, None)
        if self._levels.pop(name, None) is None:
            return False
        self._coarser = None
        return True

    def problems(self) -> dict[str, str]:
        """Topology name -> why it is skipped (naming the field)."""
        return dict(self._problems)

    def levels(self) -> dict[str, tuple[str, ...]]:
        """Topology name -> its levels, highest first (the well-formed ones)."""
        return dict(self._levels)

    def coarser(self, label: str) -> tuple[str, ...]:
        """The levels above `label`, nearest first, in the first Topology by name that
        lists it (() when none does, or it is the highest)."""
        if self._coarser is None:
            coarser: dict[str, tuple[str, ...]] = {}
            for name in sorted(self._levels):
                levels = self._levels[name]
                for i, level in enumerate(levels):
                    coarser.setdefault(level, tuple(reversed(levels[:i])))
            self._coarser = coarser
        return self._coarser.get(label, ())
