"""VolumeZone (PreFilter, Filter): a bound PersistentVolume's zone and region labels
(`topology.kubernetes.io/zone`, `.../region` and their `failure-domain.beta` forms) must
match the node's, as kube-scheduler's volumezone plugin decides it.

A label value may list several zones joined by `__`. A node without any zone or region
label passes (kube's fast path); a node that has some but not the volume's key, or
another value, fails with "node(s) had no available volume zone". Unbound claims of a
`WaitForFirstConsumer` class are skipped (VolumeBinding places them); other unbound
claims, missing claims, classes and volumes keep the pod pending with kube's messages.

The verdict for every node is one `np.isin` per (volume, label key) over the label
column, computed in PreFilter; Filter indexes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.api.volumes import ZONE_LABELS, claim_class, label_zones, pod_claims
from shoal.cache.labels import MISSING
from shoal.cache.volumes import VolumeCatalog
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.status import Code, Status
from shoal.framework.types import (
    ActionType,
    Candidates,
    ClusterEvent,
    EventResource,
    FilterResult,
    PreFilterResult,
)

__all__ = ["NAME", "REASON_CONFLICT", "VolumeZone"]

NAME = "VolumeZone"
REASON_CONFLICT = "node(s) had no available volume zone"
_UNRESOLVABLE = Code.UNSCHEDULABLE_AND_UNRESOLVABLE


class VolumeZone:
    name = NAME
    # Optimistic workers may decide with it: the pods they take (no claims) pass it
    # on any node (shoal.scheduler.optimistic).
    row_local = True
    # Its verdict on a node does not depend on the pods there.
    preemption_local = True

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.catalog = VolumeCatalog.of(handle)
        self._cache: dict[tuple[object, ...], NDArray[np.bool_]] = {}
        self._cache_key = (-1, -1)

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        if not pod.pod.spec.volumes:
            return None, Status(Code.SKIP)
        catalog = self.catalog
        wanted: list[tuple[str, set[str]]] = []  # (label key, allowed values)
        for use in pod_claims(pod.pod):
            if use.ephemeral:
                continue  # kube's VolumeZone looks at persistentVolumeClaim volumes only
            claim = catalog.claim(use.key)
            if claim is None:
                return None, Status(_UNRESOLVABLE, f'persistentvolumeclaim "{use.name}" not found')
            volume_name = claim.spec.volume_name
            if not volume_name:
                class_name = claim_class(claim)
                if not class_name:
                    return None, Status(
                        _UNRESOLVABLE, "PersistentVolumeClaim had no pv name and storageClass name"
                    )
                storage_class = catalog.classes.get(class_name)
                if storage_class is None:
                    return None, Status(
                        _UNRESOLVABLE, f'storageclass.storage.k8s.io "{class_name}" not found'
                    )
                if storage_class.volume_binding_mode == "WaitForFirstConsumer":
                    continue
                return None, Status(_UNRESOLVABLE, "PersistentVolume had no name")
            volume = catalog.volumes.get(volume_name)
            if volume is None:
                return None, Status(_UNRESOLVABLE, f'persistentvolume "{volume_name}" not found')
            for key, value in volume.metadata.labels.items():
                if key in ZONE_LABELS:
                    wanted.append((key, label_zones(value)))
        if not wanted:
            return None, Status(Code.SKIP)
        state.write(NAME, self._mask(wanted))
        return None, Status()

    def _mask(self, wanted: list[tuple[str, set[str]]]) -> NDArray[np.bool_]:
        """Rows that pass, cached per set of (label, zones) until nodes change: pods whose
        volumes are in the same zones share one mask."""
        snap = self.handle.snapshot
        n = snap.n
        version = self.handle.snapshot.nodes_version
        if self._cache_key != (version, n):
            self._cache.clear()
            self._cache_key = (version, n)
        key = tuple(sorted((k, tuple(sorted(v))) for k, v in wanted))
        found = self._cache.get(key)
        if found is not None:
            return found
        labels = snap.labels
        everywhere = slice(0, n)
        unzoned = self._cache.get(())
        if unzoned is None:
            unzoned = np.ones(n, dtype=bool)
            for label in ZONE_LABELS:
                unzoned &= labels.column(label, everywhere) == MISSING
            self._cache[()] = unzoned
        passed = np.ones(n, dtype=bool)
        for label, values in wanted:
            codes = labels.value_codes(label, sorted(values))
            column = labels.column(label, everywhere)
            inside = np.zeros(n, dtype=bool)
            for code in codes:
                inside |= column == code
            passed &= inside
        result: NDArray[np.bool_] = passed | unzoned
        self._cache[key] = result
        return result

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        mask: NDArray[np.bool_] = state.read(NAME)
        return FilterResult.from_mask(mask[nodes.index], REASON_CONFLICT, _UNRESOLVABLE)

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return [
            ClusterEvent(EventResource.STORAGE_CLASS, ActionType.ADD),
            ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
            ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD | ActionType.UPDATE),
            ClusterEvent(EventResource.PERSISTENT_VOLUME, ActionType.ADD | ActionType.UPDATE),
        ]

    @classmethod
    def new(cls, args: Any, handle: Handle) -> VolumeZone:
        return cls(handle)
