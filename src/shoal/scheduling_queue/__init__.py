"""Scheduling queue: which pod is tried next, and when a failed pod is tried again."""

from shoal.scheduling_queue.queue import QueueConfig, QueuedPod, SchedulingQueue

__all__ = ["QueueConfig", "QueuedPod", "SchedulingQueue"]
