"""Cluster state: the columnar node table, the cache that owns it, and snapshots."""

from shoal.cache.cluster import ClusterState, PlacementObserver, PodRecord
from shoal.cache.labels import LabelColumns
from shoal.cache.node_table import NodeTable
from shoal.cache.snapshot import Snapshot

__all__ = [
    "ClusterState",
    "LabelColumns",
    "NodeTable",
    "PlacementObserver",
    "PodRecord",
    "Snapshot",
]
