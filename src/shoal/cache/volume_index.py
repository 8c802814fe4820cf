"""VolumeIndex: PersistentVolumes as columns, for VolumeBinding's static matching.

kube-scheduler's FindMatchingVolume walks every volume of the claim's class on every
node. Here each volume is a slot in numpy columns (class, capacity, usable, bound,
volume mode, access modes), so the volumes that may serve a claim are found with a few
vector operations per pod, smallest first; where they may be used is a row per volume
for the common local-volume affinity (`kubernetes.io/hostname In [one node]`) and a
label mask per distinct affinity otherwise (cached until nodes change).

The index follows the catalog through its log of changed volume names, so a volume
update costs one slot update, not a rebuild.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
import numpy as np
from numpy.typing import NDArray

from shoal.api.objects import NodeSelector
from shoal.api.selectors import label_selector_matches
from shoal.api.volumes import PersistentVolume, PersistentVolumeClaim, claim_class
from shoal.cache.change_log import LogReader
from shoal.cache.labels import MISSING
from shoal.cache.snapshot import Snapshot

if TYPE_CHECKING:
    from shoal.cache.volumes import VolumeCatalog

__all__ = ["VolumeIndex"]

HOSTNAME = "kubernetes.io/hostname"
_MODES = {"ReadWriteOnce": 1, "ReadOnlyMany": 2, "ReadWriteMany": 4, "ReadWriteOncePod": 8}
_NONE, _HOST, _GENERAL = 0, 1, 2
_SHARED_HOST = -2  # a hostname label several nodes carry: use the label mask


def _access_bits(modes: list[str]) -> int:
    bits = 0
    for mode in modes:
        bits |= _MODES.get(mode, 0)
    return bits


def _single_host(required: NodeSelector) -> str | None:
    terms = required.node_selector_terms
    if len(terms) != 1 or terms[0].match_fields or len(terms[0].match_expressions) != 1:
        return None
    req = terms[0].match_expressions[0]
    if req.key == HOSTNAME and req.operator == "In" and len(req.values) == 1:
        return req.values[0]
    return None


class VolumeIndex:
    def __init__(self, catalog: VolumeCatalog, nodes: Snapshot) -> None:
        self.catalog = catalog
        self.nodes = nodes
        self._reader = LogReader()
        self._reset()

    def _reset(self) -> None:
        size = 64
        self.slot_of: dict[str, int] = {}
        self.volumes: list[PersistentVolume | None] = []
        self._free: list[int] = []
        self.live = np.zeros(size, dtype=bool)
        self.cls = np.zeros(size, dtype=np.int32)
        self.capacity = np.zeros(size, dtype=np.int64)
        self.usable = np.zeros(size, dtype=bool)  # Available and not being deleted
        self.deleting = np.zeros(size, dtype=bool)
        self.bound = np.zeros(size, dtype=bool)  # has a claimRef
        self.block = np.zeros(size, dtype=bool)  # volumeMode Block
        self.access = np.zeros(size, dtype=np.int8)
        self.kind = np.zeros(size, dtype=np.int8)
        self.host = np.full(size, -1, dtype=np.int32)
        self.aff = np.full(size, -1, dtype=np.int32)
        self._classes: dict[str, int] = {}
        self._hosts: dict[str, int] = {}
        self._host_names: list[str] = []
        self._affinities: dict[bytes, int] = {}
        self._selectors: list[NodeSelector] = []
        self.prebound: dict[str, set[int]] = {}  # claim key -> slots whose claimRef names it
        self._ref_of: dict[int, str] = {}
        self._nodes_key = (-1, -1)
        self._host_row = np.zeros(0, dtype=np.int64)
        self._masks: dict[int, NDArray[np.bool_]] = {}

    # ---- following the catalog ---------------------------------------------------------

    def sync(self) -> None:
        rebuild, names = self._reader.read(self.catalog.volume_changes, self.catalog.volumes)
        if rebuild:
            self._reset()
        for name in names:
            self._update(name)

    def _update(self, name: str) -> None:
        volume = self.catalog.volumes.get(name)
        slot = self.slot_of.get(name)
        if volume is None:
            if slot is not None:
                self._drop(slot)
                del self.slot_of[name]
                self._free.append(slot)
            return
        if slot is None:
            slot = self._free.pop() if self._free else len(self.volumes)
            if slot == len(self.volumes):
                self.volumes.append(None)
                if slot >= len(self.live):
                    self._grow(2 * len(self.live))
            self.slot_of[name] = slot
        else:
            self._drop(slot)
        self._fill(slot, volume)

    def _drop(self, slot: int) -> None:
        self.live[slot] = False
        self.volumes[slot] = None
        ref = self._ref_of.pop(slot, None)
        if ref is not None:
            slots = self.prebound.get(ref)
            if slots is not None:
                slots.discard(slot)
                if not slots:
                    del self.prebound[ref]

    def _fill(self, slot: int, volume: PersistentVolume) -> None:
        spec = volume.spec
        self.volumes[slot] = volume
        self.live[slot] = True
        self.cls[slot] = self._classes.setdefault(spec.storage_class_name, len(self._classes))
        self.capacity[slot] = volume.capacity
        deleting = volume.metadata.deletion_timestamp is not None
        self.deleting[slot] = deleting
        self.usable[slot] = volume.status.phase == "Available" and not deleting
        self.bound[slot] = spec.claim_ref is not None
        self.block[slot] = spec.volume_mode == "Block"
        self.access[slot] = _access_bits(list(spec.access_modes))
        if spec.claim_ref is not None:
            ref = spec.claim_ref
            key = f"{ref.namespace or 'default'}/{ref.name}"
            self._ref_of[slot] = key
            self.prebound.setdefault(key, set()).add(slot)
        affinity = spec.node_affinity
        required = affinity.required if affinity is not None else None
        self.host[slot] = -1
        self.aff[slot] = -1
        if required is None:
            self.kind[slot] = _NONE
            return
        key_bytes = msgspec.json.encode(required)
        index = self._affinities.get(key_bytes)
        if index is None:
            index = self._affinities[key_bytes] = len(self._selectors)
            self._selectors.append(required)
        self.aff[slot] = index
        host = _single_host(required)
        if host is None:
            self.kind[slot] = _GENERAL
            return
        if host not in self._hosts:
            self._hosts[host] = len(self._host_names)
            self._host_names.append(host)
            self._nodes_key = (-1, -1)  # the host -> row table needs the new name
        self.kind[slot] = _HOST
        self.host[slot] = self._hosts[host]

    def _grow(self, size: int) -> None:
        for name in ("live", "cls", "capacity", "usable", "deleting", "bound", "block"):
            old = getattr(self, name)
            new = np.zeros(size, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)
        for name, fill in (("access", 0), ("kind", 0), ("host", -1), ("aff", -1)):
            old = getattr(self, name)
            new = np.full(size, fill, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    # ---- queries ---------------------------------------------------------------------

    def candidates(self, claim: PersistentVolumeClaim) -> NDArray[np.intp]:
        """kube's FindMatchingVolume without the node: the claim's pre-bound volume
        alone (if it fits), else the slots of available volumes of the claim's class
        that fit it and no other claim holds or was assumed to get, smallest first."""
        self.sync()
        catalog = self.catalog
        request = claim.request
        block = claim.spec.volume_mode == "Block"
        pre = set(self.prebound.get(claim.key, ()))
        for volume_name, holder in catalog.assumed_volume.items():
            if holder == claim.key and volume_name in self.slot_of:
                pre.add(self.slot_of[volume_name])
        for slot in sorted(pre):
            volume = self.volumes[slot]
            if volume is None or not catalog.prebound(volume, claim) or self.deleting[slot]:
                continue
            if self.capacity[slot] >= request and self.block[slot] == block:
                return np.array([slot], dtype=np.intp)
            return np.zeros(0, dtype=np.intp)
        code = self._classes.get(claim_class(claim))
        if code is None:
            return np.zeros(0, dtype=np.intp)
        n = len(self.volumes)
        bits = _access_bits(list(claim.spec.access_modes))
        ok = (
            self.live[:n]
            & (self.cls[:n] == code)
            & self.usable[:n]
            & ~self.bound[:n]
            & (self.capacity[:n] >= request)
            & (self.block[:n] == block)
            & ((self.access[:n] & bits) == bits)
        )
        for volume_name, holder in catalog.assumed_volume.items():
            taken = self.slot_of.get(volume_name)
            if taken is not None and holder != claim.key:
                ok[taken] = False
        slots = np.flatnonzero(ok)
        selector = claim.spec.selector
        if selector is not None:
            keep = [
                s
                for s in slots.tolist()
                if label_selector_matches(selector, self._volume(s).metadata.labels)
            ]
            slots = np.asarray(keep, dtype=np.intp)
        # Smallest first (equal sizes in slot order).
        result: NDArray[np.intp] = slots[np.argsort(self.capacity[slots], kind="stable")]
        return result

    def _volume(self, slot: int) -> PersistentVolume:
        volume = self.volumes[slot]
        assert volume is not None
        return volume

    def volume(self, slot: int) -> PersistentVolume:
        return self._volume(slot)

    def any_mask(self, slots: NDArray[np.intp], n: int) -> NDArray[np.bool_]:
        """Rows where at least one of the volumes may be used."""
        self._nodes_ready(n)
        kinds = self.kind[slots]
        if (kinds == _NONE).any():
            return np.ones(n, dtype=bool)
        mask = np.zeros(n, dtype=bool)
        hosts = slots[kinds == _HOST]
        rows = self._host_row[self.host[hosts]] if len(hosts) else np.zeros(0, dtype=np.int64)
        mask[rows[rows >= 0]] = True
        general = np.concatenate([slots[kinds == _GENERAL], hosts[rows == _SHARED_HOST]])
        for index in np.unique(self.aff[general]):
            mask |= self._mask(int(index), n)
        return mask

    def usable_at(self, slots: NDArray[np.intp], row: int, n: int) -> NDArray[np.bool_]:
        """For each volume: may it be used on `row`?"""
        self._nodes_ready(n)
        kinds = self.kind[slots]
        out: NDArray[np.bool_] = np.asarray(kinds == _NONE, dtype=bool)
        host_rows = np.full(len(slots), -1, dtype=np.int64)
        is_host = kinds == _HOST
        if is_host.any():
            host_rows[is_host] = self._host_row[self.host[slots[is_host]]]
        out |= is_host & (host_rows == row)
        general = (kinds == _GENERAL) | (is_host & (host_rows == _SHARED_HOST))
        if general.any():
            affs = self.aff[slots]
            for index in np.unique(affs[general]):
                if self._mask(int(index), n)[row]:
                    out |= general & (affs == index)
        return out

    def first_per_row(self, slots: NDArray[np.intp], m: int, n: int) -> NDArray[np.intp]:
        """For every row, the first `m` of `slots` (in their order) that may be used there,
        as an (n, m) matrix of slots (-1 where fewer). Local volumes are placed on their
        row directly; volumes without affinity, or sharing one, a block at a time."""
        self._nodes_ready(n)
        big = len(slots)
        top = np.full((n, m), big, dtype=np.int64)
        if not big:
            return np.full((n, m), -1, dtype=np.intp)
        kinds = self.kind[slots]
        host_rows = np.full(big, -1, dtype=np.int64)
        is_host = kinds == _HOST
        if is_host.any():
            host_rows[is_host] = self._host_row[self.host[slots[is_host]]]
        direct = np.flatnonzero(is_host & (host_rows >= 0))
        if len(direct):
            rows = host_rows[direct]
            by_row = np.lexsort((direct, rows))
            rows, order = rows[by_row], direct[by_row]
            starts = np.r_[0, np.flatnonzero(np.diff(rows)) + 1]
            rank = np.arange(len(rows)) - np.repeat(starts, np.diff(np.r_[starts, len(rows)]))
            keep = rank < m
            top[rows[keep], rank[keep]] = order[keep]
        spread = np.flatnonzero(
            (kinds == _NONE) | (kinds == _GENERAL) | (is_host & (host_rows == _SHARED_HOST))
        )
        if len(spread):
            groups = np.where(kinds[spread] == _NONE, -1, self.aff[slots[spread]])
            for group in np.unique(groups):
                members = spread[groups == group][:m]
                where = np.ones(n, dtype=bool) if group == -1 else self._mask(int(group), n)
                block = np.full((n, m), big, dtype=np.int64)
                block[np.ix_(where, np.arange(len(members)))] = members
                top = np.sort(np.concatenate([top, block], axis=1), axis=1)[:, :m]
        result: NDArray[np.intp] = np.where(top < big, slots[np.minimum(top, big - 1)], -1)
        return result

    # ---- node-dependent tables ---------------------------------------------------------

    def _nodes_ready(self, n: int) -> None:
        key = (self.nodes.nodes_version, n)
        if key == self._nodes_key:
            return
        self._nodes_key = key
        self._masks.clear()
        labels = self.nodes.labels
        column = labels.column(HOSTNAME, slice(0, n))
        vocab = labels.vocab.get(HOSTNAME, {})
        present = np.flatnonzero(column != MISSING)
        codes = column[present]
        counts = np.bincount(codes, minlength=len(vocab)) if len(codes) else np.zeros(0)
        row_of_code = np.full(max(len(vocab), 1), -1, dtype=np.int64)
        row_of_code[codes] = present
        shared = np.flatnonzero(counts > 1)
        row_of_code[shared] = _SHARED_HOST
        table = np.full(len(self._host_names), -1, dtype=np.int64)
        for i, host in enumerate(self._host_names):
            code = vocab.get(host)
            if code is not None:
                table[i] = row_of_code[code]
        self._host_row = table

    def _mask(self, index: int, n: int) -> NDArray[np.bool_]:
        found = self._masks.get(index)
        if found is None:
            nodes = self.nodes
            terms = tuple(self._selectors[index].node_selector_terms)
            found = nodes.labels.terms_mask(terms, nodes.names[:n], slice(0, n))
            self._masks[index] = found
        return found
