"""Gang scheduling policy: pod groups and their manager, head-of-line reservation,
topology domains. The all-or-nothing transaction itself is the core's gang cycle
(`shoal.scheduler.gang_cycle`)."""

from shoal.gang.manager import GangManager, Group
from shoal.gang.reservation import GangConfig
from shoal.gang.topology import DomainChoice, choose_domains

__all__ = ["DomainChoice", "GangConfig", "GangManager", "Group", "choose_domains"]
