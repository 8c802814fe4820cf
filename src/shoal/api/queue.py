"""Multi-tenant capacity objects: Queue, QueueBinding, NodePool (Shoal's API group
`shoal.dev/v1alpha1`), plus the shapes users bring: scheduler-plugins `ElasticQuota`
(min/max per namespace) and the seed talk's Queue with `spec.resources.requests`
(guaranteed) and `spec.resources.limits` (maximum). PodDisruptionBudget (policy/v1) is
read for preemption.
"""

from __future__ import annotations

import re
from typing import Literal

import msgspec

from shoal.api.objects import LabelSelector, ObjectMeta
from shoal.api.resources import parse_quota_list

__all__ = [
    "DEFAULT_QUEUE",
    "QUEUE_LABEL",
    "VOLCANO_QUEUE_ANNOTATION",
    "ElasticQuota",
    "NodePool",
    "PodDisruptionBudget",
    "Queue",
    "QueueBinding",
    "QueueCondition",
    "QueueObservedStatus",
    "QueueOrdering",
    "QueueState",
]

API_GROUP = "shoal.dev"
DEFAULT_QUEUE = "default"
QUEUE_LABEL = "shoal.dev/queue"  # explicit queue of a pod (wins over everything else)
# Volcano's queue of a pod (its controller copies it to the PodGroup's spec.queue).
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"

Quantity = str | int | float
QueueOrdering = Literal["Priority", "FIFO", "QoS", "DRF"]
# Open: admits new pods. Closed: admits none (pods already placed keep running), as
# Volcano's closed queue and Kueue's stopPolicy Hold; closing a parent closes its subtree.
QueueState = Literal["Open", "Closed"]


class _Base(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    pass


def _check(field: str, raw: dict[str, Quantity]) -> None:
    try:
        parse_quota_list(raw)
    except ValueError as err:
        raise ValueError(f"{field}.{err}") from None


class QueueResources(_Base):
    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}


class QueueSpec(_Base):
    parent: str = ""
    weight: int = 1
    guaranteed: dict[str, Quantity] = {}
    max: dict[str, Quantity] | None = None
    # The seed talk's shape: requests = guaranteed, limits = maximum.
    resources: QueueResources | None = None
    reclaimable: bool = True  # may others take back what this queue borrowed
    priority: int = 0
    ordering: QueueOrdering = "Priority"
    pools: list[str] = []
    state: QueueState = "Open"

    def __post_init__(self) -> None:
        if self.weight < 1:
            raise ValueError(f"weight {self.weight} must be at least 1")
        _check("guaranteed", self.guaranteed)
        if self.max is not None:
            _check("max", self.max)
        if self.resources is not None:
            _check("resources.requests", self.resources.requests)
            _check("resources.limits", self.resources.limits)
            if self.guaranteed or self.max is not None:
                raise ValueError("use either resources or guaranteed/max, not both")


class QueueCondition(_Base):
    """A metav1.Condition on a Queue: `Accepted` says whether the scheduler took the
    object as written (False: why not, and the fix)."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None


class QueueObservedStatus(_Base):
    """Written by the scheduler (the status subresource): whether the queue admits pods
    (`state`: Open, Closing while a closed queue still runs pods, Closed, or Invalid for
    an object the scheduler rejected), what the queue (its whole subtree) holds, is
    guaranteed and would get under HDRF fair share, and its pods."""

    state: str = ""
    conditions: list[QueueCondition] = []
    allocated: dict[str, Quantity] = {}
    guaranteed: dict[str, Quantity] = {}
    fair_share: dict[str, Quantity] = {}
    borrowed: dict[str, Quantity] = {}  # allocated above guaranteed
    pending_pods: int = 0
    bound_pods: int = 0  # placed on a node, started or not
    running_pods: int = 0  # started by their kubelets (phase Running)
    pending_jobs: int = 0  # a job is a pod group, or a pod on its own
    running_jobs: int = 0


class Queue(_Base):
    api_version: str = "shoal.dev/v1alpha1"
    kind: str = "Queue"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: QueueSpec = msgspec.field(default_factory=QueueSpec)
    status: QueueObservedStatus = msgspec.field(default_factory=QueueObservedStatus)

    def guaranteed(self) -> dict[str, int]:
        spec = self.spec
        raw = spec.resources.requests if spec.resources is not None else spec.guaranteed
        return parse_quota_list(raw)

    def maximum(self) -> dict[str, int] | None:
        spec = self.spec
        if spec.resources is not None:
            return parse_quota_list(spec.resources.limits) or None
        return None if spec.max is None else parse_quota_list(spec.max)


class QueueBindingSpec(_Base):
    queue: str
    namespaces: list[str] = []
    namespace_selector: LabelSelector | None = None
    max_pods: int | None = None
    max_running_jobs: int | None = None

    def __post_init__(self) -> None:
        if not self.queue:
            raise ValueError("queue must name a leaf queue")
        for field, value in (("maxPods", self.max_pods), ("maxRunningJobs", self.max_running_jobs)):
            if value is not None and value < 0:
                raise ValueError(f"{field} {value} must not be negative")


class NamespaceUsage(_Base):
    namespace: str
    pods: int = 0
    running_jobs: int = 0


class QueueBindingStatus(_Base):
    """Written by the scheduler (the status subresource): pods and running jobs in the
    bound namespaces, in total and per namespace (maxPods and maxRunningJobs apply per
    namespace)."""

    pods: int = 0
    running_jobs: int = 0
    namespaces: list[NamespaceUsage] = []


class QueueBinding(_Base):
    api_version: str = "shoal.dev/v1alpha1"
    kind: str = "QueueBinding"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: QueueBindingSpec = msgspec.field(
        default_factory=lambda: QueueBindingSpec(queue=DEFAULT_QUEUE)
    )
    status: QueueBindingStatus = msgspec.field(default_factory=QueueBindingStatus)


class ElasticQuotaSpec(_Base):
    min: dict[str, Quantity] = {}
    max: dict[str, Quantity] = {}

    def __post_init__(self) -> None:
        _check("min", self.min)
        _check("max", self.max)


class ElasticQuotaStatus(_Base):
    """Written by the scheduler (the status subresource), as scheduler-plugins does:
    what the pods of the namespace use."""

    used: dict[str, Quantity] = {}


class ElasticQuota(_Base):
    """scheduler-plugins `scheduling.x-k8s.io/v1alpha1` ElasticQuota: one per namespace,
    read as a leaf queue `<namespace>` bound to that namespace."""

    api_version: str = "scheduling.x-k8s.io/v1alpha1"
    kind: str = "ElasticQuota"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ElasticQuotaSpec = msgspec.field(default_factory=ElasticQuotaSpec)
    status: ElasticQuotaStatus = msgspec.field(default_factory=ElasticQuotaStatus)


class NodePoolSpec(_Base):
    node_selector: dict[str, str] = {}
    exclusive_to: list[str] = []  # queues that alone may use these nodes; empty = shared

    def __post_init__(self) -> None:
        if not self.node_selector:
            raise ValueError("nodeSelector must select nodes by at least one label")


class NodePool(_Base):
    api_version: str = "shoal.dev/v1alpha1"
    kind: str = "NodePool"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodePoolSpec = msgspec.field(default_factory=lambda: NodePoolSpec(node_selector={"": ""}))


class PodDisruptionBudgetSpec(_Base):
    selector: LabelSelector | None = None
    min_available: int | str | None = None
    max_unavailable: int | str | None = None

    def __post_init__(self) -> None:
        # What the API server's validation refuses (policy/v1 ValidatePodDisruptionBudgetSpec).
        if self.min_available is not None and self.max_unavailable is not None:
            raise ValueError("minAvailable and maxUnavailable cannot be both set")
        for field, value in (
            ("minAvailable", self.min_available),
            ("maxUnavailable", self.max_unavailable),
        ):
            if isinstance(value, str):
                if not _PERCENT.fullmatch(value):
                    raise ValueError(
                        f"{field} {value!r} must be a count or a percentage such as '50%'"
                    )
                if int(value[:-1]) > 100:
                    raise ValueError(f"{field} {value!r} must not be greater than 100%")
            elif value is not None and value < 0:
                raise ValueError(f"{field} {value} must not be negative")


_PERCENT = re.compile(r"[0-9]+%")


class PodDisruptionBudget(_Base):
    api_version: str = "policy/v1"
    kind: str = "PodDisruptionBudget"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodDisruptionBudgetSpec = msgspec.field(default_factory=PodDisruptionBudgetSpec)
