"""The malformed-input corpus in all its halves (issue "Hardening"): `shoal simulate`
(generate.py), `shoal validate-config` (configs.py), `shoal experiment openb`
(openb_cases.py) and the Kubernetes backend (kube_cases.py). Each half has its own
tests; this one keeps their sizes from shrinking unnoticed."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import configs
import generate
import kube_cases
import openb_cases

MINIMUM = {"simulate": 265, "validate-config": 25, "experiment openb": 200, "kubernetes": 150}


def test_every_half_of_the_corpus_is_there_and_large_enough() -> None:
    sizes = {
        "simulate": len(generate.cases()),
        "validate-config": len(list(configs.config_cases())),
        "experiment openb": len(openb_cases.cases()),
        "kubernetes": len(kube_cases.cases()),
    }
    small = {half: n for half, n in sizes.items() if n < MINIMUM[half]}
    assert not small, f"halves below their minimum {MINIMUM}: {small}"
    assert sum(sizes.values()) >= sum(MINIMUM.values()), sizes
