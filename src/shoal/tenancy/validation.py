"""Validate tenant queue objects one by one: reject the bad ones, apply the rest.

Queues, ElasticQuotas, QueueBindings and NodePools refer to each other by name (a queue
names its parent and its pools, a binding its queue, a pool the queues it is reserved
for), so a problem can involve several objects. The set in force is always valid, so
every problem involves a change: a new or edited object, or a deletion. `reconcile`
blames each problem on the change that caused it and undoes just that change: an edit
is rejected (the version in force stays), a new object is left out, and a deletion
that an object in force still depends on waits (the deleted object stays in force) until
the dependent changes. Objects that depend on a rejected one are rejected too and say
so. This repeats until the rest is consistent, which takes at most one round per change.
Every rejected object gets a message naming it, the field and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from shoal.api.queue import DEFAULT_QUEUE, ElasticQuota, NodePool, Queue, QueueBinding
from shoal.tenancy.tree import Issue, QueueDef, QueueTree, TreeError, queue_issues

__all__ = ["TenancyObjects", "problem_subject", "reconcile"]

Kind = Literal["Queue", "ElasticQuota", "QueueBinding", "NodePool"]

_SUBJECT = re.compile(r"^(?P<kind>Queue|QueueBinding|NodePool|ElasticQuota) (?P<name>[^\s:]+):")


def problem_subject(problem: str) -> tuple[str, str] | None:
    """The object a problem names first: (kind, name), an ElasticQuota's name as
    `namespace/name`; None for a problem that names none."""
    match = _SUBJECT.match(problem)
    return None if match is None else (match["kind"], match["name"])


@dataclass
class TenancyObjects:
    queues: dict[str, Queue] = field(default_factory=dict)  # by name
    elastic: dict[str, ElasticQuota] = field(default_factory=dict)  # by namespace
    bindings: dict[str, QueueBinding] = field(default_factory=dict)
    pools: dict[str, NodePool] = field(default_factory=dict)

    def copy(self) -> TenancyObjects:
        return TenancyObjects(
            dict(self.queues), dict(self.elastic), dict(self.bindings), dict(self.pools)
        )

    def of_kind(self, kind: Kind) -> dict[str, object]:
        table: dict[str, dict[str, object]] = {
            "Queue": self.queues,  # type: ignore[dict-item]
            "ElasticQuota": self.elastic,  # type: ignore[dict-item]
            "QueueBinding": self.bindings,  # type: ignore[dict-item]
            "NodePool": self.pools,  # type: ignore[dict-item]
        }
        return table[kind]

    def defs(self, default_queue: str = DEFAULT_QUEUE) -> dict[str, QueueDef]:
        """Queue definitions by queue name (an unnamed Queue and an ElasticQuota whose
        namespace is also a Queue's name are left out: they are problems of their own)."""
        out = {name: QueueDef.from_queue(q) for name, q in self.queues.items() if name}
        for namespace, eq in self.elastic.items():
            out.setdefault(namespace, QueueDef.from_elastic_quota(eq))
        if default_queue not in out:
            out[default_queue] = QueueDef(name=default_queue, source="default")
        return defaulted_guarantees(out)


def defaulted_guarantees(defs: dict[str, QueueDef]) -> dict[str, QueueDef]:
    """A parent queue that sets no guarantee for a resource its children guarantee is
    guaranteed their sum (bottom up), instead of 0 (which would reject every child).
    YuniKorn reads an unset parent guarantee as unconstrained, Volcano's hierarchy checks
    children only against a guarantee that is set; taking the sum keeps the rule
    "children's guarantees fit in the parent's" true, and the parent's status says
    so (`QueueDef.defaulted`). A guarantee set explicitly, even 0, is kept."""
    kids: dict[str, list[str]] = {}
    for d in defs.values():
        if d.parent and d.parent in defs and d.parent != d.name:
            kids.setdefault(d.parent, []).append(d.name)
    if not kids:
        return defs
    out = dict(defs)
    done: set[str] = set()

    def visit(name: str, path: frozenset[str]) -> None:
        if name in done or name in path:  # a cycle is a problem of its own
            return
        for kid in kids.get(name, ()):
            visit(kid, path | {name})
        done.add(name)
        d = out[name]
        if d.source != "Queue" or name not in kids:
            return
        total: dict[str, int] = {}
        for kid in kids[name]:
            for res, amount in out[kid].guaranteed.items():
                total[res] = total.get(res, 0) + amount
        added = {r: v for r, v in total.items() if r not in d.guaranteed and v > 0}
        if added:
            out[name] = replace(
                d, guaranteed={**d.guaranteed, **added}, defaulted=tuple(sorted(added))
            )

    for name in defs:
        visit(name, frozenset())
    return out


def reconcile(
    in_force: TenancyObjects, desired: TenancyObjects, default_queue: str = DEFAULT_QUEUE
) -> tuple[TenancyObjects, list[str]]:
    """The objects to apply (desired, minus what is rejected) and the problems found.
    `in_force` must be valid (it is what `reconcile` returned before)."""
    cand = desired.copy()
    problems: list[str] = []
    dropped: set[tuple[Kind, str]] = set()  # new objects rejected in this round
    in_defs = in_force.defs(default_queue)
    # Each round undoes at least one change (or brings back one deleted object), and a
    # change is undone at most once.
    limit = 2 + sum(
        len(d) for o in (in_force, desired) for d in (o.queues, o.elastic, o.bindings, o.pools)
    )
    for _ in range(limit):
        issues = _issues(in_force, in_defs, cand, dropped, default_queue)
        if not issues:
            break
        progressed = False
        for issue in issues:
            if issue.message not in problems:
                problems.append(issue.message)
            progressed |= _undo(issue, in_force, cand, dropped)
        if not progressed:
            cand = in_force.copy()
            break
    else:
        cand = in_force.copy()
    try:
        QueueTree(cand.defs(default_queue).values(), default_queue)
    except TreeError as err:  # a gap in the checks above: keep what is in force
        problems += err.problems
        cand = in_force.copy()
    return cand, problems


def _undo(
    issue: Issue,
    in_force: TenancyObjects,
    cand: TenancyObjects,
    dropped: set[tuple[Kind, str]],
) -> bool:
    kind, key = _resolve(issue, in_force, cand)
    now = cand.of_kind(kind)
    before = in_force.of_kind(kind).get(key)
    if issue.restore:
        if before is None or now.get(key) is before:
            return False
        now[key] = before
        return True
    if key not in now:
        return False
    if before is not None and now[key] is not before:
        now[key] = before  # a rejected edit: the version in force stays
    else:
        del now[key]
        dropped.add(("Queue" if kind == "ElasticQuota" else kind, key))
    return True


def _resolve(issue: Issue, in_force: TenancyObjects, cand: TenancyObjects) -> tuple[Kind, str]:
    kind, key = issue.blame
    if kind == "Queue":
        where = in_force if issue.restore else cand
        if key not in where.queues and key in where.elastic:
            return "ElasticQuota", key
        return "Queue", key
    if kind in ("ElasticQuota", "QueueBinding", "NodePool"):
        return kind, key  # type: ignore[return-value]
    raise ValueError(f"unknown kind {kind!r}")


def _issues(
    in_force: TenancyObjects,
    in_defs: dict[str, QueueDef],
    cand: TenancyObjects,
    dropped: set[tuple[Kind, str]],
    default_queue: str,
) -> list[Issue]:
    issues: list[Issue] = []
    if "" in cand.queues:
        issues.append(Issue("Queue <unnamed>: metadata.name is required", ("Queue", "")))
    for name in cand.queues.keys() & cand.elastic.keys():
        eq = cand.elastic[name]
        message = (
            f"ElasticQuota {name}/{eq.metadata.name}: namespace {name} is also the name of "
            f"Queue {name}, and a queue is defined once; rename the Queue or bind namespace "
            f"{name} to it with a QueueBinding instead"
        )
        old_eq, old_q = in_force.elastic.get(name), in_force.queues.get(name)
        q_changed = old_q is None or QueueDef.from_queue(old_q) != QueueDef.from_queue(
            cand.queues[name]
        )
        eq_changed = old_eq is None or QueueDef.from_elastic_quota(
            old_eq
        ) != QueueDef.from_elastic_quota(eq)
        if eq_changed or not q_changed:
            issues.append(Issue(message, ("ElasticQuota", name)))
        if q_changed:
            issues.append(
                Issue(
                    f"Queue {name}: ElasticQuota {name}/{eq.metadata.name} makes namespace "
                    f"{name} a queue of that name, and a queue is defined once; rename the "
                    "Queue or remove the ElasticQuota",
                    ("Queue", name),
                )
            )
    defs = cand.defs(default_queue)

    def changed(name: str) -> bool:
        return in_defs.get(name) != defs.get(name)

    dropped_queues = frozenset(k for kind, k in dropped if kind == "Queue")
    deleted = frozenset(in_defs.keys() - defs.keys())
    issues += queue_issues(defs, changed, dropped_queues, deleted)
    if issues:
        return issues  # references to queues are checked once the queues are sound
    issues += _binding_issues(in_force, cand, defs, changed, dropped_queues, deleted)
    issues += _pool_issues(in_force, cand, defs, dropped_queues, deleted)
    return issues


def _missing(
    subject: str,
    blame: tuple[str, str],
    name: str,
    kind: str,
    is_changed: bool,
    dropped: frozenset[str],
    deleted: frozenset[str],
    fix: str,
) -> Issue:
    """`subject` refers to `name` (of `kind`), which is not there."""
    if is_changed or name not in deleted:
        if name in dropped:
            return Issue(
                f"{subject} was rejected (see its own problem); fix {kind} {name} first", blame
            )
        return Issue(f"{subject} does not exist; create the {kind} or fix the name", blame)
    return Issue(
        f"{subject} is being deleted; {fix} first ({kind} {name} stays in force until then)",
        (kind, name),
        restore=True,
    )


def _binding_issues(
    in_force: TenancyObjects,
    cand: TenancyObjects,
    defs: dict[str, QueueDef],
    changed: Callable[[str], bool],
    dropped: frozenset[str],
    deleted: frozenset[str],
) -> list[Issue]:
    issues: list[Issue] = []
    parents = {d.parent for d in defs.values() if d.parent}
    for name, b in cand.bindings.items():
        q = b.spec.queue
        old = in_force.bindings.get(name)
        is_changed = old is None or old.spec != b.spec
        where = f"QueueBinding {name}: spec.queue"
        if q not in defs:
            issues.append(
                _missing(
                    f"{where} {q!r}",
                    ("QueueBinding", name),
                    q,
                    "Queue",
                    is_changed,
                    dropped,
                    deleted,
                    "delete this binding or change spec.queue",
                )
            )
        elif q in parents:
            new_children = [d for d in defs.values() if d.parent == q and changed(d.name)]
            if is_changed or not new_children:
                issues.append(
                    Issue(
                        f"{where} {q!r} is not a leaf queue; only leaves hold workloads",
                        ("QueueBinding", name),
                    )
                )
            else:
                issues += [
                    Issue(
                        f"{d.ref}: spec.parent {q!r} is bound by QueueBinding {name}, and only "
                        "leaf queues hold workloads; point the binding at a leaf first",
                        ("Queue", d.name),
                    )
                    for d in new_children
                ]
    issues += _shared_namespaces(in_force, cand)
    return issues


def _shared_namespaces(in_force: TenancyObjects, cand: TenancyObjects) -> list[Issue]:
    """A namespace listed by two QueueBindings: a namespace has one queue, so the
    binding that lists it second is refused, naming both (bindings in force keep theirs;
    among new or changed ones, the first by name keeps it)."""
    issues: list[Issue] = []
    claimed: dict[str, str] = {}
    ordered = sorted(
        cand.bindings.items(),
        key=lambda item: (in_force.bindings.get(item[0]) != item[1], item[0]),
    )
    for name, b in ordered:
        for namespace in b.spec.namespaces:
            holder = claimed.setdefault(namespace, name)
            if holder != name:
                other = cand.bindings[holder].spec.queue
                issues.append(
                    Issue(
                        f"QueueBinding {name}: spec.namespaces: namespace {namespace!r} is "
                        f"already bound by QueueBinding {holder} (queue {other}); a namespace "
                        "has one queue: list it in one binding only",
                        ("QueueBinding", name),
                    )
                )
    return issues


def _pool_issues(
    in_force: TenancyObjects,
    cand: TenancyObjects,
    defs: dict[str, QueueDef],
    dropped: frozenset[str],
    deleted: frozenset[str],
) -> list[Issue]:
    issues: list[Issue] = []
    for name, pool in cand.pools.items():
        old = in_force.pools.get(name)
        is_changed = old is None or old.spec != pool.spec
        for q in pool.spec.exclusive_to:
            if q in defs:
                continue
            issues.append(
                _missing(
                    f"NodePool {name}: spec.exclusiveTo queue {q!r}",
                    ("NodePool", name),
                    q,
                    "Queue",
                    is_changed,
                    dropped,
                    deleted,
                    "remove it from the list",
                )
            )
    # A queue may list pools that do not exist (yet): its pods wait, no node being in
    # its pools, and say so.
    return issues
