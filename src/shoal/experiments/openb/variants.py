"""Policy variants of the dynamic replay: a base policy plus `+suffix` options.

`FGD+reservation` is FGD with the `LargeJobReservation` plugin (reservations for waiting
large pods, with backfill), `FGD+protect` is FGD with idle-node protection only, and
`FGD+reservation+protect` both (see `shoal.gang.large_jobs`). The plugin's args are its
defaults except where a suffix says otherwise; large means 8 GPUs or more.

`+reservation` reserves after 10 s of waiting (the plugin's default is 60 s) and holds
up to 4 reservations: compressed 30000x, the whole default trace arrives within about
7 minutes, so a reservation that starts a minute late only sees the cluster drain, with
no new small work left to keep off (chosen on seeds 0-1, not on the reported 42-51).
"""

from __future__ import annotations

from typing import Any

from shoal.config.types import KubeSchedulerConfiguration
from shoal.experiments.openb.runner import policy_name

__all__ = ["SUFFIXES", "split_policy", "variant_config", "variant_name"]

PLUGIN = "LargeJobReservation"
# suffix -> the plugin args it sets
SUFFIXES: dict[str, dict[str, Any]] = {
    "reservation": {"maxReservations": 4, "reservationAfterSeconds": 10},
    "protect": {"protectIdle": True},
}
# The protection is a preference, not a rule: weight 2 makes it outweigh any one
# policy score (0..100) when the policy cannot tell nodes apart by much.
_PROTECT_WEIGHT = 2


def split_policy(policy: str) -> tuple[str, tuple[str, ...]]:
    """("FGD", ("reservation",)) for "FGD+reservation"; unknown names raise ValueError."""
    base, *suffixes = [part.strip() for part in policy.split("+")]
    name = policy_name(base)
    seen: list[str] = []
    for suffix in suffixes:
        key = suffix.lower()
        if key not in SUFFIXES:
            raise ValueError(
                f"unknown policy option {suffix!r} in {policy!r} "
                f"(known: {', '.join('+' + s for s in SUFFIXES)})"
            )
        if key not in seen:
            seen.append(key)
    return name, tuple(seen)


def variant_name(policy: str) -> str:
    name, suffixes = split_policy(policy)
    return "+".join((name, *suffixes))


def variant_config(
    config: KubeSchedulerConfiguration, suffixes: tuple[str, ...]
) -> KubeSchedulerConfiguration:
    """`config` (the protocol's lean profile) with LargeJobReservation enabled as the
    suffixes say (unchanged when there are none)."""
    if not suffixes:
        return config
    args: dict[str, Any] = {"maxReservations": 0}
    for suffix in suffixes:
        args.update(SUFFIXES[suffix])
    data = config.model_dump(by_alias=True, exclude_none=True)
    profile = data["profiles"][0]
    enabled = profile["plugins"]["multiPoint"]["enabled"]
    weight = _PROTECT_WEIGHT if args.get("protectIdle") else 1
    # Before the binder, after the policy: Reserve runs after GpuShare's.
    enabled.insert(len(enabled) - 1, {"name": PLUGIN, "weight": weight})
    profile["pluginConfig"].append({"name": PLUGIN, "args": args})
    return KubeSchedulerConfiguration.model_validate(data)
