"""DefaultBinder (Bind): binds through the backend's Binder (the pods/binding
subresource in a cluster, an in-memory assignment in the simulator)."""

from __future__ import annotations

from typing import Any

from shoal.api.podinfo import PodInfo
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import BindError, Handle
from shoal.framework.status import Code, Status

__all__ = ["NAME", "DefaultBinder"]

NAME = "DefaultBinder"


class DefaultBinder:
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    async def bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        try:
            await self.handle.binder.bind(pod, node)
        except BindError as err:
            return Status(Code.ERROR, f"binding rejected: {err}")
        return Status()

    @classmethod
    def new(cls, args: Any, handle: Handle) -> DefaultBinder:
        return cls(handle)
