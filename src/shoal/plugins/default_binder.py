"""DefaultBinder (Bind): binds through the effects port (the pods/binding subresource in
a cluster, the in-memory cluster in the simulator), with the annotations PreBind plugins
asked for (`shoal.framework.effects.annotate`)."""

from __future__ import annotations

from typing import Any

from shoal.api.podinfo import PodInfo
from shoal.framework.cycle_state import CycleState
from shoal.framework.effects import BindError, annotations_of
from shoal.framework.handle import Handle
from shoal.framework.status import Code, Status

__all__ = ["NAME", "DefaultBinder"]

NAME = "DefaultBinder"


class DefaultBinder:
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    async def bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        try:
            await self.handle.effects.bind(pod, node, annotations_of(state))
        except BindError as err:
            return Status(Code.ERROR, f"binding rejected: {err}")
        return Status()

    @classmethod
    def new(cls, args: Any, handle: Handle) -> DefaultBinder:
        return cls(handle)
