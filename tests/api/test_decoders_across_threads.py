"""msgspec 0.22 on Python 3.11 can crash the interpreter when two threads convert to one
Struct type for the first time at once (seen with two backends in one process, 7 of 10
runs of four threads decoding a Pod). `prepare_decoders`, which every KubeBackend calls
first, builds the type information on one thread: the same threads then never crash."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

SCRIPT = textwrap.dedent(
    """
    import sys, threading
    sys.path.insert(0, sys.argv[1])
    from shoal.api.manifests import GROUP_KINDS, KINDS, decode, prepare_decoders
    from shoal.api.errors import ManifestError

    prepare_decoders()
    raw = {"metadata": {"name": "p", "namespace": "d", "uid": "u"},
           "spec": {"containers": [{"name": "c"}]}}

    def work():
        for model in [*KINDS.values(), *GROUP_KINDS.values()]:
            try:
                decode(raw, model)
            except ManifestError:
                pass

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("ok")
    """
)


def test_prepared_decoders_survive_four_threads_decoding_at_once() -> None:
    for _ in range(5):
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(SRC)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == "ok"
