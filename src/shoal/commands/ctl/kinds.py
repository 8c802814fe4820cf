"""The resources `shoal get` shows, and every name kubectl users write them by: singular,
plural, short and group-qualified (`queues.shoal.dev`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ALIASES",
    "KINDS",
    "NO_POOL",
    "PODGROUP_KIND",
    "POOL_KIND",
    "QUEUE_KIND",
    "SHARD_KIND",
    "Kind",
    "accepted_names",
]

NO_POOL = "(no pool)"  # clusterview's row of the nodes in no NodePool


@dataclass(frozen=True)
class Kind:
    """A resource `shoal get` shows, and the names it answers to."""

    command: str  # shoal get's canonical name (its subcommand)
    resource: str  # kubectl's plural, as in NotFound errors
    singular: str  # kubectl's singular, as in `-o name`
    groups: tuple[str, ...]  # API groups it is read from (group-qualified names)
    short: tuple[str, ...]  # other names: the CRD's shortNames and habits
    namespaced: bool

    @property
    def names(self) -> tuple[str, ...]:
        """Every name it answers to, canonical first (without the group-qualified)."""
        plain = (self.command, self.resource, self.singular, *self.short)
        return tuple(dict.fromkeys(plain))


QUEUE_KIND = Kind("queues", "queues", "queue", ("shoal.dev",), ("q", "sq"), False)
PODGROUP_KIND = Kind(
    "podgroups",
    "podgroups",
    "podgroup",
    ("scheduling.x-k8s.io", "scheduling.sigs.k8s.io", "scheduling.volcano.sh"),
    ("pg", "pgs"),
    True,
)
POOL_KIND = Kind("pools", "nodepools", "nodepool", ("shoal.dev",), ("pool", "np"), False)
SHARD_KIND = Kind("shards", "shards", "shard", (), (), False)  # Leases, not an API resource
KINDS = (QUEUE_KIND, PODGROUP_KIND, POOL_KIND, SHARD_KIND)


def _aliases() -> dict[str, tuple[Kind, str | None]]:
    """name -> (kind, the API group it names, None for any)."""
    out: dict[str, tuple[Kind, str | None]] = {}
    for kind in KINDS:
        for name in kind.names:
            out[name] = (kind, None)
        for group in kind.groups:
            for name in (kind.resource, kind.singular):
                out[f"{name}.{group}"] = (kind, group)
    return out


ALIASES = _aliases()


def accepted_names() -> str:
    kinds = "; ".join(f"{k.command} ({', '.join(k.names[1:])})" for k in KINDS)
    return (
        f"{kinds}; or group-qualified, as queues.shoal.dev, podgroups.scheduling.x-k8s.io, "
        "nodepools.shoal.dev; or TYPE/NAME, as queue/team"
    )
