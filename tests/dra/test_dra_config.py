"""Device configuration: the allocation carries the driver parameters of the classes
and of the claim (`status.allocation.devices.config`), as kube's allocator writes them
(tests/apiserver/test_dra_config.py holds Shoal and kube-scheduler to the same list):

* each class's `config`, once per class, naming the requests (or chosen
  `firstAvailable` sub-requests, `request/sub`) that took devices with it
  (`source: FromClass`);
* then the claim's `config` (`FromClaim`): an entry naming no request as it is, one
  naming requests once for each of the claim's requests or chosen sub-requests it names
  (kube repeats it), none for a sub-request not chosen.
"""

from __future__ import annotations

from typing import Any

from shoal.api.dra import DeviceClass, allocation_config
from shoal.api.manifests import decode
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import DRIVER, claim_spec, gpu_slice, resource_claim, with_claims


def _opaque(mode: str) -> dict[str, Any]:
    return {"opaque": {"driver": DRIVER, "parameters": {"mode": mode}}}


def _class(name: str, expression: str, mode: str) -> DeviceClass:
    return decode(
        {
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}], "config": [_opaque(mode)]},
        },
        DeviceClass,
    )


REQUESTS = [
    {"name": "r1", "exactly": {"deviceClassName": "a"}},
    {"name": "r2", "exactly": {"deviceClassName": "a"}},
    {
        "name": "r3",
        "firstAvailable": [
            {"name": "s1", "deviceClassName": "b", "count": 5},
            {"name": "s2", "deviceClassName": "b"},
        ],
    },
]
CONFIG = [
    _opaque("every-request"),
    {"requests": ["r1"], **_opaque("r1")},
    {"requests": ["r3/s2"], **_opaque("chosen")},
    {"requests": ["r3/s1"], **_opaque("not-chosen")},
    {"requests": ["r1", "r2"], **_opaque("r1-r2")},
]
EXPECTED = [
    {"source": "FromClass", "requests": ["r1", "r2"], **_opaque("class-a")},
    {"source": "FromClass", "requests": ["r3/s2"], **_opaque("class-b")},
    {"source": "FromClaim", **_opaque("every-request")},
    {"source": "FromClaim", "requests": ["r1"], **_opaque("r1")},
    {"source": "FromClaim", "requests": ["r3/s2"], **_opaque("chosen")},
    {"source": "FromClaim", "requests": ["r1", "r2"], **_opaque("r1-r2")},
    {"source": "FromClaim", "requests": ["r1", "r2"], **_opaque("r1-r2")},
]


def _classes() -> dict[str, DeviceClass]:
    every = f'device.driver == "{DRIVER}"'
    return {
        "a": _class("a", every, "class-a"),
        "b": _class("b", f'{every} && device.attributes["{DRIVER}"].index >= 2', "class-b"),
    }


def test_the_config_list_is_kubes() -> None:
    claim = resource_claim("cfg", requests=REQUESTS, config=CONFIG)
    results = (
        ("r1", DRIVER, "n1", "gpu-0"),
        ("r2", DRIVER, "n1", "gpu-1"),
        ("r3/s2", DRIVER, "n1", "gpu-2"),
    )
    assert list(allocation_config(claim.spec, _classes(), results)) == EXPECTED


def test_no_config_anywhere_writes_none() -> None:
    claim = resource_claim("plain")
    classes = {DRIVER: decode({"metadata": {"name": DRIVER}}, DeviceClass)}
    assert allocation_config(claim.spec, classes, (("gpu", DRIVER, "n1", "gpu-0"),)) == ()


def test_a_placed_claim_carries_the_config_in_its_allocation() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="16", memory="64Gi"))
    h.add_dra(*_classes().values(), gpu_slice("n1", count=4))
    h.add_dra(resource_claim("cfg", requests=REQUESTS, config=CONFIG))
    h.add_pods(with_claims(make_pod("p"), dev="cfg"))
    placements, _ = h.run()
    assert placements == {"default/p": "n1"}
    catalog: Any = h.scheduler.handle.services["dra"]
    allocation = catalog.claims["default/cfg"].status.allocation
    assert sorted(r.request for r in allocation.devices.results) == ["r1", "r2", "r3/s2"]
    assert allocation.devices.config == EXPECTED
    assert claim_spec(config=CONFIG)["devices"]["config"] == CONFIG
