"""Extenders answered in-process, for tests: the same core path as HTTP extenders (the
wire format included), without a server.

    def answer(verb: str, args: dict) -> object:      # the decoded request body
        if verb == "filter":
            return {"NodeNames": ["n2"], "FailedNodes": {"n1": "busy"}}
        ...

    h = SchedulerHarness(config, extenders=in_process_extenders(config, answer))

`answer` may raise `ExtenderError` to play an extender that is down.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from shoal.config.types import KubeSchedulerConfiguration
from shoal.framework.extender import Extender

__all__ = ["InProcessTransport", "in_process_extenders"]

Answer = Callable[[str, Any], object]


class InProcessTransport:
    """An `ExtenderTransport` calling `answer(verb, request)`; records every call."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.calls: list[tuple[str, Any]] = []

    def send(self, verb: str, body: bytes) -> bytes:
        request = msgspec.json.decode(body)
        self.calls.append((verb, request))
        return msgspec.json.encode(self.answer(verb, request))

    async def send_async(self, verb: str, body: bytes) -> bytes:
        return self.send(verb, body)


def in_process_extenders(config: KubeSchedulerConfiguration, *answers: Answer) -> list[Extender]:
    """One Extender per configured entry, the i-th answered by `answers[i]` (or by the
    last one given)."""
    if not answers:
        raise ValueError("give at least one answer function")
    return [
        Extender(entry, InProcessTransport(answers[min(i, len(answers) - 1)]))
        for i, entry in enumerate(config.extenders)
    ]
