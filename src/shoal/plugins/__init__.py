"""In-tree plugins, one module each. Plugins never import each other.

`IN_TREE` is the explicit registry literal; `DEFAULT_MULTI_POINT` is kube-scheduler's
default profile (same order and weights), plus Shoal's own (tenant queues, gangs, GPU
shares, node pools).
"""

from __future__ import annotations

from shoal.framework.registry import PluginSpec, Registry
from shoal.plugins import (  # GPU sharing and placement policies
    balanced_allocation,
    coscheduling,
    default_binder,
    default_preemption,
    dynamic_resources,
    gpu_best_fit,
    gpu_clustering,
    gpu_dot_product,
    gpu_fgd,
    gpu_frag_blend,
    gpu_frag_guard,
    gpu_hami_policy,
    gpu_packing,
    gpu_random,
    gpu_share,
    image_locality,
    inter_pod_affinity,
    large_job_reservation,
    node_affinity,
    node_declared_features,
    node_name,
    node_pools,
    node_ports,
    node_resources_fit,
    node_unschedulable,
    node_volume_limits,
    pod_topology_spread,
    priority_sort,
    qos_sort,
    queue_capacity,
    rescheduler,
    scheduling_gates,
    taint_toleration,
    volume_binding,
    volume_restrictions,
    volume_zone,
)
from shoal.plugins.args import (
    CoschedulingArgs,
    DefaultPreemptionArgs,
    InterPodAffinityArgs,
    NodeAffinityArgs,
    NodeResourcesBalancedAllocationArgs,
    NodeResourcesFitArgs,
    PodTopologySpreadArgs,
    ReschedulerArgs,
)

__all__ = ["DEFAULT_MULTI_POINT", "IN_TREE", "KUBE_PLUGINS_NOT_IN_SHOAL", "in_tree_registry"]

IN_TREE: dict[str, PluginSpec] = {
    scheduling_gates.NAME: PluginSpec(scheduling_gates.SchedulingGates.new),
    priority_sort.NAME: PluginSpec(priority_sort.PrioritySort.new),
    node_unschedulable.NAME: PluginSpec(node_unschedulable.NodeUnschedulable.new),
    node_name.NAME: PluginSpec(node_name.NodeName.new),
    taint_toleration.NAME: PluginSpec(taint_toleration.TaintToleration.new),
    node_affinity.NAME: PluginSpec(node_affinity.NodeAffinity.new, NodeAffinityArgs),
    node_ports.NAME: PluginSpec(node_ports.NodePorts.new),
    node_resources_fit.NAME: PluginSpec(
        node_resources_fit.NodeResourcesFit.new, NodeResourcesFitArgs
    ),
    pod_topology_spread.NAME: PluginSpec(
        pod_topology_spread.PodTopologySpread.new, PodTopologySpreadArgs
    ),
    inter_pod_affinity.NAME: PluginSpec(
        inter_pod_affinity.InterPodAffinity.new, InterPodAffinityArgs
    ),
    balanced_allocation.NAME: PluginSpec(
        balanced_allocation.BalancedAllocation.new, NodeResourcesBalancedAllocationArgs
    ),
    default_preemption.NAME: PluginSpec(
        default_preemption.DefaultPreemption.new, DefaultPreemptionArgs
    ),
    queue_capacity.NAME: PluginSpec(
        queue_capacity.QueueCapacity.new, queue_capacity.QueueCapacityArgs
    ),
    node_pools.NAME: PluginSpec(node_pools.NodePools.new),
    coscheduling.NAME: PluginSpec(coscheduling.Coscheduling.new, CoschedulingArgs),
    qos_sort.NAME: PluginSpec(qos_sort.QoSSort.new),
    default_binder.NAME: PluginSpec(default_binder.DefaultBinder.new),
    gpu_share.NAME: PluginSpec(gpu_share.GpuShare.new),
    gpu_random.NAME: PluginSpec(gpu_random.GpuRandom.new),
    gpu_dot_product.NAME: PluginSpec(gpu_dot_product.GpuDotProduct.new),
    gpu_clustering.NAME: PluginSpec(gpu_clustering.GpuClustering.new),
    gpu_packing.NAME: PluginSpec(gpu_packing.GpuPacking.new),
    gpu_hami_policy.NAME: PluginSpec(
        gpu_hami_policy.GpuHamiPolicy.new, gpu_hami_policy.GpuHamiPolicyArgs
    ),
    gpu_best_fit.NAME: PluginSpec(gpu_best_fit.GpuBestFit.new),
    gpu_fgd.NAME: PluginSpec(gpu_fgd.GpuFragmentation.new, gpu_fgd.GpuFragmentationArgs),
    gpu_frag_blend.NAME: PluginSpec(
        gpu_frag_blend.GpuFragBlend.new, gpu_frag_blend.GpuFragBlendArgs
    ),
    large_job_reservation.NAME: PluginSpec(
        large_job_reservation.LargeJobReservation.new,
        large_job_reservation.LargeJobReservationArgs,
    ),
    rescheduler.NAME: PluginSpec(rescheduler.Rescheduler.new, ReschedulerArgs),
    node_volume_limits.NAME: PluginSpec(node_volume_limits.NodeVolumeLimits.new),
    volume_binding.NAME: PluginSpec(
        volume_binding.VolumeBinding.new, volume_binding.VolumeBindingArgs
    ),
    volume_restrictions.NAME: PluginSpec(volume_restrictions.VolumeRestrictions.new),
    volume_zone.NAME: PluginSpec(volume_zone.VolumeZone.new),
    dynamic_resources.NAME: PluginSpec(
        dynamic_resources.DynamicResources.new, dynamic_resources.DynamicResourcesArgs
    ),
    gpu_frag_guard.NAME: PluginSpec(
        gpu_frag_guard.GpuFragGuard.new, gpu_frag_guard.GpuFragGuardArgs
    ),
    image_locality.NAME: PluginSpec(image_locality.ImageLocality.new),
    node_declared_features.NAME: PluginSpec(node_declared_features.NodeDeclaredFeatures.new),
}

# (name, weight) in kube-scheduler's default multiPoint order; weight None = unset.
DEFAULT_MULTI_POINT: list[tuple[str, int | None]] = [
    (scheduling_gates.NAME, None),
    (priority_sort.NAME, None),
    (node_unschedulable.NAME, None),
    (node_name.NAME, None),
    (taint_toleration.NAME, 3),
    (node_affinity.NAME, 2),
    (node_ports.NAME, None),
    (node_resources_fit.NAME, 1),
    (volume_restrictions.NAME, None),
    (node_volume_limits.NAME, None),
    (volume_binding.NAME, None),
    (volume_zone.NAME, None),
    (pod_topology_spread.NAME, 2),
    (inter_pod_affinity.NAME, 2),
    # kube-scheduler puts it before DefaultPreemption (DRA is GA since 1.34).
    (dynamic_resources.NAME, None),
    (default_preemption.NAME, None),
    (balanced_allocation.NAME, 1),
    (image_locality.NAME, 1),
    # kube-scheduler's last (after DefaultBinder, which Shoal runs last of all).
    (node_declared_features.NAME, None),
    # Shoal's additions after kube-scheduler's defaults:
    (node_pools.NAME, None),
    # GPU shares (alibabacloud.com/gpu-milli) on devices with room, in every profile.
    (gpu_share.NAME, None),
    (queue_capacity.NAME, None),
    (coscheduling.NAME, None),
    (default_binder.NAME, None),
]

# kube-scheduler plugins a user may carry over from a kube config. Configuration
# validation accepts them with a warning naming what is not modelled (disabling one is
# harmless; enabling or configuring one does not take effect), except the in-tree volume
# limits kube's v1 API removed, which kube-scheduler itself refuses unless disabled.
KUBE_PLUGINS_NOT_IN_SHOAL: dict[str, str] = {
    "EBSLimits": "NodeVolumeLimits replaced it",
    "GCEPDLimits": "NodeVolumeLimits replaced it",
    "AzureDiskLimits": "NodeVolumeLimits replaced it",
    "CinderLimits": "NodeVolumeLimits replaced it",
}


def in_tree_registry() -> Registry:
    registry = Registry()
    for name, spec in IN_TREE.items():
        registry.register(name, spec)
    registry.unavailable = dict(KUBE_PLUGINS_NOT_IN_SHOAL)
    return registry
