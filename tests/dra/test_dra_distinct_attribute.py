"""distinctAttribute constraints (KEP-5075): the devices of the listed requests each
have the attribute, with a value of their own (e.g. two shares of different physical
GPUs). Judged by the exact search on each node the columns pass."""

from __future__ import annotations

from typing import Any

from shoal.api.dra import ResourceClaim
from shoal.api.manifests import decode
from shoal.cache.dra import DeviceCatalog
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import DRIVER, device_class, gpu_slice, with_claims

CARD = f"{DRIVER}/card"


def _claim(name: str, count: int) -> ResourceClaim:
    request = {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": count}}
    spec: dict[str, Any] = {
        "devices": {"requests": [request], "constraints": [{"distinctAttribute": CARD}]}
    }
    return decode({"metadata": {"name": name, "namespace": "default"}, "spec": spec}, ResourceClaim)


def _devices(h: SchedulerHarness, name: str) -> list[str]:
    claim = DeviceCatalog.of(h.scheduler.handle).claims[f"default/{name}"]
    allocation = claim.status.allocation
    return [] if allocation is None else sorted(r.device for r in allocation.devices.results)


def test_devices_of_distinct_cards_or_none() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="8", memory="32Gi"))
    # gpu-0, gpu-1 and gpu-2 sit on card 0, gpu-3 on card 1.
    h.add_dra(device_class(), gpu_slice("n1", count=4, attributes={"card": [0, 0, 0, 1]}))
    h.add_dra(_claim("pair", 2), _claim("again", 2))
    h.add_pods(with_claims(make_pod("pair").req(cpu="1"), gpu="pair"))
    assert h.run().placements == {"default/pair": "n1"}
    devices = _devices(h, "pair")
    assert "gpu-3" in devices and len(devices) == 2  # one of card 0, the one of card 1
    # Left: two devices, both of card 0: two of distinct cards are not there.
    h.add_pods(with_claims(make_pod("again").req(cpu="1"), gpu="again"))
    placements, messages = h.run()
    assert placements["default/again"] is None
    assert (
        f"cannot satisfy distinctAttribute {CARD} for claim again (each device with a value "
        "of its own)"
    ) in messages["default/again"]


def test_a_device_without_the_attribute_is_never_taken() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="8", memory="32Gi"))
    h.add_dra(device_class(), gpu_slice("n1", count=2), _claim("pair", 2))
    h.add_pods(with_claims(make_pod("pair").req(cpu="1"), gpu="pair"))
    placements, messages = h.run()
    assert placements["default/pair"] is None
    assert "distinctAttribute" in messages["default/pair"]
