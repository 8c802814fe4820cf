"""Preemption for devices: a victim search sees the devices of claims only the victims
used as free (kube's DRA preemption, KEP-5690), and the devices freed for a nominated
preemptor are not taken by pods of lower priority before it is retried."""

from __future__ import annotations

import msgspec

from shoal.cache.dra import DeviceCatalog, DeviceId
from shoal.drivers.memory import MemoryEffects
from shoal.framework.effects import Effect, Evict
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import device_class, gpu_slice, resource_claim, with_claims


def _catalog(h: SchedulerHarness) -> DeviceCatalog:
    return DeviceCatalog.of(h.scheduler.handle)


def _written(h: SchedulerHarness, claim: str) -> list[DeviceId]:
    """The devices of the claim's status.allocation (as the API has it)."""
    allocation = _catalog(h).claims[f"default/{claim}"].status.allocation
    assert allocation is not None, f"{claim} is not allocated"
    return [(r.driver, r.pool, r.device) for r in allocation.devices.results]


def play_claim_controller(h: SchedulerHarness) -> list[str]:
    """The resource-claim controller's part: pods that are gone leave each claim's
    status.reservedFor, and a claim reserved for nobody is deallocated. Returns the
    claims it deallocated."""
    catalog = _catalog(h)
    deallocated = []
    for key, claim in list(catalog.claims.items()):
        status = claim.status
        kept = [r for r in status.reserved_for if h.scheduler.known_pod(r.uid) is not None]
        if len(kept) == len(status.reserved_for):
            continue
        allocation = status.allocation if kept else None
        if allocation is None and status.allocation is not None:
            deallocated.append(key)
        new = msgspec.structs.replace(status, reserved_for=kept, allocation=allocation)
        h.add_dra(msgspec.structs.replace(claim, status=new))
    return deallocated


def _cluster(h: SchedulerHarness, gpus: int = 2) -> None:
    h.add_nodes(make_node("n1").capacity(cpu="64", memory="256Gi"))
    h.add_dra(device_class(), gpu_slice("n1", count=gpus))


def test_a_high_priority_pod_preempts_one_device_holder_and_gets_its_device() -> None:
    h = SchedulerHarness()
    _cluster(h)
    h.add_dra(resource_claim("low-a"), resource_claim("low-b"), resource_claim("high"))
    h.add_pods(
        with_claims(make_pod("low-a").priority(0), gpu="low-a"),
        with_claims(make_pod("low-b").priority(0), gpu="low-b"),
    )
    assert h.run().placements == {"default/low-a": "n1", "default/low-b": "n1"}
    held = {name: _written(h, name) for name in ("low-a", "low-b")}
    assert sorted(d for devs in held.values() for d in devs) == [
        ("gpu.example.com", "n1", "gpu-0"),
        ("gpu.example.com", "n1", "gpu-1"),
    ]

    h.add_pods(with_claims(make_pod("high").priority(1000), gpu="high"))
    placements = h.advance(30).placements
    assert list(h.evicted) in (["default/low-a"], ["default/low-b"])
    assert "preempted by default/high" in next(iter(h.evicted.values()))
    victim = next(iter(h.evicted)).partition("/")[2]
    survivor = "low-b" if victim == "low-a" else "low-a"
    assert placements == {f"default/{survivor}": "n1", "default/high": "n1"}
    # The victim's device went to the preemptor's claim; the survivor keeps its own.
    assert _written(h, "high") == held[victim]
    assert _written(h, survivor) == held[survivor]
    catalog = _catalog(h)
    assert catalog.allocated(f"default/{victim}") is None  # released: its user is gone
    assert catalog.allocated("default/high") == tuple(held[victim])

    # The resource-claim controller deallocates the victim's claim; nothing changes
    # for the others, and the catalog forgets the departed victim.
    assert play_claim_controller(h) == [f"default/{victim}"]
    assert catalog.claims[f"default/{victim}"].status.allocation is None
    assert catalog.allocated("default/high") == tuple(held[victim])
    assert catalog.allocated(f"default/{survivor}") == tuple(held[survivor])
    assert catalog.departed == 0
    assert int(catalog.free().sum()) == 0


def test_a_claim_shared_with_a_pod_that_stays_frees_nothing() -> None:
    """Both GPUs are used by claims with a user the preemptor may not evict (priority
    2000): evicting the low-priority users of a shared claim frees no device, so
    nobody is evicted."""
    h = SchedulerHarness()
    _cluster(h)
    h.add_dra(resource_claim("shared"), resource_claim("other"), resource_claim("high"))
    h.add_pods(
        with_claims(make_pod("keeper").priority(2000), gpu="shared"),
        with_claims(make_pod("low").priority(0), gpu="shared"),
        with_claims(make_pod("other").priority(2000), gpu="other"),
    )
    assert set(h.run().placements.values()) == {"n1"}
    h.add_pods(with_claims(make_pod("high").priority(1000), gpu="high"))
    placements, messages = h.advance(30)
    assert h.evicted == {}
    assert placements["default/high"] is None
    assert "only 0 of 1 requested devices free for high/gpu" in messages["default/high"]


def test_devices_freed_for_a_preemptor_are_not_taken_by_a_lower_priority_pod() -> None:
    """A pod of the victims' priority arriving with the preemptor waits: the device
    its victim freed is kept for the nominated preemptor (no second eviction)."""
    h = SchedulerHarness()
    _cluster(h)
    h.add_dra(*(resource_claim(n) for n in ("low-a", "low-b", "high", "late")))
    h.add_pods(
        with_claims(make_pod("low-a").priority(0), gpu="low-a"),
        with_claims(make_pod("low-b").priority(0), gpu="low-b"),
    )
    h.run()
    h.add_pods(
        with_claims(make_pod("high").priority(1000), gpu="high"),
        with_claims(make_pod("late").priority(0), gpu="late"),
    )
    placements, messages = h.advance(60)
    assert len(h.evicted) == 1
    assert placements["default/high"] == "n1"
    assert placements["default/late"] is None
    assert "only 0 of 1 requested devices free for late/gpu" in messages["default/late"]


def test_a_claim_whose_devices_went_to_a_preemptor_waits_for_its_deallocation() -> None:
    """The victim's claim keeps its written allocation until the resource-claim
    controller clears it, and the API server lets no one replace it; its device went
    to the preemptor meanwhile. A new pod using that claim waits (it would otherwise
    get the same GPU back, given twice) until the controller deallocates the claim,
    then gets a device of its own."""
    h = SchedulerHarness()
    _cluster(h)
    h.add_dra(*(resource_claim(n) for n in ("low", "keeper", "high")))
    h.add_pods(
        with_claims(make_pod("low").priority(0), gpu="low"),
        with_claims(make_pod("keeper").priority(2000), gpu="keeper"),
    )
    h.run()
    held = _written(h, "low")
    h.add_pods(with_claims(make_pod("high").priority(1000), gpu="high"))
    assert h.advance(30).placements["default/high"] == "n1"
    assert list(h.evicted) == ["default/low"]
    assert _written(h, "high") == held
    assert _written(h, "low") == held  # not deallocated yet

    h.add_pods(with_claims(make_pod("again").priority(0), gpu="low"))
    placements, messages = h.advance(30)
    assert placements["default/again"] is None
    assert (
        "resourceclaim low is still allocated to devices given to other claims since its "
        "last user left: waiting for the resource claim controller to deallocate it"
    ) in messages["default/again"]
    h.delete_pod("default/keeper")  # a GPU is free now, but the claim's is not
    assert h.advance(30).placements["default/again"] is None

    assert sorted(play_claim_controller(h)) == ["default/keeper", "default/low"]
    assert h.advance(30).placements["default/again"] == "n1"
    assert _written(h, "low") != held
    assert _catalog(h).allocated("default/high") == tuple(held)


def test_a_claim_whose_devices_are_still_free_is_taken_back_as_written() -> None:
    """The claim's user is gone and nobody took its GPU: a new pod using the claim
    gets the allocation it still has, without waiting for the controller."""
    h = SchedulerHarness()
    _cluster(h, gpus=1)
    h.add_dra(resource_claim("c"))
    h.add_pods(with_claims(make_pod("first"), gpu="c"))
    h.run()
    held = _written(h, "c")
    h.delete_pod("default/first")
    h.advance(10)
    assert _catalog(h).allocated("default/c") is None
    h.add_pods(with_claims(make_pod("second"), gpu="c"))
    assert h.advance(10).placements["default/second"] == "n1"
    assert _written(h, "c") == held
    assert _catalog(h).allocated("default/c") == tuple(held)


class _SlowEvictions:
    """Keeps the deletion of the named victims back (their kubelet is slow to stop
    them): they stay evicting until the test deletes them."""

    def __init__(self, effects: MemoryEffects, *names: str) -> None:
        self.effects = effects
        self.names = {f"default/{n}" for n in names}
        self.held: list[str] = []

    def __call__(self, effect: Effect) -> None:
        if isinstance(effect, Evict) and effect.pod.key in self.names:
            echoes = self.effects._echoes
            echo = echoes.pop()  # the deletion emit just queued
            assert getattr(echo, "pod", None) is effect.pod
            self.held.append(effect.pod.key)


def test_a_preemptor_keeps_what_its_victims_free_while_the_others_terminate() -> None:
    """The preemptor needs both GPUs; one victim is gone, the other still terminating.
    The freed GPU is kept for the preemptor, not given to a pod of the victims'
    priority, and once the second victim is gone the preemptor gets both."""
    h = SchedulerHarness()
    _cluster(h)
    h.add_dra(resource_claim("low-a"), resource_claim("low-b"), resource_claim("late"))
    h.add_dra(resource_claim("high", count=2))
    h.add_pods(
        with_claims(make_pod("low-a").priority(0), gpu="low-a"),
        with_claims(make_pod("low-b").priority(0), gpu="low-b"),
    )
    h.run()
    slow = _SlowEvictions(h.effects, "low-b")
    h.effects.listeners.append(slow)
    h.add_pods(with_claims(make_pod("high").priority(1000), gpu="high"))
    h.advance(5)
    assert sorted(h.evicted) == ["default/low-a", "default/low-b"]
    assert slow.held == ["default/low-b"]
    catalog = _catalog(h)
    assert int(catalog.free().sum()) == 1  # low-a's GPU; low-b's is still in use

    h.add_pods(with_claims(make_pod("late").priority(0), gpu="late"))
    placements, messages = h.advance(10)
    assert placements["default/late"] is None
    assert placements["default/high"] is None
    # It waits for its last victim (not retried meanwhile: its message is its preemption).
    assert messages["default/high"].endswith("preemption: evicting 2 pod(s) on n1.")

    h.delete_pod("low-b")  # its kubelet is done
    placements = h.advance(30).placements
    assert placements["default/high"] == "n1"
    assert placements["default/late"] is None
    assert sorted(h.evicted) == ["default/low-a", "default/low-b"]
    assert sorted(_written(h, "high")) == [
        ("gpu.example.com", "n1", "gpu-0"),
        ("gpu.example.com", "n1", "gpu-1"),
    ]


def test_a_higher_priority_pod_is_not_held_back_by_a_lower_nominee() -> None:
    """Kept devices are kept from pods of lower or equal priority only."""
    h = SchedulerHarness()
    _cluster(h, gpus=1)
    h.add_dra(*(resource_claim(n) for n in ("low", "mid", "top")))
    h.add_pods(with_claims(make_pod("low").priority(0), gpu="low"))
    h.run()
    slow = _SlowEvictions(h.effects, "low")
    h.effects.listeners.append(slow)
    h.add_pods(with_claims(make_pod("mid").priority(100), gpu="mid"))
    h.advance(5)
    assert list(h.evicted) == ["default/low"]
    h.add_pods(with_claims(make_pod("top").priority(1000), gpu="top"))
    h.delete_pod("low")
    placements = h.advance(30).placements
    assert placements["default/top"] == "n1"
    assert placements["default/mid"] is None
    assert list(h.evicted) == ["default/low"]  # top took the GPU, it evicted nobody
