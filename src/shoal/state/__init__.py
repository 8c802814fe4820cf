"""Cluster state: the columnar node table, the cache that owns it, and snapshots."""

from shoal.state.cluster import ClusterState, PlacementObserver, PodRecord
from shoal.state.labels import LabelColumns
from shoal.state.node_table import NodeTable
from shoal.state.snapshot import Snapshot

__all__ = [
    "ClusterState",
    "LabelColumns",
    "NodeTable",
    "PlacementObserver",
    "PodRecord",
    "Snapshot",
]
