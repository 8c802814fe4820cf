"""The scheduling core on a thread of its own, and the two ways across.

In a cluster the backend runs on two event loops:

* the **I/O loop** (the one `shoal run` starts on) does only I/O: informers, binds and
  every other API write, the lease, /healthz, /readyz, /metrics, the dashboard and the
  admission webhooks;
* the **core loop**, on the thread `CoreThread` starts, runs the scheduler: the driver
  loop and every change to the core's state (informer updates and bind outcomes are
  posted to it, in order). Nothing there awaits I/O: a bind is an effect, its outcome
  an event.

A slow HTTP extender, a long preemption what-if or a 5000-node scoring pass therefore
delays decisions only: the I/O loop keeps answering probes, reading watches, sending
binds already decided and renewing the lease.

The ways across:

* `CoreThread.post(fn, *args)`: run `fn` on the core loop after everything posted before
  it (the inbox; informer events keep their order). Used by the I/O side for every
  update of the core's state.
* `CoreThread.call(fn)`: run `fn` on the core loop and await its result from the I/O
  loop (reads of the core's state: metrics exposition, dashboard frames, webhook
  lookups). The I/O loop is free while it waits.
* `CoreThread.run(coro)`: run a coroutine on the core loop (the scheduling loop) and
  await it from the I/O loop.
* `IoPort.post(fn, *args)` / `IoPort.run(coro)`: the same in the other direction, for
  what the core hands to the cluster (effects, events).

Before `start` and after `stop` (a passive backend never starts one, and tests that
drive the backend's handlers directly) every one of these runs inline on the caller.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from shoal.framework.effects import Effect

__all__ = ["CoreThread", "IoPort", "ThreadedEffects"]

log = logging.getLogger("shoal.kube.core")

T = TypeVar("T")


class CoreThread:
    """An event loop on a thread of its own, fed through an ordered inbox."""

    def __init__(self, name: str = "shoal-core") -> None:
        self.name = name
        self.handled = 0  # inbox items run on the core loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._inbox: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._lock = threading.Lock()
        self._draining = False  # a drain of the inbox is scheduled on the core loop
        self._halted = False

    @property
    def running(self) -> bool:
        return self._loop is not None

    def on_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    @property
    def backlog(self) -> int:
        """Inbox items not run yet."""
        return len(self._inbox)

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} already started")
        ready = threading.Event()
        loop = asyncio.new_event_loop()

        def main() -> None:
            asyncio.set_event_loop(loop)
            ready.set()
            try:
                loop.run_forever()
            finally:
                _close(loop)

        self._thread = threading.Thread(target=main, name=self.name, daemon=True)
        self._thread.start()
        ready.wait()
        self._loop = loop
        with self._lock:
            if self._inbox and not self._draining:
                self._draining = True
                loop.call_soon_threadsafe(self._drain)

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop the core loop (after the callback it is running, e.g. a slow extender
        call) and wait for its thread; what is still in the inbox then runs inline."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # already closed (halted before)
            loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, timeout)
        if thread.is_alive():
            log.warning("the core thread did not stop within %.0f s", timeout)
        self._loop = None
        self._thread = None
        self._halted = False
        with self._lock:
            left = list(self._inbox)
            self._inbox.clear()
            self._draining = False
        for fn, args in left:
            self._run_one(fn, args)

    def halt(self) -> None:
        """Ask the core loop to stop, without waiting (its thread then cancels what is
        left on it and ends). Idempotent; `stop` is the waiting form."""
        loop = self._loop
        if loop is None or self._halted:
            return
        self._halted = True  # from now on posts are dropped: nobody waits for them
        with contextlib.suppress(RuntimeError):  # already closed
            loop.call_soon_threadsafe(loop.stop)

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on the core loop, after everything posted before it."""
        loop = self._loop
        if loop is None or self.on_thread():
            fn(*args)
            return
        if self._halted:
            return
        with self._lock:
            self._inbox.append((fn, args))
            if self._draining:
                return
            self._draining = True
        loop.call_soon_threadsafe(self._drain)

    async def call(self, fn: Callable[[], T]) -> T:
        """`fn()` on the core loop (after what was posted before), awaited here."""
        if self._loop is None or self._halted or self.on_thread():
            return fn()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if not done.set_running_or_notify_cancel():
                return
            try:
                done.set_result(fn())
            except BaseException as err:  # handed to the waiter
                done.set_exception(err)

        self.post(run)
        return await asyncio.wrap_future(done)

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the core loop and await it here (cancelling this cancels it)."""
        loop = self._loop
        if loop is None or self.on_thread():
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._inbox:
                    self._draining = False
                    return
                batch = list(self._inbox)
                self._inbox.clear()
            for fn, args in batch:
                self._run_one(fn, args)

    def _run_one(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            fn(*args)
        except Exception:
            # One bad update must not stop the inbox (everything after it still runs).
            log.exception("handling %s on the core failed", getattr(fn, "__name__", fn))
        self.handled += 1


class IoPort:
    """The core's way back to the I/O loop (see the module docstring)."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None

    def attach(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self.loop = loop

    @staticmethod
    def _running_on(loop: asyncio.AbstractEventLoop) -> bool:
        try:
            return asyncio.get_running_loop() is loop
        except RuntimeError:
            return False

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on the I/O loop (inline when already there, or none)."""
        loop = self.loop
        if loop is None or self._running_on(loop):
            fn(*args)
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the I/O loop is closed: the backend is gone
            log.debug("dropped %s: the I/O loop is closed", getattr(fn, "__name__", fn))

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the I/O loop and await it here (cancelling this cancels it)."""
        loop = self.loop
        if loop is None or self._running_on(loop):
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


class _Port(Protocol):
    """What `ThreadedEffects` wraps: the effects port (`KubeEffects`, or a bind-only one)."""

    def emit(self, effect: Effect) -> None: ...


class ThreadedEffects:
    """The effects port as the core sees it: every effect is carried out on the I/O
    loop, in the order the core produced them (a `Bind` after the `BindVolumes` it waits
    for); a bind's outcome comes back into the core's inbox as an event."""

    def __init__(self, inner: _Port, io: IoPort) -> None:
        self.inner = inner
        self.io = io
        # Effects not carried out yet: handed over in batches, one wakeup of the I/O
        # loop for all the effects of a pass rather than one per effect.
        self._batch: list[Effect] = []
        self._lock = threading.Lock()

    def emit(self, effect: Effect) -> None:
        with self._lock:
            self._batch.append(effect)
            first = len(self._batch) == 1
        if first:
            self.io.post(self._carry_out)

    def _carry_out(self) -> None:
        with self._lock:
            batch, self._batch = self._batch, []
        for effect in batch:
            self.inner.emit(effect)


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left on a stopped loop, let it unwind, close the loop."""
    with contextlib.suppress(Exception):
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()
