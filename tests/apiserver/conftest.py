"""One real kube-apiserver + etcd for the `apiserver` suite (../shared/k8s beside the checkout).

The control plane is started once per test run (`up.sh` with OWNER_PID, so it is stopped
even if this process dies without teardown) and Shoal's CRDs are installed in it. Tests
share it: each one works in its own namespace, on its own nodes, with its own scheduler
name, and deletes its nodes at the end.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KIT = Path(os.environ.get("SHOAL_K8S_KIT") or ROOT.parent / "shared" / "k8s")
KUBE_TESTS = str(ROOT / "tests" / "kube")
if KUBE_TESTS not in sys.path:  # kubehelpers (async_test, fast_options) is shared
    sys.path.insert(0, KUBE_TESTS)

# up.sh takes these as fixed ports when they are set (e.g. from a sourced env file).
_PORT_VARIABLES = ("API_PORT", "ETCD_CLIENT_PORT", "ETCD_PEER_PORT", "SCHED_PORT")


def _missing() -> str:
    if not (KIT / "up.sh").exists():
        return f"no Kubernetes test kit at {KIT} (set SHOAL_K8S_KIT to use another)"
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return "the Kubernetes test kit runs on Linux x86-64 only"
    needed = [tool for tool in ("openssl", "curl", "setsid", "flock") if not shutil.which(tool)]
    if needed:
        return f"the Kubernetes test kit needs {', '.join(needed)} (apt-get install openssl curl)"
    return ""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    reason = _missing()
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.apiserver)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


def _kubectl(env: dict[str, str], *args: str, timeout: float = 60, check: bool = True) -> str:
    done = subprocess.run(
        [str(Path(env["K8S_BIN_DIR"]) / "kubectl"), *args],
        env={**os.environ, "KUBECONFIG": env["KUBECONFIG"]},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The env of a running control plane (KUBECONFIG, API_SERVER, K8S_BIN_DIR, ...) with
    Shoal's CRDs established."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("k8s")
    env = {k: v for k, v in os.environ.items() if k not in _PORT_VARIABLES}
    env["OWNER_PID"] = str(os.getpid())
    # Kubernetes' own Workload/PodGroup API (KEP-4671 gang scheduling, KEP-5832) is alpha
    # in v1.36: served only with the GenericWorkload gate and scheduling.k8s.io/v1alpha2;
    # without TopologyAwareWorkloadScheduling the apiserver silently drops a PodGroup's
    # spec.schedulingConstraints. DeviceTaintRules (resource.k8s.io/v1beta2) are served
    # only with DRADeviceTaintRules.
    env["APISERVER_EXTRA_ARGS"] = " ".join(
        filter(
            None,
            (
                env.get("APISERVER_EXTRA_ARGS", ""),
                "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true,"
                "DRADeviceTaintRules=true",
                "--runtime-config=scheduling.k8s.io/v1alpha2=true,resource.k8s.io/v1beta2=true",
            ),
        )
    )
    started = subprocess.run(
        [str(KIT / "up.sh"), str(state)], env=env, capture_output=True, text=True, timeout=300
    )
    if started.returncode != 0:
        raise RuntimeError(f"up.sh failed:\n{started.stdout}{started.stderr}")
    try:
        values = dict(
            line.split("=", 1)
            for line in (state / "env").read_text().splitlines()
            if "=" in line and not line.startswith("#")
        )
        _kubectl(values, "apply", "-f", str(ROOT / "deploy" / "crds"))
        _kubectl(
            values,
            "wait",
            "--for=condition=Established",
            "customresourcedefinitions",
            "--all",
            "--timeout=60s",
            timeout=90,
        )
        yield values
    finally:
        subprocess.run([str(KIT / "down.sh"), str(state)], capture_output=True, timeout=120)


@pytest.fixture(scope="session")
def kubectl(control_plane: dict[str, str]) -> Callable[..., str]:
    """The kit's kubectl against the control plane: stdout; fails the test on a non-zero
    exit unless check=False."""

    def run(*args: str, timeout: float = 60, check: bool = True) -> str:
        return _kubectl(control_plane, *args, timeout=timeout, check=check)

    return run


VOLCANO_PODGROUP_CRD = "podgroups.scheduling.volcano.sh"
# Volcano's PodGroup as a lax schema: anything goes (Volcano's own CRD has a full one), so
# what the API server lets through reaches the scheduler.
LAX_VOLCANO_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": VOLCANO_PODGROUP_CRD},
    "spec": {
        "group": "scheduling.volcano.sh",
        "names": {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1beta1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def lax_volcano_crd(
    kubectl: Callable[..., str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Volcano's PodGroup CRD with a lax schema, for the module that asks (another module
    may have just deleted its copy: wait until it is gone before installing this one)."""
    crd = VOLCANO_PODGROUP_CRD
    existed = bool(kubectl("get", "crd", crd, "--ignore-not-found"))
    if not existed:
        kubectl("wait", "--for=delete", f"crd/{crd}", "--timeout=60s", timeout=90, check=False)
    path = tmp_path_factory.mktemp("volcano") / "crd.yaml"
    path.write_text(yaml.safe_dump(LAX_VOLCANO_CRD))
    kubectl("apply", "-f", str(path))
    kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s", timeout=90)
    try:
        yield
    finally:
        if not existed:
            kubectl("delete", "crd", crd, "--wait=true", "--timeout=60s", timeout=90, check=False)
