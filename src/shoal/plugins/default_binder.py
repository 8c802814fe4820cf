"""DefaultBinder (Bind): binds through the effects port (the pods/binding subresource in
a cluster, the in-memory cluster in the simulator), with the annotations PreBind plugins
asked for (`shoal.framework.effects.annotate`). It does not wait: the `Bind` effect's
outcome comes back to the core as an event and ends the binding cycle."""

from __future__ import annotations

from typing import Any

from shoal.api.podinfo import PodInfo
from shoal.framework.cycle_state import CycleState
from shoal.framework.effects import Bind, annotations_of
from shoal.framework.handle import Handle
from shoal.framework.status import Code, Status

__all__ = ["NAME", "DefaultBinder"]

NAME = "DefaultBinder"


class DefaultBinder:
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        self.handle.effects.emit(Bind(pod, node, annotations_of(state)))
        return Status(Code.WAIT)

    @classmethod
    def new(cls, args: Any, handle: Handle) -> DefaultBinder:
        return cls(handle)
