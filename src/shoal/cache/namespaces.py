"""Namespace labels, for selectors over namespaces.

Pod affinity terms (`namespaceSelector`) and queue bindings select namespaces by their
labels. The backend reports every namespace's labels (`set`) and deletions (`delete`);
`ClusterState.namespaces` holds the one registry every consumer reads. A namespace the
scheduler has not been told about has no labels, as in kube-scheduler
(`GetNamespaceLabelsSnapshot` falls back to an empty set).

`version` grows on every change, so consumers can cache what they derive from labels.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from shoal.api.selectors import SelectorKey, key_matches

__all__ = ["NamespaceLabels"]

_NO_LABELS: Mapping[str, str] = {}


class NamespaceLabels:
    """Labels per namespace, with the namespaces each selector picks cached."""

    def __init__(self) -> None:
        self._labels: dict[str, Mapping[str, str]] = {}
        self._selected: dict[SelectorKey, frozenset[str]] = {}
        self.version = 0

    def set(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Record a namespace's labels; True if anything changed."""
        if not namespace:
            raise ValueError("Namespace: metadata.name is empty; give the namespace a name")
        new = dict(labels)
        if namespace in self._labels and self._labels[namespace] == new:
            return False
        self._labels[namespace] = new
        self._changed()
        return True

    def delete(self, namespace: str) -> bool:
        """Forget a deleted namespace; True if it was known."""
        if self._labels.pop(namespace, None) is None:
            return False
        self._changed()
        return True

    def _changed(self) -> None:
        self.version += 1
        self._selected.clear()

    def labels(self, namespace: str) -> Mapping[str, str]:
        """The namespace's labels (empty when unknown); do not modify."""
        return self._labels.get(namespace, _NO_LABELS)

    def selected(self, selector: SelectorKey) -> frozenset[str]:
        """The known namespaces whose labels match `selector` (kube lists namespaces
        with it). The same object is returned until the labels change."""
        found = self._selected.get(selector)
        if found is None:
            found = frozenset(
                name for name, labels in self._labels.items() if key_matches(selector, labels)
            )
            self._selected[selector] = found
        return found

    def __contains__(self, namespace: object) -> bool:
        return namespace in self._labels

    def __iter__(self) -> Iterator[str]:
        return iter(self._labels)

    def __len__(self) -> int:
        return len(self._labels)
