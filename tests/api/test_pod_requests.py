"""pod_requests: component-helpers resource.PodRequests and the scheduler's non-zero view.

Cases follow k8s.io/component-helpers/resource helpers_test.go (TestPodRequestsAndLimits,
TestPodResourceRequests incl. restartable init containers) and the scheduler's
GetNonzeroRequests defaults (100m cpu, 200Mi memory for containers that set none).
"""

from __future__ import annotations

import msgspec
import pytest

from shoal.api.manifests import ManifestError, decode
from shoal.api.objects import Pod
from shoal.api.podinfo import pod_requests, qos_class
from shoal.api.resources import DEFAULT_MEMORY_REQUEST as MEM0
from shoal.api.resources import DEFAULT_MILLI_CPU_REQUEST as CPU0
from shoal.testing import make_pod

Mi = 2**20
Gi = 2**30


@pytest.mark.parametrize(
    ("pod", "requests", "nonzero"),
    [
        pytest.param(make_pod("p"), {}, (0, 0), id="no-containers"),
        pytest.param(make_pod("p").container(), {}, (CPU0, MEM0), id="best-effort-container"),
        pytest.param(
            make_pod("p").req(cpu="1", memory="5").req(cpu="4", memory="12"),
            {"cpu": 5000, "memory": 17},
            (5000, 17),
            id="sum-of-containers",
        ),
        pytest.param(
            make_pod("p").lim(cpu="9"),
            {"cpu": 9000},
            (9000, MEM0),
            id="just-limit-defaults-request",
        ),
        pytest.param(
            make_pod("p").container(requests={"cpu": "1"}, limits={"cpu": "2", "memory": "3Gi"}),
            {"cpu": 1000, "memory": 3 * Gi},
            (1000, 3 * Gi),
            id="request-kept-limit-fills-missing",
        ),
        pytest.param(
            make_pod("p").overhead(cpu="5", memory="5"),
            {"cpu": 5000, "memory": 5},
            (5000, 5),
            id="just-overhead",
        ),
        pytest.param(
            make_pod("p").req(cpu="1", memory="10").overhead(cpu="5", memory="5"),
            {"cpu": 6000, "memory": 15},
            (6000, 15),
            id="req-and-overhead",
        ),
        pytest.param(
            make_pod("p").req(cpu="1").init_req(cpu="4"),
            {"cpu": 4000},
            (4000, MEM0),
            id="larger-init-container",
        ),
        pytest.param(
            make_pod("p").req(cpu="2").req(cpu="3").init_req(cpu="2"),
            {"cpu": 5000},
            (5000, 2 * MEM0),
            id="larger-containers",
        ),
        pytest.param(
            make_pod("p")
            .req(cpu="1", memory="5")
            .req(cpu="4", memory="12")
            .init_req(cpu="1", memory="5")
            .init_req(cpu="40", memory="120")
            .overhead(cpu="3", memory="8"),
            {"cpu": 43000, "memory": 128},
            (43000, 128),
            id="massive-init-plus-overhead",
        ),
        pytest.param(
            make_pod("p").req(cpu="1").sidecar_req(cpu="1"),
            {"cpu": 2000},
            (2000, 2 * MEM0),
            id="restartable-init-container",
        ),
        pytest.param(
            make_pod("p")
            .req(cpu="1")
            .sidecar_req(cpu="1")
            .sidecar_req(cpu="2")
            .sidecar_req(cpu="3"),
            {"cpu": 7000},
            (7000, 4 * MEM0),
            id="multiple-restartable-init-containers",
        ),
        pytest.param(
            make_pod("p")
            .req(cpu="1")
            .init_req(cpu="5")
            .sidecar_req(cpu="1")
            .sidecar_req(cpu="2")
            .init_req(cpu="5")
            .sidecar_req(cpu="3"),
            # app phase 1+1+2+3 = 7; the second regular init runs next to sidecars 1+2: 8
            {"cpu": 8000},
            (8000, 4 * MEM0),
            id="restartable-and-regular-init-containers",
        ),
        pytest.param(
            make_pod("p").req(cpu="1").sidecar_req(cpu="1").init_req(cpu="10").sidecar_req(cpu="2"),
            {"cpu": 11000},  # 10 next to the first sidecar
            (11000, 3 * MEM0),
            id="regular-init-between-sidecars",
        ),
        pytest.param(
            make_pod("p").req({"nvidia.com/gpu": 1}).init_req({"nvidia.com/gpu": 2}),
            {"nvidia.com/gpu": 2},
            (CPU0, MEM0),  # the init container's defaults are a max, not a sum
            id="extended-resources-follow-the-same-rules",
        ),
        pytest.param(
            make_pod("p").req(cpu="0", memory="0"),
            {},
            (0, 0),  # explicitly zero is not "missing": no default applies
            id="explicit-zero-requests",
        ),
        pytest.param(
            make_pod("p").req(cpu="250m").req(memory="1Gi"),
            {"cpu": 250, "memory": Gi},
            (250 + CPU0, MEM0 + Gi),
            id="defaults-per-container-per-resource",
        ),
    ],
)
def test_pod_requests(pod: object, requests: dict[str, int], nonzero: tuple[int, int]) -> None:
    assert pod_requests(pod.obj()) == (requests, nonzero)  # type: ignore[attr-defined]


# Pod-level resources (KEP-2837): component-helpers' PodRequests replaces the containers'
# sum by the pod-level request for cpu, memory and hugepages; the API server defaults a
# pod-level request from the containers' requests, else from the pod-level limit.
@pytest.mark.parametrize(
    ("pod", "requests", "nonzero"),
    [
        pytest.param(
            make_pod("p").container().container().pod_resources(requests={"cpu": "3"}),
            {"cpu": 3000},
            (3000, 2 * MEM0),
            id="pod-level-request-alone",
        ),
        pytest.param(
            make_pod("p").req(cpu="1", memory="1Gi").pod_resources(requests={"cpu": "2"}),
            {"cpu": 2000, "memory": Gi},
            (2000, Gi),
            id="pod-level-cpu-replaces-containers-cpu-only",
        ),
        pytest.param(
            make_pod("p").container().pod_resources(limits={"cpu": "2", "memory": "4Gi"}),
            {"cpu": 2000, "memory": 4 * Gi},
            (2000, 4 * Gi),
            id="pod-level-limit-defaults-the-request",
        ),
        pytest.param(
            make_pod("p").req(cpu="500m").pod_resources(limits={"cpu": "2"}),
            {"cpu": 500},
            (500, MEM0),
            id="containers-requests-default-the-pod-level-request",
        ),
        pytest.param(
            make_pod("p")
            .req({"nvidia.com/gpu": 1})
            .overhead(cpu="250m")
            .pod_resources(requests={"cpu": "1", "memory": "1Gi"}),
            {"cpu": 1250, "memory": Gi, "nvidia.com/gpu": 1},
            (1250, Gi),
            id="overhead-on-top-and-other-resources-from-containers",
        ),
    ],
)
def test_pod_level_requests(
    pod: object, requests: dict[str, int], nonzero: tuple[int, int]
) -> None:
    assert pod_requests(pod.obj()) == (requests, nonzero)  # type: ignore[attr-defined]


def test_podinfo_derives_once() -> None:
    info = (
        make_pod("web")
        .namespace("shop")
        .req(cpu="500m", memory="1Gi")
        .host_port(8080)
        .toleration("dedicated", "web", "NoSchedule")
        .priority(7)
        .info()
    )
    assert info.key == "shop/web"
    assert info.uid == "shop/web"  # no metadata.uid: the key stands in
    assert info.requests == {"cpu": 500, "memory": Gi}
    assert info.priority == 7
    assert [(p.port, p.protocol, p.ip) for p in info.host_ports] == [(8080, "TCP", "")]
    assert len(info.tolerations) == 1


def test_empty_namespace_means_default() -> None:
    assert make_pod("x", namespace="").info().key == "default/x"


@pytest.mark.parametrize(
    ("builder", "field", "problem"),
    [
        (
            lambda: make_pod("p").req(cpu="-1"),
            "requests.cpu",
            "quantity '-1' must not be negative",
        ),
        (
            lambda: make_pod("p").lim(memory="-2Gi"),
            "limits.memory",
            "quantity '-2Gi' must not be negative",
        ),
        (
            lambda: make_pod("p").overhead(cpu="-5m"),
            "overhead.cpu",
            "quantity '-5m' must not be negative",
        ),
    ],
)
def test_negative_request_rejected_naming_the_field(
    builder: object, field: str, problem: str
) -> None:
    with pytest.raises(ValueError) as err:
        builder().obj()  # type: ignore[operator]
    assert f"{field}: {problem}" in str(err.value)


@pytest.mark.parametrize(
    ("pod", "qos"),
    [
        (
            make_pod("p").container().pod_resources(limits={"cpu": "1", "memory": "1Gi"}),
            "Guaranteed",
        ),
        (
            make_pod("p").pod_resources(
                requests={"cpu": "500m", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"}
            ),
            "Burstable",
        ),
        (make_pod("p").pod_resources(limits={"cpu": "1"}), "Burstable"),
        (make_pod("p").req(cpu="1").pod_resources(requests={"memory": "1Gi"}), "Burstable"),
    ],
)
def test_qos_class_reads_pod_level_resources_as_kube_does(pod: object, qos: str) -> None:
    assert qos_class(pod.obj()) == qos  # type: ignore[attr-defined]


def test_pod_level_resources_other_than_cpu_memory_hugepages_are_refused() -> None:
    raw = make_pod("p").container().obj()
    body = msgspec.to_builtins(raw)
    body["spec"]["resources"] = {"requests": {"nvidia.com/gpu": "1"}}
    with pytest.raises(ManifestError) as caught:
        decode(body, Pod)
    message = str(caught.value)
    assert "spec.resources" in message or "resources.requests.nvidia.com/gpu" in message
    assert "pod-level resources may only be cpu, memory or hugepages-<size>" in message
