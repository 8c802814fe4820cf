"""metav1.LabelSelector matching, as a pure function and as a hashable canonical key.

kube semantics (`metav1.LabelSelectorAsSelector`):

* a nil selector matches nothing;
* an empty selector (`{}`) matches everything;
* otherwise every requirement must hold: `matchLabels` entries are `key In [value]`,
  `In` needs the key with one of the values, `NotIn` holds when the key is absent or has
  another value, `Exists` / `DoesNotExist` test the key only.

`selector_key` turns a selector into a canonical, hashable tuple of requirements (None for
a nil selector), so equal selectors written differently share one key; `key_matches`
evaluates such a key directly, which is what caches and indexes store.
"""

from __future__ import annotations

from collections.abc import Mapping

from shoal.api.objects import LabelSelector

__all__ = [
    "Requirement",
    "SelectorKey",
    "add_requirements",
    "key_matches",
    "label_selector_matches",
    "merge_match_labels",
    "selector_from_labels",
    "selector_key",
]

Requirement = tuple[str, str, tuple[str, ...]]
"""(key, operator, sorted values): operator is In, NotIn, Exists or DoesNotExist."""

SelectorKey = tuple[Requirement, ...] | None
"""A canonical selector: None matches nothing, () matches everything."""


def selector_key(selector: LabelSelector | None) -> SelectorKey:
    """The canonical, hashable form of a label selector."""
    if selector is None:
        return None
    reqs: set[Requirement] = {(k, "In", (v,)) for k, v in selector.match_labels.items()}
    for expr in selector.match_expressions:
        reqs.add((expr.key, expr.operator, tuple(sorted(set(expr.values)))))
    return tuple(sorted(reqs))


def selector_from_labels(labels: Mapping[str, str]) -> SelectorKey:
    """A selector matching exactly the given labels (`labels.SelectorFromSet`)."""
    return tuple(sorted((k, "In", (v,)) for k, v in labels.items()))


def merge_match_labels(key: SelectorKey, labels: Mapping[str, str]) -> SelectorKey:
    """`key` plus `k In [v]` for each label (kube's mergeLabelSetWithSelector).

    As in kube, merging into a nil selector yields a selector of the labels alone.
    """
    if not labels:
        return key
    reqs = set(key or ())
    reqs.update((k, "In", (v,)) for k, v in labels.items())
    return tuple(sorted(reqs))


def add_requirements(key: SelectorKey, extra: tuple[Requirement, ...]) -> SelectorKey:
    """`key` with more requirements ANDed in (a nil selector stays nil)."""
    if key is None or not extra:
        return key
    return tuple(sorted(set(key) | set(extra)))


def key_matches(key: SelectorKey, labels: Mapping[str, str]) -> bool:
    """Evaluate a canonical selector against a label set."""
    if key is None:
        return False
    for name, op, values in key:
        if op == "In":
            value = labels.get(name)
            if value is None or value not in values:
                return False
        elif op == "NotIn":
            value = labels.get(name)
            if value is not None and value in values:
                return False
        elif op == "Exists":
            if name not in labels:
                return False
        elif op == "DoesNotExist":
            if name in labels:
                return False
        else:  # unknown operators never match (the API server rejects them)
            return False
    return True


def label_selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """Whether `selector` selects an object with `labels` (nil matches nothing)."""
    return key_matches(selector_key(selector), labels)
