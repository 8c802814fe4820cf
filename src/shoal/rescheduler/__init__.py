"""The rescheduler: moving running pods so that waiting ones fit, and defragmenting GPU
nodes before work has to wait. One package for what the `Rescheduler` plugin
(`shoal.plugins.rescheduler`, a thin plugin over it) and the scheduler need:

* `planner.py`: `MigrationPlanner`, which running pods to move and where, so a waiting
  pod fits (moves evicted, re-created by their controllers);
* `holds.py`: `MigrationHolds`, the room a committed plan keeps for the pods it moved
  (stand-ins, nominated), the controllers' last moves and the budget's ledger;
* `defrag.py`: periodic defragmentation, a plan that makes room for the cluster's
  typical GPU shape and lowers fragmentation;
* `commit.py`: the scheduler's side: a re-created pod claims its hold, holds expire,
  a defragmentation plan is committed.

docs/rescheduler.md describes the behaviour.
"""
