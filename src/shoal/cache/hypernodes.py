"""Volcano HyperNodes resolved to nodes: each tier as a column of domain codes per node
row, beside the node label columns (not among them: node selectors, affinity and
spread constraints never see HyperNodes).

A HyperNode's members are nodes (by exact name, a regex searched in the name, or a
label selector) and lower-tier HyperNodes (by exact name or regex). A node belongs to a
HyperNode directly, or through the HyperNodes below it. The level
`volcano.sh/hypernode-tier-K` (`shoal.api.hypernode.tier_key`) gives each node the
HyperNode of the highest tier <= K that holds it (a node in several: the one of the
highest tier, then the first by name), so one domain of it is one HyperNode of tier <=
K, as Volcano's `highestTierAllowed` means; the topology code (`shoal.gang.topology`)
reads it as it reads a node label.

Costs. A HyperNode created or changed is matched against every node once (its exact
names looked up, its regexes run over the node names, its label selectors evaluated on
the label columns with numpy); the columns are then rebuilt when next read, one numpy
assignment per HyperNode and tier. A node added or changed is matched against the
HyperNodes' selectors alone (names looked up in an index, regexes whose answer is kept
per node name, label selectors on its labels) and its row written: nothing runs over
all nodes, and nothing runs per pod. Checking the HyperNodes' structure (cycles, tiers)
costs O(HyperNodes + members) after a HyperNode changes.

Malformed HyperNodes are skipped, each with a problem naming it and the field
(`problems`): a tier that is not an integer >= 1, a member that is neither Node nor
HyperNode or has not exactly one selector, a regex that does not compile, a label
selector on a HyperNode member, HyperNodes that are members of each other (a cycle),
and a member HyperNode whose tier is not lower than its parent's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from shoal.api.errors import ManifestError
from shoal.api.hypernode import HyperNode
from shoal.api.selectors import SelectorKey, key_matches, selector_key
from shoal.cache.labels import MISSING
from shoal.cache.node_table import NodeTable

__all__ = ["HyperNodeTopology"]

KIND = "HyperNode"


class _Invalid(Exception):
    def __init__(self, name: str, path: str, why: str) -> None:
        super().__init__(str(ManifestError(KIND, name, path, f"{why}; the HyperNode is skipped")))


@dataclass
class _Parsed:
    """A HyperNode's members, checked and compiled; each with the field it came from."""

    name: str
    tier: int
    tier_name: str
    node_names: dict[str, str] = field(default_factory=dict)
    node_patterns: list[tuple[re.Pattern[str], str]] = field(default_factory=list)
    node_labels: list[tuple[SelectorKey, str]] = field(default_factory=list)
    member_names: dict[str, str] = field(default_factory=dict)
    member_patterns: list[tuple[re.Pattern[str], str]] = field(default_factory=list)

    def node_selectors(self) -> tuple[object, ...]:
        return (
            tuple(sorted(self.node_names)),
            tuple(p.pattern for p, _ in self.node_patterns),
            tuple(k for k, _ in self.node_labels),
        )


def _tier(raw: int | str, name: str) -> int:
    if isinstance(raw, str):
        if not raw.strip().isdigit():
            raise _Invalid(name, "spec.tier", f"{raw!r} is not an integer tier (1 is the lowest)")
        raw = int(raw.strip())
    if raw < 1:
        raise _Invalid(name, "spec.tier", f"tier {raw} must be at least 1 (1 is the lowest)")
    return raw


def _parse(obj: HyperNode) -> _Parsed:
    name = obj.metadata.name
    if not name:
        raise _Invalid("", "metadata.name", "a HyperNode needs a name")
    parsed = _Parsed(name, _tier(obj.spec.tier, name), obj.spec.tier_name)
    for i, member in enumerate(obj.spec.members):
        at = f"spec.members[{i}]"
        kind = member.type
        if kind not in ("Node", "HyperNode"):
            raise _Invalid(name, f"{at}.type", f"{kind!r} must be Node or HyperNode")
        sel = member.selector
        given = [
            s
            for s, v in (
                ("exactMatch", sel.exact_match),
                ("regexMatch", sel.regex_match),
                ("labelMatch", sel.label_match),
            )
            if v is not None
        ]
        if len(given) != 1:
            raise _Invalid(
                name,
                f"{at}.selector",
                "needs exactly one of exactMatch, regexMatch and labelMatch"
                + (f" (has {', '.join(given)})" if given else ""),
            )
        if sel.exact_match is not None:
            target = sel.exact_match.name
            if not target:
                raise _Invalid(name, f"{at}.selector.exactMatch.name", "must not be empty")
            where = f"{at}.selector.exactMatch.name"
            (parsed.node_names if kind == "Node" else parsed.member_names)[target] = where
        elif sel.regex_match is not None:
            where = f"{at}.selector.regexMatch.pattern"
            if not sel.regex_match.pattern:
                raise _Invalid(name, where, "must not be empty")
            try:
                pattern = re.compile(sel.regex_match.pattern)
            except re.error as err:
                raise _Invalid(
                    name, where, f"{sel.regex_match.pattern!r} is not a valid regex ({err})"
                ) from None
            (parsed.node_patterns if kind == "Node" else parsed.member_patterns).append(
                (pattern, where)
            )
        else:
            where = f"{at}.selector.labelMatch"
            if kind != "Node":
                raise _Invalid(name, where, "selects nodes only (this member is a HyperNode)")
            parsed.node_labels.append((selector_key(sel.label_match), where))
    return parsed


class HyperNodeTopology:
    """The HyperNodes of the cluster and the tier columns they give (module docstring).
    Kept by `ClusterState`: told of every node added, changed or removed."""

    def __init__(self, table: NodeTable) -> None:
        self._table = table
        self._objects: dict[str, HyperNode] = {}
        self._parsed: dict[str, _Parsed] = {}
        self._parse_problems: dict[str, str] = {}
        # Which nodes each HyperNode selects directly, and the reverse.
        self._direct: dict[str, set[str]] = {}
        self._of_node: dict[str, frozenset[str]] = {}
        # Node-side indexes of the selectors (rebuilt when a HyperNode changes).
        self._exact: dict[str, set[str]] = {}
        self._patterns: dict[str, list[re.Pattern[str]]] = {}
        self._label_selectors: dict[str, list[SelectorKey]] = {}
        self._regex_hits: dict[str, frozenset[str]] = {}  # node name -> HyperNodes
        # Structure (rebuilt when read after a HyperNode changed).
        self._structure_stale = False
        self._structure_problems: dict[str, str] = {}
        self._valid: set[str] = set()
        self._tiers: tuple[int, ...] = ()
        self._tier_names: dict[str, int] = {}
        self._names: list[str] = []
        self._code: dict[str, int] = {}
        self._code_tier: NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        # HyperNode -> per tier (in `_tiers` order): the code of its domain at that tier.
        self._best: dict[str, list[int]] = {}
        # Tier columns, per tier in `_tiers`, sized to the node table's capacity.
        self._columns: dict[int, NDArray[np.int32]] = {}
        self._columns_stale = False
        self.version = 0  # bumped whenever the domains may have changed

    # ---- objects -------------------------------------------------------------------

    def upsert(self, obj: HyperNode) -> bool:
        """A HyperNode created or changed; False when nothing that matters changed."""
        name = obj.metadata.name
        old = self._objects.get(name)
        if old is not None and old.spec == obj.spec:
            self._objects[name] = obj
            return False
        self._objects[name] = obj
        before = self._parsed.pop(name, None)
        self._parse_problems.pop(name, None)
        parsed: _Parsed | None = None
        try:
            parsed = _parse(obj)
        except _Invalid as err:
            self._parse_problems[name] = str(err)
        if parsed is not None:
            self._parsed[name] = parsed
        selectors = parsed.node_selectors() if parsed is not None else None
        if selectors != (before.node_selectors() if before is not None else None):
            self._index_selectors(name, before, parsed)
            self._set_direct(name, self._match_all(parsed) if parsed is not None else set())
        self._changed()
        return True

    def remove(self, name: str) -> bool:
        """A HyperNode deleted; False when it was not known."""
        if self._objects.pop(name, None) is None:
            return False
        self._parse_problems.pop(name, None)
        before = self._parsed.pop(name, None)
        if before is not None:
            self._index_selectors(name, before, None)
            self._set_direct(name, set())
        self._changed()
        return True

    def __len__(self) -> int:
        return len(self._objects)

    def problems(self) -> dict[str, str]:
        """HyperNode name -> why it is skipped (naming the field)."""
        self._ensure_structure()
        return {**self._parse_problems, **self._structure_problems}

    def tiers(self) -> tuple[int, ...]:
        """The tiers of the HyperNodes in force, lowest first."""
        self._ensure_structure()
        return self._tiers

    def tier_named(self, tier_name: str) -> int | None:
        """The tier whose HyperNodes carry `spec.tierName: tier_name` (None: none)."""
        self._ensure_structure()
        return self._tier_names.get(tier_name)

    @property
    def values(self) -> list[str]:
        """Domain code -> HyperNode name (every tier column shares these codes)."""
        self._ensure_structure()
        return self._names

    def tier_of(self, name: str) -> int | None:
        """The tier of a HyperNode in force (None: unknown or skipped)."""
        self._ensure_structure()
        parsed = self._parsed.get(name)
        return parsed.tier if parsed is not None and name in self._valid else None

    def column(self, tier: int, n: int) -> NDArray[np.int32]:
        """Per node row 0..n-1: the code of the HyperNode of the highest tier <= `tier`
        holding it (MISSING: none)."""
        self._ensure_columns()
        below = [t for t in self._tiers if t <= tier]
        if not below or n == 0:
            return np.full(n, MISSING, dtype=np.int32)
        column = self._columns[below[-1]]
        if len(column) < n:
            self._grow(n)
            column = self._columns[below[-1]]
        return column[:n]

    def nodes_in(self, name: str) -> list[str]:
        """The nodes a HyperNode in force holds (directly or through its members)."""
        tier = self.tier_of(name)
        if tier is None:
            return []
        n = self._table.n
        rows = np.flatnonzero(self.column(tier, n) == self._code[name])
        return [self._table.names[int(r)] for r in rows]

    # ---- nodes (told by ClusterState) ----------------------------------------------

    def node_changed(self, row: int) -> None:
        """A node added or changed at `row`: its HyperNodes, and its row of the columns."""
        if not self._parsed and not self._of_node:
            return
        table = self._table
        name = table.names[row]
        labels = table.nodes[row].metadata.labels
        hits = set(self._exact.get(name, ()))
        cached = self._regex_hits.get(name)
        if cached is None:
            cached = frozenset(
                h for h, patterns in self._patterns.items() if any(p.search(name) for p in patterns)
            )
            self._regex_hits[name] = cached
        hits |= cached
        hits.update(
            h
            for h, keys in self._label_selectors.items()
            if any(key_matches(key, labels) for key in keys)
        )
        old = self._of_node.get(name, frozenset())
        if hits != old:
            for h in old - hits:
                self._direct.get(h, set()).discard(name)
            for h in hits - old:
                self._direct.setdefault(h, set()).add(name)
            if hits:
                self._of_node[name] = frozenset(hits)
            else:
                self._of_node.pop(name, None)
            self.version += 1
        if self._columns and not self._columns_stale and not self._structure_stale:
            if row >= len(next(iter(self._columns.values()))):
                self._grow(row + 1)
            for i, tier in enumerate(self._tiers):
                self._columns[tier][row] = self._row_code(hits, i)

    def node_removed(self, name: str, row: int, last: int) -> None:
        """Node `name` was removed from `row`; the table moved row `last` into it."""
        self._regex_hits.pop(name, None)
        hits = self._of_node.pop(name, None)
        if hits:
            for h in hits:
                self._direct.get(h, set()).discard(name)
            self.version += 1
        for column in self._columns.values():
            if last < len(column):
                if row != last:
                    column[row] = column[last]
                column[last] = MISSING

    # ---- internals -----------------------------------------------------------------

    def _changed(self) -> None:
        self._structure_stale = True
        self._columns_stale = True
        self.version += 1

    def _index_selectors(
        self, hypernode: str, before: _Parsed | None, after: _Parsed | None
    ) -> None:
        """Bring the node-side indexes from `before`'s node selectors to `after`'s."""
        if before is not None:
            for node in before.node_names:
                found = self._exact.get(node)
                if found is not None:
                    found.discard(hypernode)
                    if not found:
                        del self._exact[node]
        patterns = [rx for rx, _ in after.node_patterns] if after is not None else []
        if [p.pattern for p in patterns] != [p.pattern for p in self._patterns.get(hypernode, [])]:
            self._regex_hits.clear()  # answers kept per node name: asked again when needed
        self._patterns.pop(hypernode, None)
        self._label_selectors.pop(hypernode, None)
        if after is None:
            return
        for node in after.node_names:
            self._exact.setdefault(node, set()).add(hypernode)
        if patterns:
            self._patterns[hypernode] = patterns
        if after.node_labels:
            self._label_selectors[hypernode] = [key for key, _ in after.node_labels]

    def _match_all(self, parsed: _Parsed) -> set[str]:
        """The nodes `parsed` selects directly, over every node at once."""
        table = self._table
        n = table.n
        out = {node for node in parsed.node_names if node in table.row_of}
        names = table.names
        for rx, _ in parsed.node_patterns:
            search = rx.search
            out.update(node for node in names if search(node))
        for key, _ in parsed.node_labels:
            mask = table.labels.selector_mask(key, n)
            out.update(table.names_array[:n][mask].tolist())
        return out

    def _set_direct(self, hypernode: str, nodes: set[str]) -> None:
        old = self._direct.pop(hypernode, set())
        if nodes:
            self._direct[hypernode] = nodes
        for node in old - nodes:
            hits = self._of_node.get(node, frozenset()) - {hypernode}
            if hits:
                self._of_node[node] = hits
            else:
                self._of_node.pop(node, None)
        for node in nodes - old:
            self._of_node[node] = self._of_node.get(node, frozenset()) | {hypernode}

    def _ensure_structure(self) -> None:
        if not self._structure_stale:
            return
        self._structure_stale = False
        self._columns_stale = True
        parsed = self._parsed
        names = sorted(parsed)
        # Member HyperNodes of each HyperNode (known ones only), with the field naming them.
        children: dict[str, dict[str, str]] = {}
        for name in names:
            p = parsed[name]
            kids = {c: where for c, where in p.member_names.items() if c in parsed}
            for rx, where in p.member_patterns:
                for other in names:
                    if other not in kids and rx.search(other):
                        kids[other] = where
            children[name] = kids
        problems: dict[str, str] = {}
        for component in _cycles(names, children):
            inside = set(component)
            for name in component:
                first = min(c for c in children[name] if c in inside)
                path = " -> ".join(_path_back(name, first, inside, children))
                problems[name] = str(
                    ManifestError(
                        KIND,
                        name,
                        children[name][first],
                        f"member HyperNode {first} leads back to this one ({path}): "
                        "HyperNodes cannot be members of each other; the HyperNode is "
                        "skipped",
                    )
                )
        for name in names:
            if name in problems:
                continue
            tier = parsed[name].tier
            for child, where in children[name].items():
                if child in problems or parsed[child].tier < tier:
                    continue
                problems[name] = str(
                    ManifestError(
                        KIND,
                        name,
                        where,
                        f"member HyperNode {child} has tier {parsed[child].tier}, not lower "
                        f"than this one's tier {tier}; the HyperNode is skipped",
                    )
                )
                break
        self._structure_problems = problems
        valid = [n for n in names if n not in problems]
        self._valid = set(valid)
        self._names = valid
        self._code = {n: i for i, n in enumerate(valid)}
        self._code_tier = np.array([parsed[n].tier for n in valid], dtype=np.int64)
        self._tiers = tuple(sorted({parsed[n].tier for n in valid}))
        self._tier_names = {}
        for n in valid:
            if parsed[n].tier_name:
                self._tier_names.setdefault(parsed[n].tier_name, parsed[n].tier)
        # Every HyperNode with the ones above it (a parent's tier is higher: parents
        # first, by decreasing tier).
        parents: dict[str, list[str]] = {}
        for name in valid:
            for child in children[name]:
                if child in self._valid:
                    parents.setdefault(child, []).append(name)
        up: dict[str, set[str]] = {}
        for name in sorted(valid, key=lambda n: -parsed[n].tier):
            above = {name}
            for parent in parents.get(name, ()):
                above |= up[parent]
            up[name] = above
        self._best = {}
        for name in valid:
            per_tier = []
            for tier in self._tiers:
                eligible = [h for h in up[name] if parsed[h].tier <= tier]
                if eligible:
                    top = max(eligible, key=lambda h: (parsed[h].tier, -self._code[h]))
                    per_tier.append(self._code[top])
                else:
                    per_tier.append(MISSING)
            self._best[name] = per_tier

    def _rank(self, code: int) -> tuple[int, int]:
        """Which of a node's HyperNodes names its domain: the highest tier, then the
        first by name."""
        return (int(self._code_tier[code]), -code)

    def _row_code(self, hits: Iterable[str], tier_index: int) -> int:
        best = MISSING
        for h in hits:
            per_tier = self._best.get(h)
            if per_tier is None:
                continue
            code = per_tier[tier_index]
            if code != MISSING and (best == MISSING or self._rank(code) > self._rank(best)):
                best = code
        return best

    def _ensure_columns(self) -> None:
        self._ensure_structure()
        if not self._columns_stale:
            return
        self._columns_stale = False
        table = self._table
        capacity = max(len(table.names_array), table.n)
        columns = {t: np.full(capacity, MISSING, dtype=np.int32) for t in self._tiers}
        rows = {h: table.rows(self._direct[h]) for h in self._names if self._direct.get(h)}
        for i, tier in enumerate(self._tiers):
            column = columns[tier]
            order = sorted(
                (self._rank(self._best[h][i]), h) for h in rows if self._best[h][i] != MISSING
            )
            for _, h in order:  # lowest rank first: the highest-ranked HyperNode wins
                column[rows[h]] = self._best[h][i]
        self._columns = columns

    def _grow(self, size: int) -> None:
        for tier, column in list(self._columns.items()):
            grown = np.full(max(size, 2 * len(column)), MISSING, dtype=np.int32)
            grown[: len(column)] = column
            self._columns[tier] = grown

    def objects(self) -> Mapping[str, HyperNode]:
        return self._objects


def _cycles(names: list[str], children: dict[str, dict[str, str]]) -> list[list[str]]:
    """The HyperNodes that are members of each other: the strongly connected components
    of the membership graph that hold a cycle (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for root in names:
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, list(children[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                child = pending.pop()
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, list(children[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in children[node]:
                    components.append(component)
    return components


def _path_back(
    start: str, first: str, inside: set[str], children: dict[str, dict[str, str]]
) -> list[str]:
    """HyperNodes from `start` through its member `first` back to `start`, inside one
    strongly connected component (breadth first: a shortest way back)."""
    if first == start:
        return [start, start]
    previous = {first: start}
    frontier = [first]
    while frontier and start not in previous:
        nxt = []
        for node in frontier:
            for child in sorted(children[node]):
                if child in inside and child not in previous:
                    previous[child] = node
                    nxt.append(child)
        frontier = nxt
    path = [start]
    node = previous[start]
    while node != start:
        path.append(node)
        node = previous[node]
    path.append(start)
    path.reverse()
    return path
