"""Topology-aware gang placement: keep a gang in as few domains of one level as possible.

Nodes carry a topology label (a leaf switch, a rack, a spine). Given how many members a
node can still hold, the capacity of each domain is a `bincount` over the label codes.
To cover `count` members with the fewest domains, taking domains in decreasing capacity
is optimal; when one domain is enough, the smallest one that fits is chosen (best fit),
so large empty domains stay free for larger gangs.

A gang already (partly) placed is held where it is (`HeldDomains`): members placed
later (elastic growth, members beyond a role's minimum, replacements of lost members)
go to the domains of the required level its placed members occupy, and preferably to
the domains of its preferred levels they occupy, lowest level first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from shoal.api.hypernode import key_tier, tier_key
from shoal.api.podgroup import VolcanoNetworkTopology
from shoal.cache.hypernodes import HyperNodeTopology
from shoal.cache.labels import MISSING
from shoal.cache.snapshot import Snapshot

__all__ = [
    "DomainChoice",
    "HeldDomains",
    "Levels",
    "choose_domains",
    "choose_levels",
    "domain_words",
    "fitting_domains",
    "largest_domain",
    "members_per_node",
    "preemption_domains",
    "volcano_levels",
]


@dataclass(frozen=True)
class DomainChoice:
    rows: NDArray[np.bool_] | None  # nodes the gang may use (None: no placement possible)
    domains: tuple[str, ...]
    message: str = ""


@dataclass(frozen=True)
class Levels:
    """A gang's topology levels: the one it must fit inside one domain of, and the ones
    it prefers, lowest first; `problem`: why it cannot be placed at all (a hard
    constraint naming a tier no HyperNode has)."""

    required: str = ""
    preferred: tuple[str, ...] = ()
    problem: str = ""

    def __bool__(self) -> bool:
        return bool(self.required or self.preferred or self.problem)


def volcano_levels(spec: VolcanoNetworkTopology, hypernodes: HyperNodeTopology) -> Levels:
    """A Volcano PodGroup's `networkTopology` as levels over the HyperNode tiers there
    are now. `hard`: required, one HyperNode of tier <= highestTierAllowed (default 1;
    or the tier `highestTierName` names), and preferred, the tiers below it, lowest
    first (the lowest tier that holds the gang). `soft`: every tier preferred, lowest
    first; never blocks."""
    tiers = hypernodes.tiers()
    if spec.mode == "soft":
        return Levels("", tuple(tier_key(t) for t in tiers))
    highest = spec.highest_tier_allowed or 1
    if spec.highest_tier_name:
        named = hypernodes.tier_named(spec.highest_tier_name)
        if named is None:
            return Levels(
                problem=(
                    f"networkTopology.highestTierName {spec.highest_tier_name!r}: no "
                    "HyperNode has that spec.tierName"
                )
            )
        highest = named
    below = [t for t in tiers if t <= highest]
    return Levels(tier_key(highest), tuple(tier_key(t) for t in below[:-1]))


class _Level:
    """One topology level of a `HeldDomains`: the label codes the placed members
    occupy, and (read only when asked: a gang none of whose members is placed costs
    nothing) the nodes of those domains."""

    __slots__ = ("_codes", "_mask", "_n", "_snap", "key", "spanned")

    def __init__(self, snap: Snapshot, key: str, rows: NDArray[np.intp]) -> None:
        self.key = key
        self._snap = snap
        self._n = snap.n
        self._codes: NDArray[np.int32] | None = None
        self._mask: NDArray[np.bool_] | None = None
        self.spanned: set[int] = set()
        if rows.size:
            here = np.unique(self.codes[rows])
            self.spanned = set(here[here != MISSING].tolist())

    @property
    def codes(self) -> NDArray[np.int32]:
        if self._codes is None:
            self._codes = self._snap.domain_column(self.key)[0][: self._n]
        return self._codes

    @property
    def mask(self) -> NDArray[np.bool_]:
        """The nodes of the domains the members occupy."""
        if self._mask is None:
            spanned = self.spanned
            if len(spanned) == 1:
                self._mask = self.codes == next(iter(spanned))
            else:
                self._mask = np.isin(self.codes, np.fromiter(spanned, np.int64, len(spanned)))
        return self._mask

    def add(self, row: int) -> bool:
        code = int(self.codes[row])
        if code == MISSING or code in self.spanned:
            return False
        self.spanned.add(code)
        self._mask = None
        return True

    def describe(self) -> str:
        """ "topo/rack r0" (or "topo/rack r0 or r1"; "HyperNode s0" for a HyperNode tier)."""
        values = self._snap.domain_column(self.key)[1]
        names = sorted(values[c] for c in self.spanned if c < len(values))
        what = "HyperNode" if key_tier(self.key) is not None else self.key
        return f"{what} {' or '.join(names)}"


class HeldDomains:
    """Where a gang (or one of its roles) is already placed: per topology level, the
    domains its placed members occupy (`rows`: their node rows).

    Members placed later are held there: strictly to the required level's domains
    (`pinned`; normally one, several only when the members were placed before the
    level was required, or their nodes relabelled: then any of those, never a new
    one), and preferably to the preferred levels' domains the members span, lowest
    level first (`tiers`; a preference never blocks). A gang none of whose members is
    placed on a labelled node holds nothing: it chooses its domains anew. `add` counts
    a member placed in the open transaction (`version` changes when a domain is new).
    """

    def __init__(
        self,
        snap: Snapshot,
        required: str,
        preferred: tuple[str, ...],
        rows: NDArray[np.intp],
    ) -> None:
        self.required = _Level(snap, required, rows) if required else None
        self.preferred = [_Level(snap, key, rows) for key in preferred if key != required]
        self.version = 0

    def add(self, row: int) -> None:
        for level in (self.required, *self.preferred):
            if level is not None and level.add(row):
                self.version += 1

    @property
    def pinned(self) -> NDArray[np.bool_] | None:
        """Nodes of the required level's domains the members occupy (None: no pin)."""
        level = self.required
        return level.mask if level is not None and level.spanned else None

    def tiers(self) -> list[tuple[str, NDArray[np.bool_]]]:
        """(level, nodes of the domains the members occupy) per preferred level, lowest
        first; levels they occupy no domain of are left out."""
        return [(level.key, level.mask) for level in self.preferred if level.spanned]

    def describe(self) -> str:
        """The required domains the members occupy ("topo/rack r0"; "" when none)."""
        level = self.required
        return level.describe() if level is not None and level.spanned else ""


def members_per_node(
    snap: Snapshot, shape: NDArray[np.int64], free: NDArray[np.int64] | None = None
) -> NDArray[np.int64]:
    """How many more pods of `shape` (a request vector incl. one pod slot) each node
    holds, with its free resources now or, given, `free` (rows 0..n-1: e.g. what would be
    free with lower-priority pods preempted). A new array (the caller may write it)."""
    n = snap.n
    room = snap.free[:n] if free is None else free
    # Column by column (the table is column-major: each a contiguous read), and no
    # division for a request of 1 (the pod slot); clamped at 0 once at the end:
    # max(floor(f / s), 0) == floor(max(f, 0) / s) for s > 0, and min and max commute.
    per: NDArray[np.int64] | None = None
    for col in np.flatnonzero(shape).tolist():
        amount = int(shape[col])
        column = room[:, col]
        if per is None:
            per = column.copy() if amount == 1 else column // amount
        else:
            np.minimum(per, column if amount == 1 else column // amount, out=per)
    if per is None:  # an empty request (never a pod's: it holds a pod slot)
        return np.zeros(room.shape[0], dtype=np.int64)
    np.maximum(per, 0, out=per)
    return per


def domain_words(key: str, plural: bool = False) -> str:
    """How messages name a domain of level `key`: "topo/rack domain", or "HyperNode of
    tier <= 2" for a HyperNode tier (`volcano.sh/hypernode-tier-2`)."""
    tier = key_tier(key)
    if tier is None:
        return f"{key} domain{'s' if plural else ''}"
    return f"HyperNode{'s' if plural else ''} of tier <= {tier}"


def _no_node(key: str) -> str:
    tier = key_tier(key)
    if tier is None:
        return f"no node with label {key} can hold a member"
    return f"no node in a HyperNode of tier <= {tier} can hold a member"


def _domains(
    snap: Snapshot, key: str, capacity: NDArray[np.int64]
) -> tuple[NDArray[np.int32], Sequence[str], NDArray[np.int64]]:
    """Domain codes per node (a label's, or a HyperNode tier's), the domains' names, and
    members each domain holds (a sum over the level's `DomainIndex`, kept while the nodes
    do not change)."""
    index = snap.domain_index(key)
    return index.codes, index.values, index.sums(capacity)


def choose_domains(
    snap: Snapshot,
    key: str,
    capacity: NDArray[np.int64],
    count: int,
    required: bool,
) -> DomainChoice:
    """Pick domains of label `key` able to hold `count` members (capacity per node).

    Required: one domain (the smallest that fits), else no placement. Preferred: one
    domain if one fits, else the fewest domains that together do; a preference never
    blocks: when the labelled domains cannot hold the gang, every node may be used."""
    n = snap.n
    codes, values, per_domain = _domains(snap, key, capacity)
    if not per_domain.size or per_domain.max() <= 0:
        message = _no_node(key)
        return DomainChoice(None, (), message) if required else _anywhere(n, message)
    fitting = np.flatnonzero(per_domain >= count)
    if fitting.size:
        best = int(fitting[np.argmin(per_domain[fitting])])
        return DomainChoice(codes == best, (values[best],))
    if required:
        largest = int(np.argmax(per_domain))
        which = f", {values[largest]}," if key_tier(key) is not None else ""
        return DomainChoice(
            None,
            (),
            f"no single {domain_words(key)} can hold {count} members "
            f"(the largest{which} holds {int(per_domain[largest])})",
        )
    order = np.argsort(-per_domain, kind="stable")
    covered = np.cumsum(per_domain[order])
    if covered[-1] < count:
        return _anywhere(
            n,
            f"all {domain_words(key, plural=True)} together hold {int(covered[-1])} of "
            f"{count} members",
        )
    k = int(np.searchsorted(covered, count)) + 1
    chosen = order[:k]
    return DomainChoice(np.isin(codes, chosen), tuple(values[int(d)] for d in chosen))


def fitting_domains(
    snap: Snapshot, key: str, capacity: NDArray[np.int64], count: int, limit: int = 8
) -> list[DomainChoice]:
    """Every domain of label `key` able to hold `count` members, smallest first (at most
    `limit`): the candidates a gang with roles tries in turn, since a domain that holds
    the gang's members may still not have room for each role inside its own sub-domain."""
    codes, values, per_domain = _domains(snap, key, capacity)
    fitting = np.flatnonzero(per_domain >= count)
    order = fitting[np.argsort(per_domain[fitting], kind="stable")][:limit]
    return [DomainChoice(codes == int(d), (values[int(d)],)) for d in order]


def largest_domain(snap: Snapshot, key: str, capacity: NDArray[np.int64]) -> int:
    """Members the largest domain of label `key` holds (0 when no node carries it):
    what a refusal says, e.g. with lower-priority pods preempted."""
    _, _, per_domain = _domains(snap, key, capacity)
    return int(per_domain.max()) if per_domain.size else 0


def preemption_domains(
    snap: Snapshot,
    key: str,
    capacity: NDArray[np.int64],
    preemptible: NDArray[np.int64],
    count: int,
    limit: int = 3,
) -> list[DomainChoice]:
    """Domains of label `key` that could hold `count` members once lower-priority pods
    are preempted (`preemptible`: members per node with them gone; `capacity`: as
    things are), fewest members left to make room for first (least to evict), then the
    smallest; at most `limit`. What job-level preemption of a gang with a required
    topology tries when no domain holds it as things are."""
    codes, values, now = _domains(snap, key, capacity)
    _, _, then = _domains(snap, key, preemptible)
    fitting = np.flatnonzero(then >= count)
    missing = np.maximum(count - now[fitting], 0)
    order = fitting[np.lexsort((then[fitting], missing))][:limit]
    return [DomainChoice(codes == int(d), (values[int(d)],)) for d in order]


def choose_levels(
    snap: Snapshot,
    required_key: str,
    preferred_keys: tuple[str, ...],
    capacity: NDArray[np.int64],
    count: int,
) -> DomainChoice:
    """Preferred levels, lowest first (leaf, spine, block), under an optional required
    one: the smallest domain of the lowest preferred level that holds the whole gang
    (inside one required domain), else of the next level up, and so on, so the highest
    tier the gang spans is as low as it can be; when no single domain of any preferred
    level holds it, the fewest domains of the highest one (inside the required domain,
    if any). A preference never blocks."""
    for key in preferred_keys:
        found = _smallest_inside(snap, required_key, key, capacity, count)
        if found is not None:
            return found
    highest = preferred_keys[-1]
    if required_key:
        return _fewest_inside(snap, required_key, highest, capacity, count)
    return choose_domains(snap, highest, capacity, count, required=False)


def _smallest_inside(
    snap: Snapshot, required_key: str, key: str, capacity: NDArray[np.int64], count: int
) -> DomainChoice | None:
    """The smallest domain of `key` that holds `count` members and lies inside one
    domain of `required_key` (any, without one); None when there is none."""
    index = snap.domain_index(key)
    per_domain = index.sums(capacity)
    fits = per_domain >= count
    if required_key:
        # Domains whose nodes all lie in one domain of the required level (kept per
        # pair of levels: it depends on the labels alone).
        fits &= index.parents(snap.domain_index(required_key)) != MISSING
    if not fits.any():
        return None
    # The first of the smallest that fit (domain codes ascending, as before).
    best = int(np.argmin(np.where(fits, per_domain, np.iinfo(np.int64).max)))
    return DomainChoice(index.codes == best, (index.values[best],))


def _fewest_inside(
    snap: Snapshot, required_key: str, key: str, capacity: NDArray[np.int64], count: int
) -> DomainChoice:
    """The required domain (smallest that fits) with the fewest domains of `key` inside
    it (every node of it when its `key` labels fall short)."""
    outer = choose_domains(snap, required_key, capacity, count, required=True)
    if outer.rows is None:
        return outer
    within = np.where(outer.rows, capacity, 0)
    inner = choose_domains(snap, key, within, count, required=False)
    rows = outer.rows if inner.rows is None else inner.rows & outer.rows
    if int(within[rows].sum()) < count:
        rows = outer.rows
    return DomainChoice(rows, outer.domains + inner.domains, inner.message)


def _anywhere(n: int, message: str) -> DomainChoice:
    """An unmet preference: every node may be used; `message` says what was not met."""
    return DomainChoice(np.ones(n, dtype=bool), (), f"preference not met: {message}")
