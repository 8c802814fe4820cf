"""Helpers for simulator tests: manifest snippets, running, looking records up."""

from __future__ import annotations

import textwrap

from shoal.sim import PodRecord, Scenario, SimOptions, SimResult, simulate


def node_yaml(name: str, cpu: str = "4", memory: str = "16Gi", **labels: str) -> str:
    all_labels = {"kubernetes.io/hostname": name, **labels}
    rendered = ", ".join(f"{k}: {v}" for k, v in all_labels.items())
    return textwrap.dedent(
        f"""\
        apiVersion: v1
        kind: Node
        metadata: {{name: {name}, labels: {{{rendered}}}}}
        status: {{allocatable: {{cpu: "{cpu}", memory: {memory}, pods: "110"}}}}
        """
    )


def pod_yaml(
    name: str, cpu: str = "1", arrival: float | None = None, duration: float | None = None
) -> str:
    annotations = {}
    if arrival is not None:
        annotations["sim.shoal.dev/arrival"] = f'"{arrival}"'
    if duration is not None:
        annotations["sim.shoal.dev/duration"] = f'"{duration}"'
    rendered = ", ".join(f"{k}: {v}" for k, v in annotations.items())
    return textwrap.dedent(
        f"""\
        apiVersion: v1
        kind: Pod
        metadata: {{name: {name}, annotations: {{{rendered}}}}}
        spec:
          containers:
          - name: main
            resources: {{requests: {{cpu: "{cpu}", memory: 1Gi}}}}
        """
    )


def docs(*parts: str) -> str:
    """Several manifests as one multi-document YAML text."""
    return "---\n".join(textwrap.dedent(p) for p in parts)


def run(scenario: Scenario, **options: object) -> SimResult:
    return simulate(scenario, SimOptions(**options))  # type: ignore[arg-type]


def by_name(result: SimResult) -> dict[str, PodRecord]:
    return {r.name: r for r in result.records}
