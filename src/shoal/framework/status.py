"""Status: what an extension point returns, with kube-scheduler's codes."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["Code", "Status"]


class Code(IntEnum):
    """kube-scheduler framework status codes (same names, same meaning)."""

    SUCCESS = 0
    ERROR = 1  # internal error: the pod is retried with backoff
    UNSCHEDULABLE = 2  # may fit after preemption or a cluster change
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3  # preemption would not help on this node
    # Permit: hold the pod until allowed, denied or timed out. Bind: a `Bind` effect went
    # out, its outcome comes back as an event.
    WAIT = 4
    SKIP = 5  # PreFilter/PreScore: the plugin has nothing to do for this pod
    PENDING = 6  # the pod waits for something outside the scheduler (e.g. gang members)


class Status:
    """A result code, human-readable reasons and the plugin that produced it.

    `resolvable_by_preemption`: set by a PreFilter on an UNSCHEDULABLE rejection that
    removing running pods could resolve on any node alike (a queue at its max). kube
    gives a PreFilter's status to every node (SetAbsentNodesStatus) so preemption may
    try them all; Shoal does so only for a rejection flagged this way, and reads any
    other PreFilter rejection as saying nothing about nodes (no victim search).

    `retry_after`: on a PENDING answer that time alone will change (a PostFilter acting
    after a delay, e.g. reclaim), the seconds until it may: the pod is tried again by
    then, whatever its backoff.
    """

    __slots__ = ("code", "plugin", "reasons", "resolvable_by_preemption", "retry_after")

    def __init__(
        self,
        code: Code = Code.SUCCESS,
        *reasons: str,
        plugin: str = "",
        resolvable_by_preemption: bool = False,
        retry_after: float | None = None,
    ) -> None:
        self.code = code
        self.reasons: tuple[str, ...] = reasons
        self.plugin = plugin
        self.resolvable_by_preemption = resolvable_by_preemption
        self.retry_after = retry_after

    @classmethod
    def error(cls, message: str, plugin: str = "") -> Status:
        return cls(Code.ERROR, message, plugin=plugin)

    @property
    def ok(self) -> bool:
        return self.code == Code.SUCCESS

    @property
    def rejected(self) -> bool:
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.PENDING)

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)

    def with_plugin(self, plugin: str) -> Status:
        if not self.plugin:
            self.plugin = plugin
        return self

    def __repr__(self) -> str:
        who = f" by {self.plugin}" if self.plugin else ""
        why = f": {self.message}" if self.reasons else ""
        return f"<Status {self.code.name}{who}{why}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Status):
            return NotImplemented
        return self.code == other.code and self.reasons == other.reasons

    def __hash__(self) -> int:
        return hash((self.code, self.reasons))


SUCCESS = Status()
