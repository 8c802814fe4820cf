"""Dynamic Resource Allocation objects (resource.k8s.io/v1) as pure values.

DeviceClass, ResourceSlice, ResourceClaim, ResourceClaimTemplate and DeviceTaintRule
(resource.k8s.io/v1beta2) are decoded with the fields Shoal's DynamicResources plugin
reads; everything else in a manifest is
ignored. `pod_claim_names` says which ResourceClaim each of a pod's
`spec.resourceClaims` names (directly, or through the claim the resource-claim
controller created from a template, recorded in `status.resourceClaimStatuses`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from shoal.api.objects import NodeSelector, NodeSelectorTerm, ObjectMeta, Pod, tolerates
from shoal.api.quantity import QuantityError, parse_quantity

__all__ = [
    "BLOCKING_TAINT_EFFECTS",
    "DEVICE_CLASS_RESOURCE_PREFIX",
    "EXTENDED_RESOURCE_CLAIM_ANNOTATION",
    "TAINT_EFFECTS",
    "AllocationResult",
    "BindingConditions",
    "CELSelector",
    "CapacityRequestPolicy",
    "CapacityRequestPolicyRange",
    "CapacityRequirements",
    "ClaimUse",
    "Counter",
    "CounterSet",
    "DeviceAllocationResult",
    "DeviceAttribute",
    "DeviceCapacity",
    "DeviceClass",
    "DeviceConstraint",
    "DeviceCounterConsumption",
    "DeviceRequest",
    "DeviceRequestAllocationResult",
    "DeviceSelector",
    "DeviceSubRequest",
    "DeviceTaint",
    "DeviceTaintRule",
    "DeviceTaintSelector",
    "DeviceToleration",
    "ExactDeviceRequest",
    "ExtendedRequest",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourceSlice",
    "ShareResult",
    "SliceDevice",
    "claim_key",
    "extended_claim_name",
    "extended_requests",
    "is_dra_extended_resource_name",
    "pod_claim_names",
]


class _Base(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    pass


class CELSelector(_Base):
    expression: str = ""


class DeviceSelector(_Base):
    cel: CELSelector | None = None


class DeviceClassSpec(_Base):
    selectors: list[DeviceSelector] = []
    # The extended resource the class's devices stand for (KEP-5004): a pod asking for
    # it in its containers, on a node whose allocatable lacks it, gets devices of the
    # class through a claim the scheduler makes (`extended_requests`); tenant queues
    # charge devices of the class under this name (shoal.tenancy.devices).
    extended_resource_name: str | None = None
    # Opaque driver parameters, copied into the allocations of claims asking for the
    # class (`allocation_config`); Shoal does not interpret them.
    config: list[dict[str, Any]] = []


class DeviceClass(_Base):
    api_version: str = "resource.k8s.io/v1"
    kind: str = "DeviceClass"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: DeviceClassSpec = msgspec.field(default_factory=DeviceClassSpec)


# ---- ResourceSlice -----------------------------------------------------------------


class DeviceAttribute(_Base):
    """Exactly one of the fields is set in a valid slice."""

    integer: int | None = msgspec.field(default=None, name="int")
    boolean: bool | None = msgspec.field(default=None, name="bool")
    string: str | None = None
    version: str | None = None

    def value(self) -> object:
        for found in (self.integer, self.boolean, self.string, self.version):
            if found is not None:
                return found
        return None


class CapacityRequestPolicyRange(_Base):
    min: str | int | None = None
    max: str | int | None = None
    step: str | int | None = None


class CapacityRequestPolicy(_Base):
    """How requests consume a capacity of a device that allows multiple allocations
    (KEP-5075): `default` for requests that do not name it, and at most one of
    `valid_values` (ascending) and `valid_range`."""

    default: str | int | None = None
    valid_values: list[str | int] = []
    valid_range: CapacityRequestPolicyRange | None = None


class DeviceCapacity(_Base):
    value: str | int = "0"
    request_policy: CapacityRequestPolicy | None = None


class Counter(_Base):
    value: str | int = "0"


class CounterSet(_Base):
    """A named set of counters a pool's devices consume from (KEP-4815)."""

    name: str = ""
    counters: dict[str, Counter] = {}


class DeviceCounterConsumption(_Base):
    counter_set: str = ""
    counters: dict[str, Counter] = {}


class DeviceTaint(_Base):
    key: str = ""
    value: str = ""
    effect: str = ""  # NoSchedule, NoExecute (None: informational)
    time_added: str | None = None

    def text(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


class DeviceToleration(_Base):
    key: str = ""
    operator: str = "Equal"  # Equal or Exists
    value: str = ""
    effect: str = ""  # empty: every effect
    toleration_seconds: int | None = None

    def tolerates(self, taint: DeviceTaint) -> bool:
        """kube's DeviceToleration.ToleratesTaint."""
        return tolerates(self, taint)


BLOCKING_TAINT_EFFECTS = ("NoSchedule", "NoExecute")
TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")


class DeviceTaintSelector(_Base):
    """Which devices a DeviceTaintRule taints: every field that is set must match
    (`spec.driver` of the slice, `spec.pool.name`, `spec.devices[].name`)."""

    driver: str | None = None
    pool: str | None = None
    device: str | None = None

    def selects(self, driver: str, pool: str, device: str) -> bool:
        return (
            (self.driver is None or self.driver == driver)
            and (self.pool is None or self.pool == pool)
            and (self.device is None or self.device == device)
        )


class DeviceTaintRuleSpec(_Base):
    # None: the rule selects no device (an empty selector selects them all).
    device_selector: DeviceTaintSelector | None = None
    taint: DeviceTaint = msgspec.field(default_factory=DeviceTaint)


class DeviceTaintRule(_Base):
    """One taint for the devices a selector picks, as if their driver had put it in their
    ResourceSlice (KEP-5055; resource.k8s.io/v1beta2 in Kubernetes 1.36, behind the
    DRADeviceTaintRules feature gate)."""

    api_version: str = "resource.k8s.io/v1beta2"
    kind: str = "DeviceTaintRule"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: DeviceTaintRuleSpec = msgspec.field(default_factory=DeviceTaintRuleSpec)

    def selects(self, driver: str, pool: str, device: str) -> bool:
        chosen = self.spec.device_selector
        return chosen is not None and chosen.selects(driver, pool, device)

    def problem(self) -> str | None:
        """What the API server would refuse in it (the simulator's inputs are not
        validated by one), naming the field and the fix; None when it is fine."""
        taint = self.spec.taint
        if not taint.key:
            return "spec.taint.key is required: give the taint a key (a label name)"
        if taint.effect not in TAINT_EFFECTS:
            return (
                f"spec.taint.effect {taint.effect!r} is not one of "
                f"{', '.join(TAINT_EFFECTS)}: use one of them"
            )
        chosen = self.spec.device_selector
        for field in ("driver", "pool", "device"):
            if chosen is not None and getattr(chosen, field) == "":
                return (
                    f"spec.deviceSelector.{field} is empty: leave it out to select every "
                    f"{field}, or name one"
                )
        return None


class SliceDevice(_Base):
    name: str = ""
    attributes: dict[str, DeviceAttribute] = {}
    capacity: dict[str, DeviceCapacity] = {}
    # Shared by several claims while its capacity lasts (consumable capacity, KEP-5075).
    allow_multiple_allocations: bool | None = None
    # Partitionable devices (KEP-4815): what allocating the device takes from the pool's
    # counter sets.
    consumes_counters: list[DeviceCounterConsumption] = []
    # Taints (KEP-5055): a NoSchedule or NoExecute taint keeps the device from
    # requests that do not tolerate it.
    taints: list[DeviceTaint] = []
    # Binding conditions (KEP-5007): the conditions the driver must report True in the
    # claim's `status.devices` before the pod is bound (any failure condition True
    # fails the binding), and whether an allocation of it is limited to its node.
    binding_conditions: list[str] = []
    binding_failure_conditions: list[str] = []
    binds_to_node: bool | None = None
    # Where the device is, in a slice with `perDeviceNodeSelection` (KEP-4815): one of
    # these, as a slice's own fields.
    node_name: str | None = None
    all_nodes: bool | None = None
    node_selector: NodeSelector | None = None


class ResourcePool(_Base):
    name: str = ""
    generation: int = 0
    resource_slice_count: int = 1


class ResourceSliceSpec(_Base):
    driver: str = ""
    pool: ResourcePool = msgspec.field(default_factory=ResourcePool)
    node_name: str | None = None
    all_nodes: bool | None = None
    node_selector: NodeSelector | None = None
    per_device_node_selection: bool | None = None
    devices: list[SliceDevice] = []
    # Counter sets of the pool (in a slice of their own since Kubernetes 1.35: a slice
    # has either devices or sharedCounters).
    shared_counters: list[CounterSet] = []


class ResourceSlice(_Base):
    api_version: str = "resource.k8s.io/v1"
    kind: str = "ResourceSlice"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceSliceSpec = msgspec.field(default_factory=ResourceSliceSpec)


# ---- ResourceClaim -----------------------------------------------------------------


class CapacityRequirements(_Base):
    """How much of each capacity of a shared device a request consumes."""

    requests: dict[str, str | int] = {}


class ExactDeviceRequest(_Base):
    device_class_name: str = ""
    selectors: list[DeviceSelector] = []
    allocation_mode: Literal["ExactCount", "All"] = "ExactCount"
    count: int = 1
    admin_access: bool | None = None
    tolerations: list[DeviceToleration] = []
    capacity: CapacityRequirements | None = None


class DeviceSubRequest(_Base):
    """One entry of a request's `firstAvailable` (prioritized list, KEP-4816)."""

    name: str = ""
    device_class_name: str = ""
    selectors: list[DeviceSelector] = []
    allocation_mode: Literal["ExactCount", "All"] = "ExactCount"
    count: int = 1
    tolerations: list[DeviceToleration] = []
    capacity: CapacityRequirements | None = None


class DeviceRequest(_Base):
    name: str = ""
    exactly: ExactDeviceRequest | None = None
    first_available: list[DeviceSubRequest] = []


class DeviceConstraint(_Base):
    requests: list[str] = []
    match_attribute: str | None = None
    distinct_attribute: str | None = None


class DeviceClaim(_Base):
    requests: list[DeviceRequest] = []
    constraints: list[DeviceConstraint] = []
    config: list[dict[str, Any]] = []


class ResourceClaimSpec(_Base):
    devices: DeviceClaim = msgspec.field(default_factory=DeviceClaim)


class DeviceRequestAllocationResult(_Base):
    request: str = ""
    driver: str = ""
    pool: str = ""
    device: str = ""
    # One share of a device that allows multiple allocations, and what it consumes.
    share_id: str | None = msgspec.field(default=None, name="shareID")
    consumed_capacity: dict[str, str | int] = {}
    # Allocated for admin access (monitoring, debugging): the device stays free for
    # other claims (KEP-5018).
    admin_access: bool | None = None
    # Copies of the device's binding conditions at allocation (KEP-5007).
    binding_conditions: list[str] = []
    binding_failure_conditions: list[str] = []


class DeviceAllocationResult(_Base):
    results: list[DeviceRequestAllocationResult] = []
    config: list[dict[str, Any]] = []


class AllocationResult(_Base):
    devices: DeviceAllocationResult = msgspec.field(default_factory=DeviceAllocationResult)
    node_selector: NodeSelector | None = None
    allocation_timestamp: str | None = None


class ResourceClaimConsumerReference(_Base):
    api_group: str = ""
    resource: str = ""
    name: str = ""
    uid: str = ""


class ResourceClaimStatus(_Base):
    allocation: AllocationResult | None = None
    reserved_for: list[ResourceClaimConsumerReference] = []


class ResourceClaim(_Base):
    api_version: str = "resource.k8s.io/v1"
    kind: str = "ResourceClaim"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceClaimSpec = msgspec.field(default_factory=ResourceClaimSpec)
    status: ResourceClaimStatus = msgspec.field(default_factory=ResourceClaimStatus)

    @property
    def key(self) -> str:
        return claim_key(self.metadata.namespace, self.metadata.name)


class ResourceClaimTemplateSpec(_Base):
    metadata: dict[str, Any] = {}
    spec: ResourceClaimSpec = msgspec.field(default_factory=ResourceClaimSpec)


class ResourceClaimTemplate(_Base):
    api_version: str = "resource.k8s.io/v1"
    kind: str = "ResourceClaimTemplate"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceClaimTemplateSpec = msgspec.field(default_factory=ResourceClaimTemplateSpec)

    @property
    def key(self) -> str:
        return claim_key(self.metadata.namespace, self.metadata.name)


EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
DEVICE_CLASS_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"
"""Every DeviceClass stands for the extended resource `<this prefix><class name>` too."""
_NAME_LETTERS = "bcdfghjklmnpqrstvwxz2456789"  # what Kubernetes' generated names use


def is_dra_extended_resource_name(name: str) -> bool:
    """kube's IsDRAExtendedResourceName: an extended resource (a domain of its own, not
    kubernetes.io's, not a quota `requests.` name) or a class's implicit name."""
    if name.startswith(DEVICE_CLASS_RESOURCE_PREFIX):
        return True
    domain, slash, _ = name.partition("/")
    if not slash or name.startswith("requests."):
        return False
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def extended_claim_name(pod_name: str, pod_uid: str) -> str:
    """The name of the ResourceClaim made for a pod's extended resources: kube's
    generated name (`<pod>-extended-resources-` cut to 58 characters, then 5 letters),
    with the letters drawn from the pod's uid rather than at random, so that a retried
    write finds the claim it made (and the cache knows its key before it exists)."""
    digest = hashlib.sha256(pod_uid.encode()).digest()
    suffix = "".join(_NAME_LETTERS[b % len(_NAME_LETTERS)] for b in digest[:5])
    return f"{pod_name}-extended-resources-"[:58] + suffix


class ExtendedRequest(msgspec.Struct, frozen=True):
    """One request of the claim for a pod's extended resources: `count` devices of
    `device_class` for `resource` of one container (`container-<i>-request-<j>`: i the
    container's index among init and regular containers, j the resource's index among
    that container's requests sorted by name, as kube names it)."""

    name: str
    container: str
    resource: str
    device_class: str
    count: int


def extended_requests(pod: Pod, mapping: Mapping[str, str]) -> list[ExtendedRequest]:
    """kube's createDeviceRequests for every resource of the pod that a DeviceClass
    stands for (`mapping`: resource name -> class), sorted by request name. Quantities
    that are not whole numbers are left out, as kube does."""
    out: list[ExtendedRequest] = []
    for i, container in enumerate([*pod.spec.init_containers, *pod.spec.containers]):
        requests = container.resources.requests
        for j, resource in enumerate(sorted(requests)):
            device_class = mapping.get(resource)
            if not device_class or not is_dra_extended_resource_name(resource):
                continue
            try:
                count = parse_quantity(requests[resource])
            except QuantityError:
                continue
            if count <= 0 or count.denominator != 1:
                continue
            out.append(
                ExtendedRequest(
                    f"container-{i}-request-{j}",
                    container.name,
                    resource,
                    device_class,
                    int(count),
                )
            )
    out.sort(key=lambda r: r.name)
    return out


def claim_key(namespace: str, name: str) -> str:
    return f"{namespace or 'default'}/{name}"


class ClaimUse(msgspec.Struct, frozen=True):
    """One entry of a pod's `spec.resourceClaims`: the claim it names (`key`, "" while
    the resource-claim controller has not created the claim of a template yet)."""

    entry: str  # spec.resourceClaims[].name
    key: str
    template: str = ""  # resourceClaimTemplateName, when the claim comes from one


def _claim_statuses(raw: Pod) -> dict[str, str]:
    return {s.name: s.resource_claim_name or "" for s in raw.status.resource_claim_statuses}


def pod_claim_names(pod: Pod) -> list[ClaimUse]:
    """The ResourceClaims a pod uses, in `spec.resourceClaims` order (kube's
    resourceclaim.Name: a template's claim is named in the pod's status)."""
    namespace = pod.metadata.namespace or "default"
    statuses: dict[str, str] | None = None
    out = []
    for entry in pod.spec.resource_claims:
        if entry.resource_claim_name:
            out.append(ClaimUse(entry.name, claim_key(namespace, entry.resource_claim_name)))
            continue
        if statuses is None:
            statuses = _claim_statuses(pod)
        name = statuses.get(entry.name, "")
        template = entry.resource_claim_template_name or ""
        out.append(ClaimUse(entry.name, claim_key(namespace, name) if name else "", template))
    return out


# One share of a device that allows multiple allocations, as written in an allocation
# result: (shareID, ((capacity name, consumed quantity), ...)).
ShareResult = tuple[str, tuple[tuple[str, str], ...]]
# A device's (binding conditions, binding failure conditions), as an allocation result
# copies them (KEP-5007).
BindingConditions = tuple[tuple[str, ...], tuple[str, ...]]


def allocation_config(
    spec: ResourceClaimSpec,
    classes: Mapping[str, DeviceClass],
    results: tuple[tuple[str, str, str, str], ...],
) -> tuple[dict[str, Any], ...]:
    """`status.allocation.devices.config` as kube's allocator writes it, so the drivers
    get their parameters: the `config` of each class a request (or its chosen
    `firstAvailable` sub-request, `request/sub` in `results`) took devices with, once per
    class with the names of the requests that use it (`source: FromClass`), then the
    claim's own `config` (`FromClaim`): an entry naming no request as it is, an entry
    naming requests once for each of the claim's requests (or chosen sub-requests) it
    names, as kube repeats it."""
    chosen: dict[str, str] = {}  # request -> the name its results carry
    for request, *_ in results:
        chosen.setdefault(request.partition("/")[0], request)
    out: list[dict[str, Any]] = []
    by_class: dict[str, tuple[int, int]] = {}
    for req in spec.devices.requests:
        if req.exactly is not None:
            name, class_name = req.name, req.exactly.device_class_name
        else:
            name = chosen.get(req.name, "")
            sub = name.partition("/")[2]
            class_name = next(
                (s.device_class_name for s in req.first_available if s.name == sub), ""
            )
        device_class = classes.get(class_name)
        if device_class is None or not name:
            continue
        span = by_class.get(class_name)
        if span is not None:
            for entry in out[span[0] : span[1]]:
                entry["requests"].append(name)
            continue
        start = len(out)
        for config in device_class.spec.config:
            out.append({"source": "FromClass", "requests": [name], **_configuration(config)})
        by_class[class_name] = (start, len(out))
    for config in spec.devices.config:
        names = list(config.get("requests") or [])
        if not names:
            out.append({"source": "FromClaim", **_configuration(config)})
            continue
        for req in spec.devices.requests:
            if req.name in names or (req.first_available and chosen.get(req.name) in names):
                out.append({"source": "FromClaim", "requests": names, **_configuration(config)})
    return tuple(out)


def _configuration(config: Mapping[str, Any]) -> dict[str, Any]:
    """The DeviceConfiguration of a class's or a claim's config entry (its `opaque`
    parameters, and whatever later API versions add beside them)."""
    return {k: v for k, v in config.items() if k != "requests"}


def allocation_json(
    results: tuple[tuple[str, str, str, str], ...],
    node: str,
    shares: tuple[ShareResult | None, ...] = (),
    selector: NodeSelectorTerm | None = None,
    admin: tuple[str, ...] = (),
    config: tuple[dict[str, Any], ...] = (),
    binding: tuple[BindingConditions | None, ...] = (),
) -> dict[str, Any]:
    """`status.allocation` as the API takes it: the devices per request (with the share
    ID and consumed capacity of a share of a device that allows multiple allocations,
    `shares` parallel to `results`) and, for devices of one node, a node selector naming
    it (as kube-scheduler writes it); for devices of network-attached pools only, the
    one term `selector` their slices' node selectors make together. Results of the
    requests named in `admin` are marked `adminAccess: true`; `config` is the devices'
    `config` (`allocation_config`); `binding`, parallel to `results`, the binding and
    binding failure conditions of devices that have them."""
    entries: list[dict[str, Any]] = []
    for i, (request, driver, pool, device) in enumerate(results):
        entry: dict[str, Any] = {"request": request, "driver": driver, "pool": pool}
        entry["device"] = device
        if request in admin:
            entry["adminAccess"] = True
        share = shares[i] if i < len(shares) else None
        if share is not None:
            entry["shareID"] = share[0]
            if share[1]:
                entry["consumedCapacity"] = dict(share[1])
        conditions = binding[i] if i < len(binding) else None
        if conditions is not None:
            entry["bindingConditions"] = list(conditions[0])
            if conditions[1]:
                entry["bindingFailureConditions"] = list(conditions[1])
        entries.append(entry)
    out: dict[str, Any] = {"devices": {"results": entries}}
    if config:
        out["devices"]["config"] = [
            dict(c, requests=list(c["requests"])) if "requests" in c else dict(c) for c in config
        ]
    if node:
        out["nodeSelector"] = {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        }
    elif selector is not None:
        out["nodeSelector"] = {"nodeSelectorTerms": [msgspec.to_builtins(selector)]}
    return out


def consumer_json(pod_name: str, pod_uid: str) -> dict[str, str]:
    """A `status.reservedFor` entry for a pod."""
    return {"resource": "pods", "name": pod_name, "uid": pod_uid}


def with_allocation(
    claim: ResourceClaim,
    results: tuple[tuple[str, str, str, str], ...],
    node: str,
    pod_name: str,
    pod_uid: str,
    shares: tuple[ShareResult | None, ...] = (),
    selector: NodeSelectorTerm | None = None,
    admin: tuple[str, ...] = (),
    config: tuple[dict[str, Any], ...] = (),
    binding: tuple[BindingConditions | None, ...] = (),
) -> ResourceClaim:
    """The claim as the API has it after the scheduler's status write: allocated (when
    `results` are given) and reserved for the pod."""
    status = claim.status
    allocation = status.allocation
    if results:
        allocation = msgspec.convert(
            allocation_json(results, node, shares, selector, admin, config, binding),
            AllocationResult,
        )
    reserved = list(status.reserved_for)
    if all(r.uid != pod_uid for r in reserved):
        reserved.append(
            msgspec.convert(consumer_json(pod_name, pod_uid), ResourceClaimConsumerReference)
        )
    new_status = msgspec.structs.replace(status, allocation=allocation, reserved_for=reserved)
    return msgspec.structs.replace(claim, status=new_status)


def claims_from_templates(
    pod: Pod, templates: dict[str, ResourceClaimTemplate]
) -> tuple[Pod, list[ResourceClaim]]:
    """What the resource-claim controller does for a new pod: a ResourceClaim per
    template entry without one (named `<pod>-<entry>`, owned by the pod), and the pod's
    `status.resourceClaimStatuses` naming them. Entries whose template is unknown are
    left alone (the pod waits for it)."""
    from shoal.api.objects import OwnerReference, PodResourceClaimStatus

    namespace = pod.metadata.namespace or "default"
    statuses = list(pod.status.resource_claim_statuses)
    named = {s.name for s in statuses}
    claims: list[ResourceClaim] = []
    for entry in pod.spec.resource_claims:
        template_name = entry.resource_claim_template_name
        if not template_name or entry.name in named:
            continue
        template = templates.get(claim_key(namespace, template_name))
        if template is None:
            continue
        name = f"{pod.metadata.name}-{entry.name}"
        owner = OwnerReference(kind="Pod", name=pod.metadata.name, uid=pod.metadata.uid)
        owner = msgspec.structs.replace(owner, controller=True)
        meta = ObjectMeta(name=name, namespace=namespace, owner_references=[owner])
        claims.append(ResourceClaim(metadata=meta, spec=template.spec.spec))
        statuses.append(PodResourceClaimStatus(name=entry.name, resource_claim_name=name))
    if not claims:
        return pod, []
    status = msgspec.structs.replace(pod.status, resource_claim_statuses=statuses)
    return msgspec.structs.replace(pod, status=status), claims
