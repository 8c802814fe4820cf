"""Container images on nodes (`status.images`), for ImageLocality.

kube-scheduler's cache keeps, per image name, the image's size and the nodes listing
that name (`imageStates`; a pod's image counts on a node when the node lists the name,
and its weight is the size times the share of nodes that have it). The same here, kept
in step with every node change by the cluster state: per name, the size first reported
(kube keeps the first one too) and the set of node rows listing it; per row, the names
it lists. A node heartbeat that changes nothing in its images costs one set compare.

Plugins read it through the Snapshot: `state(name)` gives (size, nodes having it) and
`mask(name)` a read-only boolean column over the node rows, built when first asked and
kept until a node listing or dropping the name changes it.

Nodes list the same images again and again (50 images are about 20 KB per decoded
node), so each node's list is made to point at one shared `ContainerImage` per distinct
entry (equal names and size), held weakly: an entry no node lists any more goes away.
"""

from __future__ import annotations

import weakref

import numpy as np
from numpy.typing import NDArray

from shoal.api.objects import ContainerImage
from shoal.cache.node_table import NodeTable
from shoal.cache.row_sets import RowSets

__all__ = ["ImageStates"]


class ImageStates:
    def __init__(self, table: NodeTable) -> None:
        self.table = table
        self._size: dict[str, int] = {}
        self._rows = RowSets(table)  # image name -> the rows listing it
        # Per row, the (shared) entries it lists: what a change is compared against.
        self._of_row: dict[int, tuple[ContainerImage, ...]] = {}
        self._shared: weakref.WeakValueDictionary[tuple[tuple[str, ...], int], ContainerImage]
        self._shared = weakref.WeakValueDictionary()

    @property
    def empty(self) -> bool:
        """No node lists any image (a cluster without kubelets, a simulation)."""
        return not self._rows

    def state(self, name: str) -> tuple[int, int] | None:
        """(size in bytes, nodes listing it), or None when no node lists `name`."""
        count = self._rows.count(name)
        return None if not count else (self._size[name], count)

    def mask(self, name: str) -> NDArray[np.bool_]:
        """Which node rows (0..n-1) list `name` (read-only)."""
        return self._rows.mask(name)

    # ---- kept in step by the cluster state -------------------------------------------

    def node_changed(self, row: int) -> None:
        status = self.table.nodes[row].status
        old = self._of_row.get(row, ())
        if not status.images and not old:
            return
        listed = tuple(self._share(image) for image in status.images)
        status.images = list(listed)
        if listed == old:  # shared entries: compared by identity first, so this is cheap
            return
        before = _names(old)
        names = _names(listed)
        for name in before - names:
            self._drop(name, row)
        for image in listed:
            for name in image.names:
                if name not in before and self._rows.add(name, row):
                    self._size[name] = image.size_bytes  # the first size reported, as kube
        if listed:
            self._of_row[row] = listed
        else:
            self._of_row.pop(row, None)

    def node_removed(self, row: int, last: int) -> None:
        """The node at `row` is gone and the table's last row moved into its place."""
        for name in _names(self._of_row.pop(row, ())):
            self._drop(name, row)
        if row == last:
            return
        moved = self._of_row.pop(last, ())
        self._rows.moved(_names(moved), last, row)
        if moved:
            self._of_row[row] = moved

    def _share(self, image: ContainerImage) -> ContainerImage:
        key = (tuple(image.names), image.size_bytes)
        shared = self._shared.get(key)
        if shared is None:
            self._shared[key] = shared = image
        return shared

    def _drop(self, name: str, row: int) -> None:
        if self._rows.discard(name, row):
            del self._size[name]


def _names(images: tuple[ContainerImage, ...]) -> frozenset[str]:
    return frozenset(name for image in images for name in image.names)
