"""The Kubernetes backend: informers -> scheduler core -> binder pool.

    API server ──list+watch──> informers ──add/update/delete──> Scheduler (sans-I/O core)
        ^                                                           │ Driver.run()
        │                                                           v
        ├──── pods/binding <── Bind effects (KubeBinder); outcomes back into the core
        ├──── pods/eviction, pods/status, events <── KubeEffects (the effects port)
        ├──── podgroups/status <── PodGroupStatusWriter (GroupStatus effects)
        ├──── queues/status <── QueueStatusWriter (QueueStatus effects)
        └──── Lease <── LeaderElector (only the leader runs the scheduling loop)

Two event loops (`shoal.drivers.kube.core`): the one `run` is awaited on does only I/O
(informers, API writes, binds, the lease, the HTTP servers); the core (scheduler and
driver loop) runs on a thread of its own with its own loop. Informer updates and bind
outcomes reach the core through its inbox, in order; what the core decides reaches the
cluster through `ThreadedEffects`, carried out on the I/O loop; readers of the core's
state (metrics, dashboard, webhooks) ask the core loop for it (`on_core`). A slow extender or a long
scheduling pass therefore never delays /healthz, watches, binds already decided, status
writes or the lease. Only the core thread touches the core, so it needs no locks.

`KubeBackend` is the composition root: it builds the clients, writers, informers and
the core, and `run` starts and stops them in order. Its parts, each in its own module:
the scheduling loop on the core's thread (`core_loop.SchedulingLoop`), the informer
intake (`intake.Intake`), node shards (`shard_link.ShardLink` over `shards.ShardKeeper`)
and /healthz and /readyz (`health.Health`).

Restart safety. Nothing the scheduler must not lose lives only in its memory:

* Scheduling starts only after every informer delivered its first list, so the cache
  holds every bound pod (bound by anyone: kube-scheduler, `spec.nodeName`, an earlier
  Shoal) before the first decision; pending pods are found in the same list.
* An assumed pod exists only in memory until its Binding is accepted. If Shoal dies
  before that, the pod is still pending in the API and the next leader schedules it; if
  it dies after, the pod is bound in the API and the next leader counts it.
* A pod is never bound twice: the Binding carries the pod's UID and the API server
  refuses a pod that already has a node (409). A bind whose answer is lost is read
  back until the cluster says (`KubeBinder`); the room stays held meanwhile.
* A bind's outcome is an event: whichever comes first, the binder's answer or the
  watch showing the pod bound, ends the binding cycle (`Scheduler.bind_outcome`,
  `Scheduler.update_pod`); an update that does not show the node yet leaves the pod
  assumed (kube's IsAssumedPod), so the core never requeues a pod it is binding.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from shoal.api.manifests import prepare_decoders
from shoal.config.durations import parse_duration
from shoal.config.types import KubeSchedulerConfiguration
from shoal.drivers.extenders import http_extenders
from shoal.drivers.kube.binder import KubeBinder, KubeEvictor
from shoal.drivers.kube.client import JSON, ClientSettings, Connection, KubeClient
from shoal.drivers.kube.core import CoreThread, IoPort, ThreadedEffects
from shoal.drivers.kube.core_loop import LoopPacing, SchedulingLoop
from shoal.drivers.kube.dra import RESOURCE_CLAIMS, ClaimWriter
from shoal.drivers.kube.effects import KubeEffects
from shoal.drivers.kube.health import Health, HealthLimits
from shoal.drivers.kube.informer import Informer, InformerSettings
from shoal.drivers.kube.intake import WATCHED, Intake, Watched
from shoal.drivers.kube.leader import LeaderElector, LeaderSettings, LeadershipLost
from shoal.drivers.kube.resources import (
    ELASTIC_QUOTAS,
    ELASTIC_QUOTAS_SIGS,
    NODES,
    PODS,
    QUEUE_BINDINGS,
    QUEUES,
    ResourceKind,
)
from shoal.drivers.kube.shard_link import ShardLink
from shoal.drivers.kube.shards import DEFAULT_SLOTS, ShardKeeper, ShardSettings
from shoal.drivers.kube.status import (
    BindingStatusWriter,
    EventRecorder,
    PodGroupStatusWriter,
    PodStatusWriter,
    QueueStatusWriter,
    WriterPacing,
)
from shoal.drivers.kube.tenancy import TenancySync
from shoal.drivers.kube.volumes import VolumeWriter
from shoal.framework.effects import Bind, Effect
from shoal.framework.extender import Extender, ExtenderTransport
from shoal.framework.registry import PluginSpec
from shoal.framework.timing import instrument
from shoal.scheduler import Scheduler, new_scheduler
from shoal.web.gpu_census import GpuCensus
from shoal.web.metrics import (
    SchedulerMetrics,
    SchedulerSeries,
    register_gpu_collector,
    register_scheduler_collector,
)
from shoal.web.rescheduler_metrics import register_rescheduler_collector
from shoal.web.server import Check

__all__ = [
    "WATCHED",
    "KubeBackend",
    "KubeOptions",
    "WallClock",
    "Watched",
    "parse_duration",
]

log = logging.getLogger("shoal.kube")

T = TypeVar("T")


class WallClock:
    """Seconds on a monotonic clock (the scheduler only compares and subtracts)."""

    def now(self) -> float:
        return time.monotonic()


# ---- options ---------------------------------------------------------------------------


@dataclass(frozen=True)
class KubeOptions:
    identity: str = "shoal"
    qps: float = 50.0
    burst: int = 100
    bind_concurrency: int = 64
    request_timeout: float = 10.0
    leader_elect: bool = True
    leader: LeaderSettings = field(default_factory=LeaderSettings)
    informer: InformerSettings = field(default_factory=InformerSettings)
    max_idle_seconds: float = 1.0  # tick at least this often when idle
    yield_every_seconds: float = 0.005  # let I/O run at least this often while busy
    event_repeat_seconds: float = 60.0
    group_status_qps: float = 10.0  # PodGroup status writes per second at most
    queue_status_qps: float = 5.0  # Queue status writes per second at most
    # Status writes per second (each writer) while no bind is in flight: the backlog of
    # a burst is written at this rate once its binds are done (0: never faster).
    status_idle_qps: float = 50.0
    shutdown_grace_seconds: float = 5.0
    # How long /readyz reports another scheduler binding our pods after its last bind.
    foreign_bind_window_seconds: float = 300.0
    watched: tuple[Watched, ...] = ()  # empty: WATCHED
    # Node shards (shoal.drivers.kube.shards): the slot count of a shard map this
    # replica creates, and how long a pod its home replica cannot place waits before
    # the next replica tries it.
    node_shards: int = DEFAULT_SLOTS
    shard_handoff_seconds: float = 10.0
    # Watch only (`shoal extender`): keep the cache, never elect, never run the
    # scheduling loop, and send nothing out but the binds a caller asks for.
    passive: bool = False

    @staticmethod
    def from_config(config: KubeSchedulerConfiguration, **overrides: Any) -> KubeOptions:
        """Defaults from KubeSchedulerConfiguration's clientConnection and
        leaderElection (kube's field names and duration strings), then overrides."""
        client = config.client_connection
        election = config.leader_election
        values: dict[str, Any] = {}
        if "qps" in client:
            values["qps"] = float(client["qps"])
        if "burst" in client:
            values["burst"] = int(client["burst"])
        if "leaderElect" in election:
            values["leader_elect"] = bool(election["leaderElect"])
        leader = LeaderSettings(
            name=str(election.get("resourceName", "shoal")),
            namespace=str(election.get("resourceNamespace", "kube-system")),
            lease_duration=parse_duration(election.get("leaseDuration", "15s")),
            renew_deadline=parse_duration(election.get("renewDeadline", "10s")),
            retry_period=parse_duration(election.get("retryPeriod", "2s")),
        )
        values["leader"] = leader
        values.update({k: v for k, v in overrides.items() if v is not None})
        return KubeOptions(**values)


# ---- the backend -----------------------------------------------------------------------


class _BindOnly:
    """The effects port of a passive backend: binds go out, everything else (conditions,
    events, statuses the core would write about pods it does not schedule) is dropped."""

    def __init__(self, effects: KubeEffects) -> None:
        self.effects = effects

    def emit(self, effect: Effect) -> None:
        if isinstance(effect, Bind):
            self.effects.emit(effect)


def published_config(config: KubeSchedulerConfiguration) -> str:
    """The effective configuration as compact JSON (what differs from the defaults, which
    `parse_config` restores): the scheduling part only, no connection or election
    settings."""
    raw = config.model_dump(
        mode="json",
        by_alias=True,
        exclude_none=True,
        exclude_defaults=True,
        include={
            "parallelism",
            "percentage_of_nodes_to_score",
            "pod_initial_backoff_seconds",
            "pod_max_backoff_seconds",
            "profiles",
            "extenders",
        },
    )
    document = {"apiVersion": config.api_version, "kind": config.kind, **raw}
    return json.dumps(document, separators=(",", ":"), sort_keys=True)


class KubeBackend:
    def __init__(
        self,
        config: KubeSchedulerConfiguration,
        connection: Connection,
        options: KubeOptions | None = None,
        *,
        metrics: SchedulerMetrics | None = None,
        registry: Mapping[str, PluginSpec] | None = None,
        seed: int = 0,
    ) -> None:
        self.options = options or KubeOptions()
        opts = self.options
        # Decoders are built here, on one thread, before the core's and the I/O loop's
        # threads decode concurrently (see prepare_decoders).
        prepare_decoders(
            w.kind.model for w in opts.watched or tuple(WATCHED) if w.kind.model is not None
        )
        self.metrics = metrics or SchedulerMetrics()
        connection.observer = connection.observer or self.metrics
        agent = f"shoal/{_version()} ({opts.identity})"

        def settings(qps: float, burst: int) -> ClientSettings:
            return ClientSettings(
                qps=qps, burst=burst, timeout=opts.request_timeout, user_agent=agent
            )

        # Separate clients (connection pools, rate limiters), as kube-scheduler has.
        self.client: KubeClient = connection.client("scheduler", settings(opts.qps, opts.burst))
        self.events_client = connection.client("events", settings(opts.qps, opts.burst))
        self.leader_client = connection.client("leader-election", settings(0, 1))
        self.shards_client = connection.client("node-shards", settings(0, 1))
        self.connection = connection

        self.events = EventRecorder(
            self.events_client,
            opts.identity,
            self.metrics,
            repeat_after=opts.event_repeat_seconds,
            busy=self._binding,
        )
        self.status = PodStatusWriter(self.client, self.lookup_pod)
        self.binder = KubeBinder(
            self.client,
            self.lookup_pod,
            self.metrics,
            concurrency=opts.bind_concurrency,
            timeout=opts.request_timeout,
            identity=opts.identity,
            lookup_node=self._node_object,
        )
        self.evictor = KubeEvictor(
            self.client, self.events, self.metrics, concurrency=opts.bind_concurrency
        )

        def pacing(qps: float) -> WriterPacing:
            return WriterPacing(qps=qps, idle_qps=opts.status_idle_qps, busy=self._binding)

        self.group_status = PodGroupStatusWriter(
            self.client, self.group_objects, self.events, **pacing(opts.group_status_qps)
        )
        self.queue_status = QueueStatusWriter(
            self.client,
            self.queue_object,
            elastic=self.elastic_quota,
            **pacing(opts.queue_status_qps),
        )
        self.binding_status = BindingStatusWriter(
            self.client, self.binding_object, **pacing(opts.queue_status_qps)
        )
        self.effects = KubeEffects(
            self.binder,
            self.evictor,
            self.status,
            self.events,
            self.metrics,
            on_eviction_failed=lambda pod: self.loop.eviction_failed(pod),
            groups=self.group_status,
            queues=self.queue_status,
            bindings=self.binding_status,
            volumes=VolumeWriter(self.client, self._lookup, timeout=opts.request_timeout),
            claims=ClaimWriter(
                self.client,
                timeout=opts.request_timeout,
                concurrency=opts.bind_concurrency,
                lookup=lambda key: self._lookup(RESOURCE_CLAIMS, key),
            ),
        )
        self.clock = WallClock()
        self._extender_transports: list[ExtenderTransport] = []
        # The core's own thread (not for a passive backend: it makes no decisions, and
        # its readers, `shoal extender` and `shoalctl`, read the core on the I/O loop).
        self.core = CoreThread("shoal-core")
        self.io = IoPort()
        port = _BindOnly(self.effects) if opts.passive else self.effects
        self.scheduler: Scheduler = new_scheduler(
            config,
            clock=self.clock,
            effects=ThreadedEffects(port, self.io),
            seed=seed,
            registry=registry,
            extenders=self._extender_connections(config),
        )
        self.binder.withdrawn = self.scheduler.bind_withdrawn
        self.group_status.controller = next(iter(self.scheduler.profiles), "shoal")
        if not opts.passive:  # extension point and plugin latency (docs/operations.md)
            timer = self.metrics.framework_timer(rng=random.Random(f"{seed}/plugin-metrics"))
            for fwk in self.scheduler.profiles.values():
                instrument(fwk, timer)
        self.loop = SchedulingLoop(
            self.scheduler,
            self.core,
            self.metrics,
            LoopPacing(
                max_idle_seconds=opts.max_idle_seconds,
                yield_every_seconds=opts.yield_every_seconds,
                retry_period=opts.leader.retry_period,
            ),
            now=self.clock.now,
            lease_valid=lambda: self.elector is None or self.elector.lease_valid(),
        )
        self.driver = self.loop.driver
        self.effects.on_bind_outcome = self.loop.bind_outcome
        # Queue and gang series, sampled on the core's thread between decisions.
        self.scheduler_series = SchedulerSeries(self.scheduler)
        self.driver.samplers.append(self.scheduler_series.maybe_sample)
        register_scheduler_collector(
            self.metrics.registry, lambda: self.scheduler, series=self.scheduler_series
        )
        # GPU series: the census is taken on the core's thread, between decisions.
        self.gpu_census = GpuCensus(self.scheduler)
        self.driver.samplers.append(self.gpu_census.maybe_sample)
        register_gpu_collector(self.metrics.registry, lambda: self.gpu_census)
        register_rescheduler_collector(self.metrics.registry, lambda: self.scheduler)
        # Informer updates into the core (decoding, reports, foreign binds).
        self.intake = Intake(
            self.scheduler,
            core=self.core,
            io=self.io,
            events=self.events,
            metrics=self.metrics,
            identity=opts.identity,
            passive=opts.passive,
            watched={w.kind.name: w for w in opts.watched or tuple(WATCHED)},
            wake=lambda: self.loop.wake.set(),
            issued=self.binder.issued,
        )
        self.tenancy = TenancySync(
            self.scheduler,
            self.intake.report_invalid,
            self.intake.clear_invalid,
            keep=self.intake.keep_invalid,
        )
        self.intake.tenancy = self.tenancy
        self.informers: dict[str, Informer] = {
            name: Informer(
                self.client,
                watched.kind,
                self.intake,
                opts.informer,
                observer=self.metrics,
                rng=random.Random(f"{seed}/{name}"),
            )
            for name, watched in self.intake.watched.items()
        }
        self.intake.informers = self.informers
        self.pods = self.informers[PODS.name]

        self.binder.not_allowed = self._may_not_bind
        # Node shards: every replica that schedules holds some (see shards.py).
        self.shard_link: ShardLink | None = None
        self.shards: ShardKeeper | None = None
        if not opts.passive:
            lease = opts.leader
            self.shard_link = ShardLink(
                self.shards_client,
                ShardSettings(
                    identity=opts.identity,
                    namespace=lease.namespace,
                    slots=opts.node_shards,
                    scheduler_names=tuple(self.scheduler.profiles),
                    leader_lease=f"{lease.namespace}/{lease.name}" if opts.leader_elect else "",
                    lease_duration=lease.lease_duration,
                    renew_deadline=lease.renew_deadline,
                    retry_period=lease.retry_period,
                    handoff_seconds=opts.shard_handoff_seconds,
                    config=published_config(config),
                ),
                scheduler=self.scheduler,
                intake=self.intake,
                pods=self.pods,
                binder=self.binder,
                core=self.core,
                io=self.io,
                metrics=self.metrics,
                leading=lambda: self.leading,
                bound=lambda: self.loop.bound,
                wake=lambda: self.loop.wake.set(),
            )
            self.shards = self.shard_link.keeper
        self.elector: LeaderElector | None = None
        if opts.leader_elect:
            self.elector = LeaderElector(
                self.leader_client,
                LeaderSettings(
                    name=opts.leader.name,
                    namespace=opts.leader.namespace,
                    identity=opts.identity,
                    lease_duration=opts.leader.lease_duration,
                    renew_deadline=opts.leader.renew_deadline,
                    retry_period=opts.leader.retry_period,
                ),
                on_change=self._leader_changed,
            )
            self.intake.elector = self.elector
        self.leading = False
        self.events.enabled = False
        self._stopping = asyncio.Event()
        self._background: list[asyncio.Task[Any]] = []
        self.started = False
        self.crashed: BaseException | None = None
        self.health = Health(
            self,
            HealthLimits(
                identity=opts.identity,
                lease_overdue=opts.leader.renew_deadline + opts.leader.retry_period,
                foreign_bind_window=opts.foreign_bind_window_seconds,
            ),
            informers=self.informers,
            intake=self.intake,
            elector=self.elector,
            shards=self.shards,
        )

    # ---- lookups -------------------------------------------------------------------

    def lookup_pod(self, key: str) -> JSON | None:
        """The informer's latest copy of a pod, by `namespace/name`."""
        return self.pods.store.get(key)

    def _node_object(self, name: str) -> JSON | None:
        """The informer's latest copy of a Node (None: deleted). Without a node informer
        (a test's narrowed watch list) nothing can be said: an empty object."""
        informer = self.informers.get(NODES.name)
        return {} if informer is None else informer.store.get(name)

    def _lookup(self, kind: ResourceKind, key: str) -> JSON | None:
        informer = self.informers.get(kind.name)
        return None if informer is None else informer.store.get(key)

    def queue_object(self, name: str) -> JSON | None:
        """The informer's latest copy of a Queue (cluster-scoped, by name)."""
        informer = self.informers.get(QUEUES.name)
        return None if informer is None else informer.store.get(name)

    def binding_object(self, name: str) -> JSON | None:
        """The informer's latest copy of a QueueBinding (cluster-scoped, by name)."""
        informer = self.informers.get(QUEUE_BINDINGS.name)
        return None if informer is None else informer.store.get(name)

    def elastic_quota(self, namespace: str) -> tuple[ResourceKind, JSON] | None:
        """The latest copy of the ElasticQuota of `namespace` (either API group)."""
        for kind in (ELASTIC_QUOTAS, ELASTIC_QUOTAS_SIGS):
            informer = self.informers.get(kind.name)
            if informer is None:
                continue
            for key, raw in informer.store.items():
                if key.partition("/")[0] == namespace:
                    return kind, raw
        return None

    def group_objects(self, key: str) -> list[tuple[ResourceKind, JSON]]:
        """The PodGroup objects behind the group `namespace/name`, latest copies."""
        found = []
        for kind in self.intake.group_kinds.get(key, {}).values():
            raw = self.informers[kind.name].store.get(key)
            if raw is not None:
                found.append((kind, raw))
        return found

    def _extender_connections(self, config: KubeSchedulerConfiguration) -> list[Extender]:
        extenders = http_extenders(config, offload=True)
        # Their kept-alive connections are closed when `run` ends.
        self._extender_transports = [e.transport for e in extenders]
        return extenders

    async def on_core(self, fn: Callable[[], T]) -> T:
        """`fn()` run where the core runs (its thread once started), awaited here: how
        the I/O side reads the core's state (metrics, dashboard, webhooks)."""
        return await self.core.call(fn)

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers.values())

    # ---- health (health.py) -------------------------------------------------------------

    def healthz(self) -> list[Check]:
        return self.health.healthz()

    def readyz(self) -> list[Check]:
        return self.health.readyz()

    @property
    def cycles(self) -> int:
        """Scheduling cycles run."""
        return self.loop.cycles

    @property
    def bound(self) -> int:
        """Pods this replica bound."""
        return self.loop.bound

    @property
    def loop_beat(self) -> float:
        return self.loop.beat

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def background(self) -> Sequence[asyncio.Task[Any]]:
        return self._background

    @property
    def foreign_binds(self) -> int:
        """Pending pods of our profiles that someone else bound (see `Intake`)."""
        return self.intake.foreign_binds

    @property
    def last_foreign_bind(self) -> tuple[float, str, str, str] | None:
        return self.intake.last_foreign_bind

    # ---- running -------------------------------------------------------------------

    async def run(self) -> None:
        """Watch, win the lease, schedule. Returns after `stop()`; raises LeadershipLost
        when the lease is lost (the process should exit and be restarted as a standby)."""
        self.started = True
        self.io.attach(asyncio.get_running_loop())
        if not self.options.passive:
            self.core.start()
        tasks = [
            asyncio.create_task(i.run(), name=f"informer-{n}") for n, i in self.informers.items()
        ]
        tasks.append(asyncio.create_task(self.status.run(), name="status-writer"))
        tasks.append(asyncio.create_task(self.events.run(), name="event-recorder"))
        tasks.append(asyncio.create_task(self.group_status.run(), name="group-status-writer"))
        tasks.append(asyncio.create_task(self.queue_status.run(), name="queue-status-writer"))
        tasks.append(asyncio.create_task(self.binding_status.run(), name="binding-status-writer"))
        self._background = tasks
        stop = asyncio.create_task(self._stopping.wait())
        schedule: asyncio.Task[None] | None = None
        hold: asyncio.Task[None] | None = None
        shards: asyncio.Task[None] | None = None
        try:
            await self._until(self._wait_synced(), stop)
            if self._stopping.is_set():
                return
            self.core.post(self._tenancy_ready)
            log.info(
                "caches synced: %d nodes, %d pods",
                len(self.informers[NODES.name].store),
                len(self.pods.store),
                extra={"identity": self.options.identity},
            )
            if self.options.passive:
                await stop
                return
            if self.elector is not None:
                await self._until(self.elector.acquire(), stop)
                if self._stopping.is_set():
                    return
                hold = asyncio.create_task(
                    self.elector.hold_on_thread(self._new_leader_client), name="lease-renewal"
                )
            else:
                self._leader_changed(True)
            if self.shards is not None:
                shards = asyncio.create_task(self.shards.run(), name="node-shards")
            schedule = asyncio.create_task(self.core.run(self.loop.run()), name="scheduling-loop")
            waiters: set[asyncio.Task[Any]] = {stop, schedule}
            if hold is not None:
                waiters.add(hold)
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            if hold is not None and hold in done:
                self._leader_changed(False)
                hold.result()  # raises LeadershipLost
            if schedule in done:
                schedule.result()  # a crash of the loop itself
        except LeadershipLost:
            raise
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self.crashed = err
            log.exception("the scheduler stopped on an unexpected error")
            raise
        finally:
            # Scheduling and binding stop before the renewals do (the lease is renewed on
            # a thread of its own): nothing is bound once the lease may pass to a standby.
            clean = self._stopping.is_set()
            try:
                if schedule is not None:
                    schedule.cancel()
                    await asyncio.gather(schedule, return_exceptions=True)
                await asyncio.sleep(0)  # effects the last pass handed over start now
                if clean:
                    await self._drain()
                await self._cancel_binds()
                if shards is not None:
                    shards.cancel()
                    await asyncio.gather(shards, return_exceptions=True)
                    if clean and self.shards is not None:
                        await self.shards.release_all()
                if hold is not None:
                    hold.cancel()
                    await asyncio.gather(hold, return_exceptions=True)
                if clean and self.elector is not None:
                    await self.elector.release()
                for task in [*tasks, stop]:
                    task.cancel()
                await asyncio.gather(*tasks, stop, return_exceptions=True)
                self._leader_changed(False)
                await self.core.stop()
                for transport in self._extender_transports:
                    close = getattr(transport, "close", None)
                    if close is not None:
                        close()
            finally:
                # Cancelled again while unwinding (a test's crash, a second signal): the
                # core must not go on deciding for a backend that is gone.
                self.core.halt()

    def _tenancy_ready(self) -> None:
        """Tenancy objects are applied, and malformed HyperNodes reported, once every
        informer listed (on the core)."""
        self.tenancy.ready = True
        self.tenancy.apply()
        self.intake.hypernodes_ready = True
        self.intake.report_hypernodes()

    async def _cancel_binds(self) -> None:
        binds = list(self.effects.binds)
        for bind in binds:
            bind.cancel()
        await asyncio.gather(*binds, return_exceptions=True)

    def _may_not_bind(self, node: str) -> str:
        """Why a Binding to `node` must not be sent now ("" when it may): with leader
        election, only while our lease is valid (renewed within the renew deadline);
        always, only to a node of a shard we hold (see shards.py)."""
        if self.options.passive:
            return ""
        if self.elector is not None and not self.elector.lease_valid():
            return "this replica's lease is not valid (not the leader, or the renewal is overdue)"
        if self.shard_link is not None:
            return self.shard_link.may_not_bind(node)
        return ""

    def _binding(self) -> bool:
        """Are binds in flight (the status writers then keep to their slower rate)?"""
        return bool(self.effects.binds)

    def _new_leader_client(self) -> KubeClient:
        """A client like `leader_client`, for the lease thread's own event loop."""
        return KubeClient(self.connection, "leader-election", self.leader_client.settings)

    def stop(self) -> None:
        """Ask `run` to return: finish in-flight binds (briefly), release the lease."""
        self._stopping.set()

    async def _until(self, coro: Any, stop: asyncio.Task[Any]) -> None:
        task = asyncio.ensure_future(coro)
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        else:
            task.result()

    async def _wait_synced(self) -> None:
        await asyncio.gather(*(i.synced.wait() for i in self.informers.values()))

    async def _drain(self) -> None:
        if not self.effects.binds:
            return
        _, pending = await asyncio.wait(
            set(self.effects.binds), timeout=self.options.shutdown_grace_seconds
        )
        if pending:
            log.warning("%d binds still in flight at shutdown", len(pending))

    def _leader_changed(self, leading: bool) -> None:
        self.leading = leading
        self.events.enabled = leading
        self.metrics.leader.labels(self.options.leader.name).set(1 if leading else 0)
        if leading:
            self.core.post(self._lead)

    def _lead(self) -> None:
        """Newly leading (on the core): what a standby kept to itself is said now."""
        for kind, raw, message in list(self.intake.invalid.values()):
            self.intake.report_invalid(kind, raw, message, log_it=False)
        self.scheduler.announce_gated()


def _version() -> str:
    from shoal import __version__

    return __version__
