"""StorageCapacityIndex: where a claim's volume may be provisioned, by CSIStorageCapacity.

kube-scheduler's VolumeBinding (`hasEnoughCapacity` in its binder) checks storage
capacity for a claim it provisions when the class's provisioner is a CSIDriver with
`storageCapacity: true`: the node must be selected by the `nodeTopology` of some
CSIStorageCapacity of the claim's class whose `maximumVolumeSize` (else `capacity`) is at
least the claim's `storage` request. A claim without a storage request, or a
provisioner without such a CSIDriver, is not checked. A CSIStorageCapacity without
`nodeTopology` reaches no node. Capacity is what the driver last published: kube does
not subtract the volumes it has just asked for, and neither does this.

Kube walks every CSIStorageCapacity for every node. Here each object is a slot in numpy
columns (class, limit, and for the common `<label> In [value]` selector its label and
value), kept up to date from the catalog's log of changed objects, so an update costs
one slot. Drivers of local storage (TopoLVM, local-path provisioners) publish one object
per node selecting `<label>: <node's value>`: a query finds the slots of the class with
room by vector operations and turns them into rows with one `isin` per label key. Other
selectors get a mask each, cached until the nodes change. Answers are cached per
(class, size) until the capacities or the nodes change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from shoal.api.selectors import SelectorKey, selector_key
from shoal.api.volumes import STORAGE, CSIStorageCapacity, PersistentVolumeClaim, StorageClass
from shoal.cache.change_log import LogReader
from shoal.cache.snapshot import Snapshot

if TYPE_CHECKING:
    from shoal.cache.volumes import VolumeCatalog

__all__ = ["StorageCapacityIndex"]

_GENERAL = -1  # label column of a slot whose selector is not one `key In [value]`


class StorageCapacityIndex:
    def __init__(self, catalog: VolumeCatalog, nodes: Snapshot) -> None:
        self.catalog = catalog
        self.nodes = nodes
        self._reader = LogReader()
        self._reset()
        # (class, size) -> rows; valid for `_key`.
        self._answers: dict[tuple[str, int], NDArray[np.bool_]] = {}
        self._selector_masks: dict[SelectorKey, NDArray[np.bool_]] = {}
        self._key: tuple[int, int, int] = (-1, -1, -1)

    def _reset(self) -> None:
        size = 64
        self.slot_of: dict[str, int] = {}
        self._free: list[int] = []
        self._used = 0
        self.cls = np.full(size, -1, dtype=np.int32)  # -1: empty, or reaches nothing
        self.limit = np.zeros(size, dtype=np.int64)
        self.label = np.full(size, _GENERAL, dtype=np.int32)
        self.value: NDArray[np.object_] = np.full(size, "", dtype=object)
        self._general: dict[int, SelectorKey] = {}
        self._classes: dict[str, int] = {}
        self._labels: dict[str, int] = {}
        self._label_names: list[str] = []

    def checked(self, claim: PersistentVolumeClaim, storage_class: StorageClass) -> bool:
        """Does kube check capacity for this claim (a storage request, and a CSIDriver
        with `storageCapacity: true` for the provisioner)?"""
        return STORAGE in claim.spec.resources.requests and self.catalog.tracks_capacity(
            storage_class.provisioner
        )

    def rows(self, claim: PersistentVolumeClaim, storage_class: StorageClass) -> NDArray[np.bool_]:
        """Rows 0..n-1 with enough capacity for the claim (call only when `checked`)."""
        n = self.nodes.n
        key = (self.catalog.capacity_version, self.nodes.nodes_version, n)
        if key != self._key:
            self._sync()
            if key[1:] != self._key[1:]:
                self._selector_masks.clear()
            self._answers.clear()
            self._key = key
        query = (storage_class.metadata.name, claim.request)
        found = self._answers.get(query)
        if found is None:
            found = self._answer(query[0], query[1], n)
            self._answers[query] = found
        return found

    # ---- following the catalog ------------------------------------------------------

    def _sync(self) -> None:
        rebuild, keys = self._reader.read(self.catalog.capacity_changes, self.catalog.capacities)
        if rebuild:
            self._reset()
        for key in keys:
            self._update(key)

    def _update(self, key: str) -> None:
        capacity = self.catalog.capacities.get(key)
        slot = self.slot_of.get(key)
        if capacity is None:
            if slot is not None:
                self._clear(slot)
                del self.slot_of[key]
                self._free.append(slot)
            return
        if slot is None:
            slot = self._free.pop() if self._free else self._used
            if slot == self._used:
                self._used += 1
                if slot >= len(self.cls):
                    self._grow(2 * len(self.cls))
            self.slot_of[key] = slot
        self._clear(slot)
        self._fill(slot, capacity)

    def _clear(self, slot: int) -> None:
        self.cls[slot] = -1
        self.label[slot] = _GENERAL
        self.value[slot] = ""
        self._general.pop(slot, None)

    def _fill(self, slot: int, capacity: CSIStorageCapacity) -> None:
        limit = capacity.limit
        if limit is None or capacity.node_topology is None:
            return  # kube: no limit is never enough; no topology reaches no node
        self.cls[slot] = self._classes.setdefault(capacity.storage_class_name, len(self._classes))
        self.limit[slot] = limit
        selector = selector_key(capacity.node_topology)
        if selector is not None and len(selector) == 1 and selector[0][1] == "In":
            name, _, values = selector[0]
            if len(values) == 1:
                label = self._labels.get(name)
                if label is None:
                    label = self._labels[name] = len(self._label_names)
                    self._label_names.append(name)
                self.label[slot] = label
                self.value[slot] = values[0]
                return
        self._general[slot] = selector

    def _grow(self, size: int) -> None:
        old = len(self.cls)
        self.cls = np.concatenate([self.cls, np.full(size - old, -1, dtype=np.int32)])
        self.limit = np.concatenate([self.limit, np.zeros(size - old, dtype=np.int64)])
        self.label = np.concatenate([self.label, np.full(size - old, _GENERAL, dtype=np.int32)])
        self.value = np.concatenate([self.value, np.full(size - old, "", dtype=object)])

    # ---- answering ------------------------------------------------------------------

    def _answer(self, class_name: str, size: int, n: int) -> NDArray[np.bool_]:
        mask = np.zeros(n, dtype=bool)
        cls = self._classes.get(class_name)
        if cls is None:
            return mask
        used = slice(0, self._used)
        roomy = (self.cls[used] == cls) & (self.limit[used] >= size)
        if not roomy.any():
            return mask
        labels = self.nodes.labels
        slots = np.flatnonzero(roomy)
        label_of = self.label[slots]
        for label in np.unique(label_of).tolist():
            picked = slots[label_of == label]
            if label == _GENERAL:
                for slot in picked.tolist():
                    mask |= self._selector_mask(self._general[slot], n)
                continue
            name = self._label_names[label]
            codes = labels.value_codes(name, self.value[picked].tolist())
            if codes:
                mask |= np.isin(labels.column(name, slice(0, n)), codes)
        return mask

    def _selector_mask(self, selector: SelectorKey, n: int) -> NDArray[np.bool_]:
        found = self._selector_masks.get(selector)
        if found is None:
            found = self.nodes.labels.selector_mask(selector, n)
            self._selector_masks[selector] = found
        return found
