"""HTTP servers Shoal runs beside or instead of the scheduler: the admission webhooks
(`webhook.py`, answering with `admission.py`) and the scheduler-extender server for a
stock kube-scheduler (`extender.py`). They sit on top of the Kubernetes driver
(`shoal.drivers.kube`), which they use for the client and the scheduler's cache."""
