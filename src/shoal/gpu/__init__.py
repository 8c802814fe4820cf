"""GPU placement policy math, next to the GPU plugins that use it: the fragmentation
measure of a node against a target workload (`fragmentation.py`, Weng et al., ATC'23;
used by GpuFgd, GpuFragBlend, GpuFragGuard and the rescheduler's defragmentation) and
the prices of GPU shares from the bin-packing LP (`share_prices.py`, GpuFragGuard).
The device table these read is cache state (`shoal.cache.gpu_devices`)."""
