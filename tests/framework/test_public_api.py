"""The plugin-author API is `shoal.framework.__all__`, and nothing else leaks out.

Like httpx's export-list test: every public attribute of the package is either exported
or one of its submodules, every exported name is importable, and each one is public in
the submodule that defines it (so a private helper cannot be re-exported by accident).
"""

from __future__ import annotations

import importlib
import pkgutil
import types

import shoal.framework as framework

SUBMODULES = sorted(
    info.name for info in pkgutil.iter_modules(framework.__path__) if not info.name.startswith("_")
)

# What a plugin author needs, by area; the test fails if any of it stops being exported.
REQUIRED = {
    # one protocol per extension point
    "PreEnqueuePlugin",
    "QueueSortPlugin",
    "PreFilterPlugin",
    "FilterPlugin",
    "PostFilterPlugin",
    "PreScorePlugin",
    "ScorePlugin",
    "ScoreNormalizer",
    "ReservePlugin",
    "PermitPlugin",
    "PreBindPlugin",
    "BindPlugin",
    "PostBindPlugin",
    "EnqueueExtensions",
    # values crossing the contract
    "Status",
    "Code",
    "CycleState",
    "Candidates",
    "FilterResult",
    "Failure",
    "PreFilterResult",
    "PostFilterResult",
    "ClusterEvent",
    "EventResource",
    "ActionType",
    "MAX_NODE_SCORE",
    "MAX_PERMIT_TIMEOUT",
    # wiring
    "Handle",
    "PluginSpec",
    "Registry",
    # per-node adapters
    "NodeView",
    "per_node_filter",
    "per_node_score",
    "per_node_plugin",
}

# The scheduler's machinery lives in the package but is not plugin-author API.
INTERNAL = {"Framework", "ProfilePlugins", "FilterOutcome"}


def test_every_exported_name_is_importable() -> None:
    namespace: dict[str, object] = {}
    exec("from shoal.framework import *", namespace)
    for name in framework.__all__:
        assert name in namespace, name
        assert namespace[name] is getattr(framework, name)


def test_export_list_is_unique_and_sorted() -> None:
    exported = framework.__all__
    assert len(exported) == len(set(exported))

    def isort_key(name: str) -> tuple[int, str]:  # CONSTANTS, then Classes, then functions
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert exported == sorted(exported, key=isort_key)


def test_required_names_are_exported() -> None:
    missing = REQUIRED - set(framework.__all__)
    assert not missing, missing


def test_nothing_private_leaks() -> None:
    public_attrs = {
        name
        for name, value in vars(framework).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public_attrs == set(framework.__all__)
    assert not any(name.startswith("_") for name in framework.__all__)
    assert not INTERNAL & set(framework.__all__)


def test_each_export_is_public_where_it_is_defined() -> None:
    modules = [importlib.import_module(f"shoal.framework.{name}") for name in SUBMODULES]
    for name in framework.__all__:
        obj = getattr(framework, name)
        homes = [m.__name__ for m in modules if name in getattr(m, "__all__", ())]
        assert homes, f"{name} is not in the __all__ of any shoal.framework submodule"
        for home in homes:
            assert getattr(importlib.import_module(home), name) is obj, (name, home)
        defined_in = getattr(obj, "__module__", None)
        if isinstance(obj, type | types.FunctionType) and defined_in is not None:
            assert defined_in in homes, f"{name} is defined in {defined_in}, exported from {homes}"


def test_submodules_declare_their_exports() -> None:
    for name in SUBMODULES:
        module = importlib.import_module(f"shoal.framework.{name}")
        declared = getattr(module, "__all__", None)
        assert declared is not None, f"shoal.framework.{name} has no __all__"
        for member in declared:
            assert hasattr(module, member), f"shoal.framework.{name}.__all__ lists {member}"
