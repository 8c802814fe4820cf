"""Gang scheduling: pod groups, the manager, the all-or-nothing gang cycle, topology."""

from shoal.gang.cycle import GangConfig, schedule_gang
from shoal.gang.manager import GangManager, Group
from shoal.gang.topology import DomainChoice, choose_domains

__all__ = ["DomainChoice", "GangConfig", "GangManager", "Group", "choose_domains", "schedule_gang"]
