"""Pure values: Kubernetes objects, quantities and resources. No scheduler logic."""

from shoal.api.errors import ManifestError
from shoal.api.manifests import decode, load_objects
from shoal.api.objects import Node, Pod, PriorityClass, Taint, Toleration
from shoal.api.podinfo import HostPort, PodInfo, pod_requests
from shoal.api.quantity import QuantityError, parse_quantity

__all__ = [
    "HostPort",
    "ManifestError",
    "Node",
    "Pod",
    "PodInfo",
    "PriorityClass",
    "QuantityError",
    "Taint",
    "Toleration",
    "decode",
    "load_objects",
    "parse_quantity",
    "pod_requests",
]
