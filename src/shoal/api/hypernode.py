"""Network topology as objects: Volcano's HyperNodes, and Kueue's topology annotations.

A Volcano `HyperNode` (`topology.volcano.sh/v1alpha1`, cluster-scoped) is a network
domain (a leaf switch, a spine, a block) of some `spec.tier` (1 is the lowest, the
fastest). Its `spec.members` are nodes or lower-tier HyperNodes, each chosen by one
selector: `exactMatch.name`, `regexMatch.pattern` (searched in the name, as Go's
`regexp.MatchString`) or, for nodes only, `labelMatch` (a label selector). Older
HyperNodes carried `tier` as a string and `selector.type: Exact|Regex`; both still read.

Shoal exposes each tier as a topology level named `volcano.sh/hypernode-tier-N`
(`tier_key`), whose domains are HyperNodes: a node's domain at tier N is the HyperNode
of the highest tier <= N that holds it (directly or through lower HyperNodes), so one
domain of `volcano.sh/hypernode-tier-2` is "one HyperNode of tier <= 2", as Volcano's
`highestTierAllowed: 2` asks. These levels are not node labels: node selectors,
affinity and spread constraints do not see them (`shoal.cache.hypernodes`). A Volcano
PodGroup asks for them in `spec.networkTopology` (`shoal.api.podgroup`).

Kueue's topology-aware scheduling annotations, on the pod template of a pod set (so on
every pod of it): `kueue.x-k8s.io/podset-required-topology: LABEL` (all in one domain
of the node label), `kueue.x-k8s.io/podset-preferred-topology: LABEL` (as few as
possible) and `kueue.x-k8s.io/podset-unconstrained-topology: "true"` (no level).
A Kueue `Topology` (`kueue.x-k8s.io`, cluster-scoped) lists the levels of a fabric as
node labels, highest first (`spec.levels[].nodeLabel`: block, rack, hostname); a
preferred level falls back to each coarser level one lists (`shoal.cache.kueue_topologies`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from shoal.api.objects import LabelSelector, ObjectMeta

__all__ = [
    "HYPERNODE_TIER_PREFIX",
    "KUEUE_PREFERRED",
    "KUEUE_REQUIRED",
    "KUEUE_TOPOLOGY_VERSIONS",
    "KUEUE_UNCONSTRAINED",
    "ExactMatch",
    "HyperNode",
    "HyperNodeSpec",
    "KueueTopology",
    "MemberSelector",
    "MemberSpec",
    "RegexMatch",
    "Topology",
    "TopologyLevel",
    "TopologySpec",
    "key_tier",
    "kueue_topology",
    "tier_key",
]

HYPERNODE_TIER_PREFIX = "volcano.sh/hypernode-tier-"
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
# The versions Kueue serves Topology in, the one Shoal asks for first: v1beta2 (served
# since Kueue 0.15, the storage version since 0.16), v1 (being prepared upstream),
# v1beta1 (its predecessor: deprecated, to be dropped) and v1alpha1 (Kueue 0.9 to 0.11).
# All have the same schema.
KUEUE_TOPOLOGY_VERSIONS = ("v1beta2", "v1", "v1beta1", "v1alpha1")


class _Base(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    pass


class ExactMatch(_Base):
    name: str = ""


class RegexMatch(_Base):
    pattern: str = ""


class MemberSelector(_Base):
    """One of `exact_match`, `regex_match`, `label_match` (checked when resolved, so a
    HyperNode with a bad member is reported naming the field, not undecodable)."""

    exact_match: ExactMatch | None = None
    regex_match: RegexMatch | None = None
    label_match: LabelSelector | None = None


class MemberSpec(_Base):
    type: str = ""  # Node or HyperNode
    selector: MemberSelector = msgspec.field(default_factory=MemberSelector)


class HyperNodeSpec(_Base):
    tier: int | str = 0  # an integer >= 1 (a numeric string in older HyperNodes)
    tier_name: str = ""  # newer Volcano: a name for the tier (networkTopology.highestTierName)
    members: list[MemberSpec] = []


class HyperNode(_Base):
    """Volcano `topology.volcano.sh/v1alpha1` HyperNode."""

    api_version: str = "topology.volcano.sh/v1alpha1"
    kind: str = "HyperNode"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: HyperNodeSpec = msgspec.field(default_factory=HyperNodeSpec)
    status: dict[str, Any] = {}


def tier_key(tier: int) -> str:
    """The topology level of HyperNodes of tier <= `tier`: `volcano.sh/hypernode-tier-2`."""
    return f"{HYPERNODE_TIER_PREFIX}{tier}"


def key_tier(key: str) -> int | None:
    """The tier a level key names (`volcano.sh/hypernode-tier-2` -> 2); None for a node
    label."""
    if not key.startswith(HYPERNODE_TIER_PREFIX):
        return None
    raw = key[len(HYPERNODE_TIER_PREFIX) :]
    return int(raw) if raw.isdigit() and int(raw) >= 1 else None


class KueueTopology(msgspec.Struct, frozen=True):
    """What a pod's Kueue annotations ask of its pod set's topology."""

    required: str = ""
    preferred: str = ""
    unconstrained: bool = False

    def describe(self) -> str:
        parts = []
        if self.required:
            parts.append(f"required {self.required}")
        if self.preferred:
            parts.append(f"preferred {self.preferred}")
        if self.unconstrained:
            parts.append("unconstrained")
        return " and ".join(parts) or "nothing"


def kueue_topology(annotations: dict[str, str]) -> KueueTopology | None:
    """The pod's Kueue topology annotations (None: it has none)."""
    required = annotations.get(KUEUE_REQUIRED, "").strip()
    preferred = annotations.get(KUEUE_PREFERRED, "").strip()
    unconstrained = annotations.get(KUEUE_UNCONSTRAINED, "").strip().lower() == "true"
    if not (required or preferred or unconstrained):
        return None
    return KueueTopology(required, preferred, unconstrained)


class TopologyLevel(_Base):
    node_label: str = ""


class TopologySpec(_Base):
    levels: list[TopologyLevel] = []  # highest first


class Topology(_Base):
    """Kueue `kueue.x-k8s.io` Topology (any of `KUEUE_TOPOLOGY_VERSIONS`): a fabric's
    levels as node labels, highest first. Checked when applied, so a malformed one is
    reported naming the field, not undecodable."""

    api_version: str = "kueue.x-k8s.io/v1beta2"
    kind: str = "Topology"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: TopologySpec = msgspec.field(default_factory=TopologySpec)
