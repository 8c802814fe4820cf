"""The parity tests run the Kubernetes backend with the kube tests' helpers."""

from __future__ import annotations

import sys
from pathlib import Path

KUBE_TESTS = str(Path(__file__).resolve().parents[1] / "kube")
if KUBE_TESTS not in sys.path:
    sys.path.insert(0, KUBE_TESTS)
