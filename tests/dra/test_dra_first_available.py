"""firstAvailable (prioritized list of sub-requests, KEP-4816, GA in Kubernetes 1.36):
a request takes the first of its sub-requests that can be satisfied on the node, and
the allocation names it `<request>/<subrequest>`."""

from __future__ import annotations

from typing import Any

from shoal.api.dra import DeviceConstraint
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import DRIVER, device_class, gpu_slice, resource_claim, with_claims

DOMAIN = f"{DRIVER}/nvlinkDomain"


def _sub(name: str, count: int = 1, *selectors: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "deviceClassName": DRIVER, "count": count}
    if selectors:
        out["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return out


def _run(*slices: Any, claim: Any, nodes: tuple[str, ...] = ("n1",)) -> tuple[Any, Any, Any]:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(n).capacity(cpu="16", memory="64Gi") for n in nodes))
    h.add_dra(device_class(), *slices, claim)
    h.add_pods(with_claims(make_pod("p"), gpu=claim.metadata.name))
    placements, messages = h.run()
    catalog = h.scheduler.handle.services["dra"]  # type: ignore[attr-defined]
    return placements["default/p"], messages, catalog


def _results(catalog: Any, claim: str = "c") -> list[tuple[str, str, str]]:
    results = catalog.claims[f"default/{claim}"].status.allocation.devices.results
    return [(r.request, r.pool, r.device) for r in results]


PAIR_OR_ONE = [{"name": "gpu", "firstAvailable": [_sub("pair", 2), _sub("one", 1)]}]


def test_first_sub_request_when_it_fits() -> None:
    node, _, catalog = _run(
        gpu_slice("n1", count=2), claim=resource_claim("c", requests=PAIR_OR_ONE)
    )
    assert node == "n1"
    assert _results(catalog) == [("gpu/pair", "n1", "gpu-0"), ("gpu/pair", "n1", "gpu-1")]


def test_next_sub_request_when_the_first_does_not_fit_on_the_node() -> None:
    node, _, catalog = _run(
        gpu_slice("n1", count=1), claim=resource_claim("c", requests=PAIR_OR_ONE)
    )
    assert node == "n1"
    assert _results(catalog) == [("gpu/one", "n1", "gpu-0")]


def test_each_node_judged_with_its_own_first_fitting_sub_request() -> None:
    # n1 has one GPU (only "one" fits), n2 none: the pod goes to n1 with "one".
    node, _, catalog = _run(
        gpu_slice("n1", count=1),
        claim=resource_claim("c", requests=PAIR_OR_ONE),
        nodes=("n1", "n2"),
    )
    assert node == "n1"
    assert _results(catalog) == [("gpu/one", "n1", "gpu-0")]


def test_sub_request_selectors_and_class() -> None:
    big = 'device.capacity["gpu.example.com"].memory >= quantity("80Gi")'
    requests = [{"name": "gpu", "firstAvailable": [_sub("big", 1, big), _sub("any", 1)]}]
    node, _, catalog = _run(
        gpu_slice("n1", count=1, memory="24Gi"), claim=resource_claim("c", requests=requests)
    )
    assert node == "n1"
    assert _results(catalog) == [("gpu/any", "n1", "gpu-0")]
    node, _, catalog = _run(
        gpu_slice("n1", count=1, memory="80Gi"), claim=resource_claim("c", requests=requests)
    )
    assert _results(catalog) == [("gpu/big", "n1", "gpu-0")]


def test_no_sub_request_fits() -> None:
    requests = [{"name": "gpu", "firstAvailable": [_sub("four", 4), _sub("three", 3)]}]
    node, messages, _ = _run(gpu_slice("n1", count=2), claim=resource_claim("c", requests=requests))
    assert node is None
    assert "only 2 of 4 requested devices free for c/gpu/four" in messages["default/p"]


def test_match_attribute_across_a_first_available_request() -> None:
    # Domains 0, 1, 1, 2: "a" plus a pair in one domain needs three GPUs of a domain
    # (none), "a" plus one needs two: domain 1 for both.
    requests = [
        {"name": "a", "exactly": {"deviceClassName": DRIVER}},
        {"name": "b", "firstAvailable": [_sub("pair", 2), _sub("one", 1)]},
    ]
    slices = gpu_slice("n1", count=4, attributes={"nvlinkDomain": [0, 1, 1, 2]})
    claim = resource_claim("c", requests=requests, match_attribute=DOMAIN)
    node, _, catalog = _run(slices, claim=claim)
    assert node == "n1"
    results = _results(catalog)
    assert [r[0] for r in results] == ["a", "b/one"]
    assert sorted(r[2] for r in results) == ["gpu-1", "gpu-2"]


def test_constraint_naming_one_sub_request_applies_only_when_it_is_chosen() -> None:
    requests = [
        {"name": "a", "exactly": {"deviceClassName": DRIVER}},
        {"name": "b", "firstAvailable": [_sub("pair", 2), _sub("one", 1)]},
    ]
    slices = gpu_slice("n1", count=3, attributes={"nvlinkDomain": [0, 1, 2]})
    claim = resource_claim("c", requests=requests)
    claim.spec.devices.constraints = [
        DeviceConstraint(requests=["a", "b/one"], match_attribute=DOMAIN)
    ]
    # "pair" is not constrained: a takes gpu-0, the pair gpu-1 and gpu-2.
    node, _, catalog = _run(slices, claim=claim)
    assert node == "n1"
    assert _results(catalog) == [
        ("a", "n1", "gpu-0"),
        ("b/pair", "n1", "gpu-1"),
        ("b/pair", "n1", "gpu-2"),
    ]
