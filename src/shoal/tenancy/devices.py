"""What a pod's Dynamic Resource Allocation claims charge its tenant queue.

Devices asked for through ResourceClaims count against queue quotas like extended
resources, under the name of their DeviceClass's resource:

* the class's `spec.extendedResourceName` when it sets one (a class of GPUs naming
  `nvidia.com/gpu` makes DRA GPUs, whole GPUs and GPU shares one quota, in milli-GPU
  like the rest), else
* kube's implicit name for the class, `deviceclass.resource.kubernetes.io/<class>`
  (KEP-5004), which a Queue's `guaranteed` or `max` can name.

Counted from the claims' specs, which do not change (so what is charged when a pod is
placed is what is released when it leaves): per request, `count` devices of its class
(`allocationMode: All` counts one, since how many is known only once allocated); a
`firstAvailable` request counts its first sub-request. A claim made from a template is
counted from the template until the claim exists. A claim shared by several pods is
charged to each of them. A request with admin access charges nothing (it takes its
devices from nobody).
"""

from __future__ import annotations

from collections.abc import Mapping

from shoal.api.dra import DeviceClass, ResourceClaimSpec, pod_claim_names
from shoal.api.podinfo import PodInfo
from shoal.cache.dra import DeviceCatalog

__all__ = ["IMPLICIT_PREFIX", "claim_charges", "device_resource"]

IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"


def device_resource(class_name: str, classes: Mapping[str, DeviceClass]) -> str:
    """The resource name a device of this class is charged under."""
    found = classes.get(class_name)
    named = found.spec.extended_resource_name if found is not None else None
    return named or f"{IMPLICIT_PREFIX}{class_name}"


def claim_charges(pod: PodInfo, catalog: DeviceCatalog) -> tuple[tuple[str, int], ...]:
    """(resource, devices) the pod's claims ask for, sorted; () without claims."""
    if not pod.pod.spec.resource_claims:
        return ()
    counts: dict[str, int] = {}
    for use in pod_claim_names(pod.pod):
        spec = _spec(use.key, use.template, pod.namespace, catalog)
        if spec is None:
            continue
        for request in spec.devices.requests:
            if request.exactly is not None:
                if request.exactly.admin_access:
                    continue  # admin access takes devices from nobody
                name, mode, count = (
                    request.exactly.device_class_name,
                    request.exactly.allocation_mode,
                    request.exactly.count,
                )
            elif request.first_available:
                first = request.first_available[0]
                name, mode, count = first.device_class_name, first.allocation_mode, first.count
            else:
                continue
            resource = device_resource(name, catalog.classes)
            counts[resource] = counts.get(resource, 0) + (1 if mode == "All" else max(count, 0))
    return tuple(sorted(counts.items()))


def _spec(
    key: str, template: str, namespace: str, catalog: DeviceCatalog
) -> ResourceClaimSpec | None:
    claim = catalog.claims.get(key) if key else None
    if claim is not None:
        return claim.spec
    found = catalog.templates.get(f"{namespace or 'default'}/{template}") if template else None
    return found.spec.spec if found is not None else None
