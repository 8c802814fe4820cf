"""The client QPS limit holds for binds: never faster than the configured rate.

How close to the limit the backend gets (>= 95 % of 50 binds/s at QPS 50, and higher
rates) is measured by bench/kube_binds.py, not asserted here: this project keeps timed
lower bounds out of the test suite, which runs on shared machines."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from kubehelpers import async_test, eventually, fast_options, node, pod
from kubehelpers import backend as running

from shoal.framework.effects import Bound
from shoal.testing.fake_apiserver import FakeApiServer


@async_test(timeout=60)
async def test_binds_never_exceed_the_client_qps(tmp_path: Path) -> None:
    async with FakeApiServer(bookmark_interval=5) as api:
        for i in range(10):
            api.create("v1", "nodes", node(f"n{i}", cpu="64", memory="256Gi"))
        for i in range(160):
            api.create("v1", "pods", pod(f"p{i:03d}", cpu="10m", memory="16Mi"))
        # Informers share the scheduler client's budget, as in client-go; look for the
        # (absent) CRDs at the production pace, not the tests' fast one.
        options = fast_options(qps=50.0, burst=10)
        options = replace(options, informer=replace(options.informer, absent_retry=60.0))
        async with running(api, tmp_path, options) as (kube, _):
            times: list[float] = []
            emit = kube.effects.emit

            def watch(effect: Any) -> None:
                if isinstance(effect, Bound):
                    times.append(time.monotonic())
                emit(effect)

            kube.effects.emit = watch  # type: ignore[method-assign]
            started = time.monotonic()
            await eventually(lambda: len(times) == 160, timeout=30, what="all bound")
    # Delays (a busy machine) only stretch the run, so its length is a safe bound: 160
    # binds with a burst of 10 take at least 150 / 50 s at 50 QPS.
    elapsed = times[-1] - started
    print(f"{(len(times) - 10) / elapsed:.1f} binds/s")
    assert elapsed >= (160 - 10) / 50 * 0.98, elapsed
