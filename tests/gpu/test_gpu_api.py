"""Parsing GPU requests of pods and GPU devices of nodes (shoal.api.gpu)."""

from __future__ import annotations

import pytest

from shoal.api.gpu import (
    NO_GPU,
    GpuRequest,
    GpuRequestError,
    format_gpu_index,
    node_gpus,
    parse_gpu_index,
    pod_gpu_index,
    pod_gpu_request,
)
from shoal.testing.builders import make_node, make_pod

from .helpers import gpu_node, gpu_pod


def test_whole_gpus_from_the_nvidia_resource() -> None:
    pod = make_pod("p").req({"cpu": "1", "nvidia.com/gpu": 2}).info()
    assert pod_gpu_request(pod) == GpuRequest(2, 1000)


def test_a_share_from_the_alibaba_annotations() -> None:
    request = pod_gpu_request(gpu_pod("p", milli=470, models="V100M16|V100M32").info())
    assert request == GpuRequest(1, 470, frozenset({"V100M16", "V100M32"}))
    assert request.shared and request.total_milli == 470 and request.affinity == "share-gpu"


def test_milli_alone_means_one_device_and_count_alone_whole_devices() -> None:
    only_milli = make_pod("a").annotations({"alibabacloud.com/gpu-milli": "250"}).info()
    only_count = make_pod("b").annotations({"alibabacloud.com/gpu-count": "4"}).info()
    assert pod_gpu_request(only_milli) == GpuRequest(1, 250)
    assert pod_gpu_request(only_count) == GpuRequest(4, 1000)
    assert pod_gpu_request(only_count).affinity == "4-gpu"


def test_no_gpu() -> None:
    request = pod_gpu_request(make_pod("p").req(cpu="1").info())
    assert request is NO_GPU and not request and request.affinity == "no-gpu"


@pytest.mark.parametrize(
    ("annotations", "requests", "message"),
    [
        ({"alibabacloud.com/gpu-milli": "1500"}, {}, "whole number from 1 to 1000"),
        ({"alibabacloud.com/gpu-milli": "half"}, {}, "whole number from 1 to 1000"),
        # "0" and "0.5" were scheduled silently as pods without a GPU.
        ({"alibabacloud.com/gpu-milli": "0"}, {}, "gpu-milli='0': must be a whole number"),
        ({"alibabacloud.com/gpu-milli": "0.5"}, {}, "gpu-milli='0.5': must be a whole number"),
        ({"alibabacloud.com/gpu-count": "1e20"}, {}, "whole number from 0 to 256"),
        ({"alibabacloud.com/gpu-count": "2"}, {"nvidia.com/gpu": 1}, "disagrees"),
        ({}, {"nvidia.com/gpu": 100000}, "more than 256 devices"),
        (
            {"alibabacloud.com/gpu-milli": "500", "alibabacloud.com/gpu-count": "0"},
            {},
            "gpu-count is 0",
        ),
    ],
)
def test_inconsistent_requests_are_errors(
    annotations: dict[str, str], requests: dict[str, int], message: str
) -> None:
    pod = make_pod("p").req({"cpu": "1", **requests}).annotations(annotations).info()
    with pytest.raises(GpuRequestError, match=message):
        pod_gpu_request(pod)


def test_node_devices_and_model() -> None:
    assert node_gpus(gpu_node("n", 8, model="G2").obj()) == (8, "G2")
    alibaba = make_node("a").capacity({"cpu": "8", "alibabacloud.com/gpu-count": 2})
    alibaba = alibaba.label("nvidia.com/gpu.product", "Tesla-T4")
    assert node_gpus(alibaba.obj()) == (2, "Tesla-T4")
    assert node_gpus(make_node("c").capacity(cpu="8").obj()) == (0, "")


def test_device_indices_round_trip() -> None:
    assert parse_gpu_index("0,3") == (0, 3)
    assert parse_gpu_index("2-3-4") == (2, 3, 4)  # Alibaba's separator
    assert format_gpu_index((1, 5)) == "1,5"
    assert pod_gpu_index(gpu_pod("p", devices="1").info()) == (1,)
    assert pod_gpu_index(gpu_pod("q", devices="x").info()) is None
