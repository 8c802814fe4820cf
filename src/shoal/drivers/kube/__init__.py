"""The Kubernetes backend: informers, binding, status and events, leader election.

`shoal run` (see `shoal.commands.run`) wires it up; docs/kubernetes.md describes
it. This package is the only one that imports the Kubernetes client library
(kubernetes_asyncio, in `client.py`); install it with `pip install 'shoal[kube]'`.
"""
