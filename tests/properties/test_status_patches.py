"""Status patches: whatever was written before, the merge patch Shoal sends leaves the
object's status equal to what it means to write (a resource that went away is removed,
not left behind), by RFC 7386 as the API server applies it."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.drivers.kube.status import with_removals
from shoal.testing.fake_apiserver import _merge

RESOURCES = st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "pods"])
AMOUNTS = st.dictionaries(RESOURCES, st.integers(0, 10**6).map(str), max_size=4)
FIELDS = st.sampled_from(["allocated", "guaranteed", "fairShare", "borrowed"])
STATUS = st.fixed_dictionaries(
    {},
    optional={
        "allocated": AMOUNTS,
        "guaranteed": AMOUNTS,
        "fairShare": AMOUNTS,
        "borrowed": AMOUNTS,
        "pendingPods": st.integers(0, 100),
    },
)


@settings(max_examples=200, deadline=None)
@given(before=STATUS, wanted=st.dictionaries(FIELDS, AMOUNTS), pods=st.integers(0, 100))
def test_a_written_status_is_exactly_the_wanted_one(
    before: dict[str, Any], wanted: dict[str, Any], pods: int
) -> None:
    body = {**wanted, "pendingPods": pods}
    after = _merge(before, with_removals(before, body), False)
    for name, value in body.items():
        assert after[name] == value
    # Fields the patch does not name are left as they were.
    for name in before.keys() - body.keys():
        assert after[name] == before[name]
