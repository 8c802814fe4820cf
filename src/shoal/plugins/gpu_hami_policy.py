"""GpuHamiPolicy (Score): HAMi's node and GPU scheduling policies, `binpack` or `spread`.

HAMi's scheduler (`pkg/scheduler/policy`, `NodeScore.ComputeScore` and
`DeviceListsScore.ComputeScore`) scores a node by how used its devices are, in
three parts of equal weight: pods on its devices against what they may hold (the
device plugin's split count), compute used against the devices' compute, memory used
against the devices' memory:

    node usage = sum(pods) / sum(split) + sum(compute used) / sum(compute)
                 + sum(memory used) / sum(memory)

`nodeSchedulerPolicy: binpack` (HAMi's default) prefers the most used node, `spread`
the least used; the score is that usage (its complement for spread) scaled to 0..100.
On the node the pod is placed on, each device a GPU share may take is scored the same
way with the pod's own ask added (pods + 1, compute + the share's compute, memory + its
memory), and `gpuSchedulerPolicy: binpack` gives the pod the most used fitting devices,
`spread` (HAMi's default) the least used. The plugin tells the device table this rule
in PreFilter (`GpuDevices.choose_with`), so it holds also when the only feasible node
is chosen without scoring: enable the plugin in `multiPoint` (or in both preFilter and
score). Devices of nodes without a registered split count leave out the pods part; a
node without known device memory leaves out the memory part. Whole GPUs take the
lowest-index free devices, as everywhere. HAMi's NUMA ordering of devices is not
modelled.

HAMi sends the best node alone back to kube-scheduler; in Shoal this is one score among
the profile's others, so give it the weight that lets it decide (e.g. the only GPU
scorer, weight 10). Node scores are computed for all candidate nodes and their devices
at once; the device rule for the chosen node only.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import NDArray

from shoal.api.gpu import GPU_MILLI, GpuRequest
from shoal.api.podinfo import PodInfo
from shoal.cache.gpu_devices import GpuDevices, request_of
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.status import Status
from shoal.framework.types import MAX_NODE_SCORE, Candidates, PreFilterResult
from shoal.plugins.args import Args

__all__ = ["NAME", "GpuHamiPolicy", "GpuHamiPolicyArgs"]

NAME = "GpuHamiPolicy"

Policy = Literal["binpack", "spread"]


class GpuHamiPolicyArgs(Args):
    """HAMi's `scheduler.defaultSchedulerPolicy` (its chart's defaults)."""

    node_scheduler_policy: Policy = "binpack"
    gpu_scheduler_policy: Policy = "spread"


def _part(used: NDArray[np.float64], total: NDArray[np.float64]) -> NDArray[np.float64]:
    """used / total where total > 0, else 0 (the part is left out)."""
    out: NDArray[np.float64] = np.divide(
        used, total, out=np.zeros_like(used, dtype=np.float64), where=total > 0
    )
    return out


class GpuHamiPolicy:
    name = NAME

    def __init__(self, handle: Handle, args: GpuHamiPolicyArgs) -> None:
        self.handle = handle
        self.devices = GpuDevices.of(handle)
        self.binpack_nodes = args.node_scheduler_policy == "binpack"
        self.binpack_devices = args.gpu_scheduler_policy == "binpack"

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        # The device rule goes in here, the one point every cycle runs: a node chosen
        # without scoring (the only feasible one) still gets the policy's devices.
        request = request_of(state, pod)
        if request.shared:
            self.devices.choose_with(pod.uid, lambda row: self._choose(row, request))
        return None, Status()

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        request = request_of(state, pod)
        if not request:
            return np.zeros(nodes.size, dtype=np.int64)
        usage = self._node_usage(nodes.rows)
        if not self.binpack_nodes:
            usage = 1.0 - usage
        scores: NDArray[np.int64] = np.clip(usage * MAX_NODE_SCORE, 0, MAX_NODE_SCORE).astype(
            np.int64
        )
        return scores

    def _node_usage(self, rows: NDArray[np.intp]) -> NDArray[np.float64]:
        """HAMi's node score over 3: the pods, compute and memory parts, 0..1."""
        devices = self.devices
        present = np.arange(devices.width)[None, :] < devices.count[rows][:, None]
        split = np.where(present, devices.split[rows], 0).astype(np.float64)
        pods = np.where(split > 0, devices.used[rows], 0).astype(np.float64)
        compute = np.where(present, float(GPU_MILLI), 0.0)
        compute_used = np.where(present, GPU_MILLI - devices.room[rows], 0).astype(np.float64)
        memory = np.where(present, devices.mem[rows][:, None], 0).astype(np.float64)
        memory_used = np.where(present, memory - devices.mem_free[rows], 0).astype(np.float64)
        usage: NDArray[np.float64] = (
            _part(pods.sum(axis=1), split.sum(axis=1))
            + _part(compute_used.sum(axis=1), compute.sum(axis=1))
            + _part(memory_used.sum(axis=1), memory.sum(axis=1))
        ) / 3.0
        return usage

    def _choose(self, row: int, request: GpuRequest) -> tuple[int, ...]:
        """The devices a share takes on `row` by HAMi's GPU policy: each fitting device
        scored with the pod's ask added, the most used first for binpack, the least used
        for spread (ties: lowest index); () when too few fit (the default choice)."""
        devices = self.devices
        n = int(devices.count[row])
        milli, mem = devices.takes(row, request)
        free, mem_free = devices.free[row, :n], devices.mem_free[row, :n]
        fits = (free >= milli) & (mem_free >= mem)
        if int(fits.sum()) < request.count:
            return ()
        split = devices.split[row, :n].astype(np.float64)
        memory = float(devices.mem[row])
        score = (
            _part(devices.used[row, :n].astype(np.float64) + 1.0, split)
            + (GPU_MILLI - devices.room[row, :n] + milli) / GPU_MILLI
            + ((memory - mem_free + mem) / memory if memory > 0 else np.zeros(n, dtype=np.float64))
        )
        key = np.where(fits, -score if self.binpack_devices else score, np.inf)
        chosen = np.sort(np.argsort(key, kind="stable")[: request.count])
        return tuple(int(d) for d in chosen)

    @classmethod
    def new(cls, args: GpuHamiPolicyArgs | None, handle: Handle) -> GpuHamiPolicy:
        return cls(handle, args or GpuHamiPolicyArgs())
