"""`frozen_heap`: objects alive on entry are out of the collector's view within, and
back in after the outermost run (so their cyclic garbage can be collected)."""

from __future__ import annotations

import gc
import weakref

from shoal.drivers.heap import frozen_heap


def test_objects_alive_on_entry_are_frozen_within_and_released_after() -> None:
    assert gc.get_freeze_count() == 0
    kept = [[i] for i in range(1000)]
    with frozen_heap():
        assert gc.get_freeze_count() >= len(kept)
        with frozen_heap():  # a run inside a sweep
            pass
        assert gc.get_freeze_count() >= len(kept)  # the inner run did not unfreeze
    assert gc.get_freeze_count() == 0


def test_cyclic_garbage_of_frozen_objects_is_collected_after_the_run() -> None:
    class Node:
        other: object = None

    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    with frozen_heap():
        del a, b  # now cyclic garbage, but frozen: the collector does not see it
        gc.collect()
        assert gone() is not None
    gc.collect()
    assert gone() is None
