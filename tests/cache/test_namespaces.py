"""NamespaceLabels, and the two ways a pod affinity term's namespace selector is judged
(placed pods' terms at match time, the incoming pod's unrolled into namespace sets)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.api.selectors import selector_key
from shoal.cache.namespaces import NamespaceLabels
from shoal.cache.pod_topology import resolve_term
from shoal.testing.builders import label_selector, make_pod


def test_selected_follows_label_changes() -> None:
    registry = NamespaceLabels()
    prod = selector_key(label_selector({"env": "prod"}))
    assert registry.selected(prod) == frozenset()
    assert registry.set("a", {"env": "prod"}) and registry.set("b", {"env": "dev"})
    assert registry.selected(prod) == {"a"}
    assert registry.selected(selector_key(label_selector())) == {"a", "b"}
    assert registry.selected(None) == frozenset()
    version = registry.version
    assert not registry.set("a", {"env": "prod"})  # unchanged: caches stay valid
    assert registry.version == version
    registry.set("b", {"env": "prod"})
    assert registry.selected(prod) == {"a", "b"}
    assert registry.delete("a") and not registry.delete("a")
    assert registry.selected(prod) == {"b"}
    assert registry.labels("a") == {} and "a" not in registry and list(registry) == ["b"]


def test_an_unnamed_namespace_is_rejected_with_the_field() -> None:
    with pytest.raises(ValueError, match=r"metadata\.name"):
        NamespaceLabels().set("", {"env": "prod"})


NAMESPACES = ["a", "b", "c", "d"]
labels_strategy = st.dictionaries(
    st.sampled_from(["env", "team"]), st.sampled_from(["x", "y"]), max_size=2
)


@given(
    known=st.dictionaries(st.sampled_from(NAMESPACES), labels_strategy),
    listed=st.lists(st.sampled_from(NAMESPACES), max_size=2),
    selector=st.one_of(st.none(), labels_strategy),
    pod_namespace=st.sampled_from(NAMESPACES),
    owner_namespace=st.sampled_from(NAMESPACES),
)
def test_unrolled_terms_select_the_pods_the_selector_does(
    known: dict[str, dict[str, str]],
    listed: list[str],
    selector: dict[str, str] | None,
    pod_namespace: str,
    owner_namespace: str,
) -> None:
    registry = NamespaceLabels()
    for name, labels in known.items():
        registry.set(name, labels)
    ns_selector = None if selector is None else label_selector(selector)
    owner = make_pod("owner", owner_namespace).pod_anti_affinity(
        "zone", {"app": "web"}, namespaces=listed, namespace_selector=ns_selector
    )
    owner_info = owner.info()
    term = resolve_term(owner_info.anti_affinity_terms[0], owner_info)
    pod = make_pod("p", pod_namespace).labels(app="web").info()
    # Every pod's namespace exists in a real cluster: compare on known namespaces.
    if pod_namespace not in registry:
        registry.set(pod_namespace, {})
    direct = term.matches(pod, registry.labels(pod_namespace))
    assert term.unrolled(registry).matcher.matches(pod) == direct
    if selector is None and not listed:
        assert direct == (pod_namespace == owner_namespace)
    elif selector == {}:
        assert direct
    else:
        in_selected = selector is not None and all(
            registry.labels(pod_namespace).get(k) == v for k, v in selector.items()
        )
        assert direct == (pod_namespace in listed or in_selected)
