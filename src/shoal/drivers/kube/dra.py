"""Dynamic Resource Allocation in a cluster: what the kube backend watches for the
DynamicResources plugin, and how its decisions (`AllocateClaims`) are written.

Watched (list+watch of resource.k8s.io/v1, into the scheduler's `DeviceCatalog`):
DeviceClasses, ResourceSlices, ResourceClaims, ResourceClaimTemplates, and
DeviceTaintRules (resource.k8s.io/v1beta2, or v1alpha3 on older clusters; served only
with the DRADeviceTaintRules feature gate). All are optional: on a cluster that does
not serve the API they are marked absent and looked for again later, and pods with
claims wait.

Written (`ClaimWriter`), as kube-scheduler writes them, before the pod's Binding:

* a claim to allocate gets kube's finalizer `resource.kubernetes.io/delete-protection`
  (so it is not deleted under its pod), then its `status.allocation` (devices per
  request, with the `shareID` and `consumedCapacity` of a share of a device that allows
  multiple allocations, and a node selector naming the node for node-local devices) and
  the pod in `status.reservedFor`, in one status patch;
* an allocated claim (shared) gets the pod added to `status.reservedFor`;
* a claim PostFilter deallocates (`DeallocateClaim`: allocated to devices the pod
  cannot use where it would fit, and reserved for nobody else) gets its
  `status.allocation` and `reservedFor` removed, if it has not changed since the
  decision (its resourceVersion, as a precondition); a failure is logged, and the pod
  is tried again as it would have been anyway.

Requests per claim, as kube-scheduler's PreBind (`bindClaim`) makes them: the write
starts from the latest copy at hand (the informer's, or this writer's own last answer
for the claim when that is newer), with no read first. A claim to allocate takes
two requests: the finalizer (a metadata patch; the status subresource ignores metadata),
whose answer carries the resourceVersion the status patch then names as precondition.
A shared claim already allocated takes one (its reservedFor). Every patch carries the
resourceVersion of the copy it was built from, so a stale copy costs a 409, never a
lost update. A 409 conflict, or a patch whose answer was lost (no answer, a 5xx), reads
the claim and retries (a few times); a claim found already written for this pod (its
allocation the one wanted, the pod in its reservedFor: a retried bind after a lost
answer) is recognised and not written again. A claim someone else allocated to other
devices meanwhile, or gone or being deleted, fails the pod's bind (`BindError`): the
pod is requeued and its assumed devices released.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from shoal.api.dra import (
    DeviceClass,
    DeviceTaintRule,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    allocation_json,
    consumer_json,
)
from shoal.drivers.kube.client import JSON, ApiError, KubeClient
from shoal.drivers.kube.resources import PODS, ResourceKind
from shoal.framework.effects import AllocateClaims, BindError, ClaimAllocation, DeallocateClaim
from shoal.scheduler.dra import delete_dra, upsert_dra
from shoal.scheduler.scheduler import Scheduler

__all__ = [
    "DEVICE_CLASSES",
    "DEVICE_TAINT_RULES",
    "DRA_WATCHED",
    "FINALIZER",
    "RESOURCE_CLAIMS",
    "RESOURCE_CLAIM_TEMPLATES",
    "RESOURCE_SLICES",
    "ClaimWriter",
]

log = logging.getLogger("shoal.kube.dra")

FINALIZER = "resource.kubernetes.io/delete-protection"
_GROUP, _VERSION = "resource.k8s.io", "v1"
_ATTEMPTS = 4
_BINDING_POLL = 1.0  # seconds between reads of claims whose binding conditions are awaited
_ANSWERS_KEPT = 256


class _Intake(Protocol):
    @property
    def scheduler(self) -> Scheduler: ...


DEVICE_CLASSES = ResourceKind(
    _GROUP, _VERSION, "deviceclasses", "DeviceClass", False, DeviceClass, optional=True
)
RESOURCE_SLICES = ResourceKind(
    _GROUP, _VERSION, "resourceslices", "ResourceSlice", False, ResourceSlice, optional=True
)
RESOURCE_CLAIMS = ResourceKind(
    _GROUP, _VERSION, "resourceclaims", "ResourceClaim", True, ResourceClaim, optional=True
)
RESOURCE_CLAIM_TEMPLATES = ResourceKind(
    _GROUP,
    _VERSION,
    "resourceclaimtemplates",
    "ResourceClaimTemplate",
    True,
    ResourceClaimTemplate,
    optional=True,
)


DEVICE_TAINT_RULES = ResourceKind(
    _GROUP,
    "v1beta2",
    "devicetaintrules",
    "DeviceTaintRule",
    False,
    DeviceTaintRule,
    optional=True,
    fallback_versions=("v1", "v1alpha3"),
)


def binding_verdict(claim: JSON) -> str | None:
    """kube's isClaimReadyForBinding: "" when every device of the allocation with
    binding conditions has them all True in the claim's `status.devices`; None while one
    is not yet; why, when a binding failure condition is True."""
    status = claim.get("status") or {}
    allocation = status.get("allocation")
    if not allocation:
        return (
            "resourceclaim " + str(claim.get("metadata", {}).get("name")) + " lost its allocation"
        )
    reported = {
        (d.get("driver"), d.get("pool"), d.get("device")): {
            c.get("type"): c for c in d.get("conditions") or []
        }
        for d in status.get("devices") or []
    }
    pending = False
    for result in (allocation.get("devices") or {}).get("results") or []:
        wanted = result.get("bindingConditions") or []
        if not wanted:
            continue
        conditions = reported.get((result.get("driver"), result.get("pool"), result.get("device")))
        if conditions is None:
            pending = True
            continue
        for failure in result.get("bindingFailureConditions") or []:
            found = conditions.get(failure)
            if found is not None and found.get("status") == "True":
                name = claim.get("metadata", {}).get("name")
                return (
                    f"resourceclaim {name} binding failed: device {result.get('device')} "
                    f"reports {failure} (reason={found.get('reason', '')}, "
                    f"message={found.get('message', '')!r})"
                )
        if any((conditions.get(c) or {}).get("status") != "True" for c in wanted):
            pending = True
    return None if pending else ""


def _now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _upsert(backend: _Intake, obj: Any, raw: JSON) -> None:
    upsert_dra(backend.scheduler, obj)


def _remover(kind: ResourceKind) -> Callable[[_Intake, str, str], None]:
    def remove(backend: _Intake, namespace: str, name: str) -> None:
        delete_dra(backend.scheduler, kind.kind, namespace, name)

    return remove


# (kind, upsert, remove) for the backend's WATCHED list.
DRA_WATCHED: list[
    tuple[ResourceKind, Callable[[_Intake, Any, JSON], None], Callable[..., None]]
] = [
    (kind, _upsert, _remover(kind))
    for kind in (
        DEVICE_CLASSES,
        RESOURCE_SLICES,
        RESOURCE_CLAIMS,
        RESOURCE_CLAIM_TEMPLATES,
        DEVICE_TAINT_RULES,
    )
]


class ClaimWriter:
    """Carries out `AllocateClaims` (see the module docstring)."""

    def __init__(
        self,
        client: KubeClient,
        timeout: float = 10.0,
        concurrency: int = 64,
        lookup: Callable[[str], JSON | None] = lambda key: None,
    ) -> None:
        self.client = client
        self.timeout = timeout
        # The informer's latest copy of a claim, by `namespace/name` (None: not known;
        # the claim is then read first).
        self.lookup = lookup
        # At most this many claims written at once, as binds are (each write is a few
        # requests): thousands started at once time out waiting for connections, and
        # every timed-out write fails its pod's bind.
        self._slots = asyncio.Semaphore(concurrency)
        self._pending: dict[str, asyncio.Task[None]] = {}  # pod uid -> writes
        # One write at a time per claim, in the order emitted: the pod that allocates a
        # shared claim writes before the pods that only join its reservedFor.
        self._locks: dict[str, asyncio.Lock] = {}
        self._deallocations: set[asyncio.Task[None]] = set()
        # claim -> the API server's answer to our last write of it, until the informer
        # has caught up: the next pod joining a shared claim right after its allocation
        # starts from that, not from an informer copy a write behind (a sure 409 and a
        # read). The newest few only: the watch catches up within moments.
        self._answers: OrderedDict[str, JSON] = OrderedDict()
        self.requests = 0  # claim requests sent (reads and patches), for tests

    def start(self, effect: AllocateClaims) -> None:
        """Begin the writes (called from `emit`, inside a binding cycle)."""
        self._pending[effect.pod.uid] = asyncio.ensure_future(self.write(effect))

    def forget(self, uid: str) -> None:
        self._pending.pop(uid, None)

    def deallocate(self, effect: DeallocateClaim) -> None:
        """Begin clearing the claim's allocation (called from `emit`)."""
        task = asyncio.ensure_future(self._deallocate(effect))
        self._deallocations.add(task)
        task.add_done_callback(self._deallocations.discard)

    async def _deallocate(self, effect: DeallocateClaim) -> None:
        await self._clear(effect.pod.key, effect.claim, effect.seen)

    async def _clear(self, pod: str, claim: str, seen: str = "") -> None:
        """Remove the claim's allocation and reservedFor (only if its resourceVersion
        is still `seen`, when given). A refusal is logged: 409, changed since the
        decision (someone reserved or reallocated it); 404, gone. Either way the next
        attempt judges the claim as it is then."""
        namespace, _, name = claim.partition("/")
        body: JSON = {
            "metadata": {"resourceVersion": seen} if seen else {},
            "status": {"allocation": None, "reservedFor": None},
        }
        try:
            async with self._slots:
                await self.client.request(
                    "PATCH",
                    RESOURCE_CLAIMS.path(namespace, name, "status"),
                    body=body,
                    content_type="application/merge-patch+json",
                    timeout=self.timeout,
                )
        except ApiError as err:
            log.info(
                "pod %s: deallocating resourceclaim %s not done: %s %s",
                pod,
                claim,
                err.status,
                err.reason,
            )
        except (OSError, TimeoutError) as err:
            log.warning(
                "pod %s: deallocating resourceclaim %s failed: %s",
                pod,
                claim,
                str(err) or type(err).__name__,
            )

    async def wait(self, uid: str) -> None:
        """Before the pod's Binding: the claim writes for it, if any, must have landed."""
        task = self._pending.pop(uid, None)
        if task is not None:
            await task

    async def write(self, effect: AllocateClaims) -> None:
        for entry in effect.claims:
            await self._write_one(effect, entry)
            if entry.create is not None:
                await self._name_in_pod(effect, entry)
        waiting = [entry for entry in effect.claims if entry.waits]
        if waiting:
            await self._await_binding_conditions(effect, waiting)

    async def _await_binding_conditions(
        self, effect: AllocateClaims, waiting: list[ClaimAllocation]
    ) -> None:
        """kube's PreBind wait (KEP-5007): read the claims until the driver reports
        every binding condition of their devices True in `status.devices`. A binding
        failure condition True, or `effect.binding_timeout` passing, fails the pod's
        binding; the allocations written for it are cleared first, so the next
        attempt chooses devices anew."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + effect.binding_timeout
        while True:
            why = ""
            ready = True
            for entry in waiting:
                namespace, _, name = entry.claim.partition("/")
                claim = await self._read(effect, entry, RESOURCE_CLAIMS.path(namespace, name))
                verdict = binding_verdict(claim)
                if verdict is None:
                    ready = False
                elif verdict:
                    why = verdict
                    break
            if not why and ready:
                return
            if not why and loop.time() >= deadline:
                why = f"binding conditions not met within {effect.binding_timeout:g} s"
            if why:
                for entry in waiting:
                    if entry.results:
                        await self._clear(effect.pod.key, entry.claim)
                raise BindError(f"pod {effect.pod.key}: {why}")
            await asyncio.sleep(min(_BINDING_POLL, max(deadline - loop.time(), 0.0)))

    async def _create(self, effect: AllocateClaims, entry: ClaimAllocation) -> JSON | None:
        """Create the claim for the pod's extended resources (kube's finalizer in it
        from the start); the answer, or None when the claim is to be read (it exists
        already: its name is derived from the pod, so a retried write finds the claim
        made before; or the answer was lost)."""
        assert entry.create is not None
        body = dict(entry.create)
        body["metadata"] = {**body["metadata"], "finalizers": [FINALIZER]}
        namespace = str(body["metadata"].get("namespace", ""))
        self.requests += 1
        try:
            answer: JSON = await self.client.request(
                "POST", RESOURCE_CLAIMS.path(namespace), body=body, timeout=self.timeout
            )
        except ApiError as err:
            if err.status == 409 or err.ambiguous:
                return None
            raise self._error(effect, entry, err) from None
        return answer

    async def _name_in_pod(self, effect: AllocateClaims, entry: ClaimAllocation) -> None:
        """`status.extendedResourceClaimStatus`: which claim, and which of its requests
        serves which container's resource (the kubelet reads it)."""
        name = entry.claim.partition("/")[2]
        body = {
            "status": {
                "extendedResourceClaimStatus": {
                    "resourceClaimName": name,
                    "requestMappings": [dict(m) for m in entry.mappings],
                }
            }
        }
        try:
            await self.client.request(
                "PATCH",
                PODS.path(effect.pod.namespace, effect.pod.name, "status"),
                body=body,
                content_type="application/merge-patch+json",
                timeout=self.timeout,
            )
        except ApiError as err:
            raise BindError(
                f"pod {effect.pod.key}: naming resourceclaim {name} in its "
                f"status.extendedResourceClaimStatus failed: {err.status} {err.reason}: "
                f"{err.message}"
            ) from None

    async def _write_one(self, effect: AllocateClaims, entry: ClaimAllocation) -> None:
        lock = self._locks.setdefault(entry.claim, asyncio.Lock())
        try:
            async with lock, self._slots:
                await self._write_locked(effect, entry)
        finally:
            if not lock.locked() and self._locks.get(entry.claim) is lock:
                del self._locks[entry.claim]

    async def _write_locked(self, effect: AllocateClaims, entry: ClaimAllocation) -> None:
        created = await self._create(effect, entry) if entry.create is not None else None
        namespace, _, name = entry.claim.partition("/")
        path = RESOURCE_CLAIMS.path(namespace, name)
        wanted = (
            allocation_json(
                entry.results,
                entry.node,
                entry.shares,
                entry.selector,
                entry.admin,
                entry.config,
                entry.binding,
            )
            if entry.results
            else None
        )
        claim = created if created is not None else self._latest(entry.claim)
        # `claim` came from the API server in this write (read or answer)
        fresh = created is not None
        for _ in range(_ATTEMPTS):
            if claim is None:
                claim = await self._read(effect, entry, path)
                fresh = True
            meta = claim.get("metadata") or {}
            status = claim.get("status") or {}
            current = status.get("allocation")
            if meta.get("deletionTimestamp"):
                raise BindError(
                    f"pod {effect.pod.key}: resourceclaim {entry.claim} is being deleted"
                )
            if (wanted is not None and current and _devices(current) != _devices(wanted)) or (
                wanted is None and not current
            ):
                if not fresh:  # a copy behind the API server's: judge the claim as it is
                    claim = None
                    continue
                raise BindError(
                    f"pod {effect.pod.key}: resourceclaim {entry.claim} "
                    + (
                        "was allocated to other devices meanwhile"
                        if wanted is not None
                        else "is no longer allocated"
                    )
                )
            if wanted is not None and FINALIZER not in (meta.get("finalizers") or []):
                # The finalizer first, in a metadata write (the status subresource keeps
                # metadata as it was): a claim with devices must not be deleted under its
                # pod. The answer is the claim at its new resourceVersion.
                claim = await self._add_finalizer(effect, entry, path, meta)
                fresh = claim is not None
                if claim is None:
                    continue
                meta = claim.get("metadata") or {}
                status = claim.get("status") or {}
                current = status.get("allocation")
            reserved = list(status.get("reservedFor") or [])
            joined = any(r.get("uid") == effect.pod.uid for r in reserved)
            if joined and (wanted is None or current):
                return  # written for this pod already (a retried bind, a lost answer)
            if not joined:
                reserved.append(consumer_json(effect.pod.name, effect.pod.uid))
            new_status: JSON = {"reservedFor": reserved}
            if wanted is not None and not current:
                # With kube-scheduler's allocationTimestamp (DRADeviceBindingConditions):
                # when the allocation was made, which a binding timeout counts from.
                new_status["allocation"] = {**wanted, "allocationTimestamp": _now_rfc3339()}
            body = {
                "metadata": {"resourceVersion": meta.get("resourceVersion", "")},
                "status": new_status,
            }
            claim = await self._patch(
                effect, entry, RESOURCE_CLAIMS.path(namespace, name, "status"), body
            )
            if claim is not None:
                return
        raise BindError(
            f"pod {effect.pod.key}: writing resourceclaim {entry.claim} kept conflicting "
            f"({_ATTEMPTS} attempts)"
        )

    def _latest(self, key: str) -> JSON | None:
        """The newest copy of the claim at hand: the informer's, or our last answer
        while the informer has not seen it yet (resourceVersions compared as numbers,
        as kube-scheduler's assume cache does; the informer's when they are not)."""
        known = self.lookup(key)
        answer = self._answers.get(key)
        if answer is None:
            return known
        if known is None:  # a claim deleted since answers 404 to the patch as to a read
            return answer
        mine, theirs = _version(answer), _version(known)
        if mine < 0 or theirs < 0 or theirs >= mine:
            del self._answers[key]  # the informer caught up (or cannot tell)
            return known
        return answer

    def _remember(self, key: str, answer: JSON) -> None:
        self._answers[key] = answer
        self._answers.move_to_end(key)
        while len(self._answers) > _ANSWERS_KEPT:
            self._answers.popitem(last=False)

    async def _add_finalizer(
        self, effect: AllocateClaims, entry: ClaimAllocation, path: str, meta: JSON
    ) -> JSON | None:
        """kube's finalizer on the claim, by a merge patch of its metadata: the claim at
        its new resourceVersion, or None to judge it again from a fresh read.

        A claim whose spec carries opaque driver parameters (a RawExtension, kept as the
        bytes its writer sent) in a JSON layout other than compact (`json.dumps`' spaces,
        for one) cannot be patched: the API server re-encodes the object to apply the
        patch, sees the spec changed and answers 422 "field is immutable" (kube-scheduler
        writes protobuf, which keeps the bytes). Then the claim as read is written back
        whole with the finalizer (a PUT, in this client's layout, which is what writers
        like it use); if that is refused too, the claim is allocated without the
        finalizer, with a warning, rather than the pod never bound."""
        body: JSON = {
            "metadata": {
                "finalizers": [*(meta.get("finalizers") or []), FINALIZER],
                "resourceVersion": meta.get("resourceVersion", ""),
            }
        }
        try:
            return await self._patch(effect, entry, path, body, raise_invalid=True)
        except ApiError as err:
            if err.status != 422 or "immutable" not in err.message:
                raise self._error(effect, entry, err) from None
        claim = await self._read(effect, entry, path)
        whole = dict(claim)
        whole["metadata"] = {
            **(claim.get("metadata") or {}),
            "finalizers": [*((claim.get("metadata") or {}).get("finalizers") or []), FINALIZER],
        }
        self.requests += 1
        try:
            answer: JSON = await self.client.request("PUT", path, body=whole, timeout=self.timeout)
        except ApiError as err:
            if err.conflict or err.ambiguous:
                return None
            if err.status != 422:
                raise self._error(effect, entry, err) from None
            log.warning(
                "pod %s: resourceclaim %s allocated without kube's finalizer %s: the API "
                "server refuses any rewrite of its spec (its opaque parameters were sent "
                "in a JSON layout this client cannot reproduce): %s",
                effect.pod.key,
                entry.claim,
                FINALIZER,
                err.message,
            )
            return claim
        self._remember(entry.claim, answer)
        return answer

    async def _patch(
        self,
        effect: AllocateClaims,
        entry: ClaimAllocation,
        path: str,
        body: JSON,
        raise_invalid: bool = False,
    ) -> JSON | None:
        """The claim as written, or None when the write must be judged again from a
        fresh read: a conflict (409), or no answer (reset, timeout, 5xx: it may have
        landed, and the read tells)."""
        self.requests += 1
        try:
            answer = await self.client.request(
                "PATCH",
                path,
                body=body,
                content_type="application/merge-patch+json",
                timeout=self.timeout,
            )
        except ApiError as err:
            if err.conflict or err.ambiguous:
                self._answers.pop(entry.claim, None)
                return None
            if raise_invalid and err.status == 422:
                raise
            raise self._error(effect, entry, err) from None
        if answer.get("metadata"):
            self._remember(entry.claim, answer)
        return answer

    async def _read(self, effect: AllocateClaims, entry: ClaimAllocation, path: str) -> JSON:
        self.requests += 1
        try:
            return await self.client.request("GET", path, timeout=self.timeout)
        except ApiError as err:
            raise self._error(effect, entry, err) from None

    def _error(self, effect: AllocateClaims, entry: ClaimAllocation, err: ApiError) -> BindError:
        return BindError(
            f"pod {effect.pod.key}: writing the allocation of resourceclaim {entry.claim} "
            f"for {effect.node} failed: {err.status} {err.reason}: {err.message}"
        )


def _version(claim: JSON) -> int:
    """A claim's resourceVersion as a number (-1 when it is not one)."""
    rv = (claim.get("metadata") or {}).get("resourceVersion", "")
    return int(rv) if isinstance(rv, str) and rv.isdigit() else -1


def _devices(allocation: JSON) -> list[tuple[str, str, str, str]]:
    results = (allocation.get("devices") or {}).get("results") or []
    return sorted(
        (r.get("request", ""), r.get("driver", ""), r.get("pool", ""), r.get("device", ""))
        for r in results
    )
