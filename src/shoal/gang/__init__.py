"""Gang scheduling policy: pod groups and their manager, head-of-line reservation,
topology domains. The all-or-nothing transaction itself is the core's gang cycle
(`shoal.scheduler.gang_cycle`); the Coscheduling plugin (`shoal.plugins.coscheduling`)
turns it on per profile."""

from shoal.gang.manager import GangConfig, GangManager, Group, Reservation
from shoal.gang.topology import DomainChoice, choose_domains

__all__ = [
    "DomainChoice",
    "GangConfig",
    "GangManager",
    "Group",
    "Reservation",
    "choose_domains",
]
