"""The garbage collector of a process that runs the core over a large, long-lived state.

A run (an openb experiment, a replayed trace) first builds what lives as long as the run
(the trace, the cluster's nodes: hundreds of thousands of objects), then schedules. Each
full collection of CPython's cyclic collector walks every tracked object, so those walks
took 0.35-0.7 s of a 3.6-4.9 s openb run (the default trace; measured with
`gc.callbacks`). `frozen_heap` collects once and then moves every object alive at that
point out of the collector's view (`gc.freeze`) for the run: the collections that still
happen walk only what the run created since. Reference counting still frees frozen
objects; only cyclic garbage among them waits for the unfreeze at the end.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["frozen_heap"]

_depth = 0  # nested runs (a run inside a sweep): the outermost one unfreezes


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Within: objects alive on entry are left out of cyclic garbage collection."""
    global _depth
    gc.collect()
    gc.freeze()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            gc.unfreeze()
