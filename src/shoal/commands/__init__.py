"""The cluster-facing subcommands of `shoal`: `run` and `extender` (`run.py`), `webhook`
(`webhook.py`), the operator commands `get` / `explain` (the `ctl/` package), `queue
open|close` and `suspend|resume` (`operate.py`), and `snapshot` (`snapshot.py`).

Each module registers itself on the main app (`shoal.cli`) and keeps argument parsing,
exit codes and wiring; the work is done by the Kubernetes driver (`shoal.drivers.kube`)
and the servers (`shoal.servers`). Only typer is imported at module level, so `shoal`
works without the `kube` extra.
"""
