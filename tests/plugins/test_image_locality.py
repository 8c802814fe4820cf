"""ImageLocality: kube-scheduler's cases (image_locality_test.go, current arithmetic:
max threshold 1000 MiB per container, init containers counted), name normalization,
and the image state kept in step as nodes change and go."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.api.objects import Container
from shoal.cache.cluster import ClusterState
from shoal.plugins.image_locality import ImageLocality, normalized_image_name
from shoal.testing.builders import make_node, make_pod
from shoal.testing.plugin_env import make_handle, run_score

MB = 1024 * 1024


def _kube_nodes() -> list:
    # kube's node403002000 and node25010.
    machine1 = (
        make_node("machine1")
        .capacity(cpu="4", memory="8Gi")
        .image("gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1", size_bytes=40 * MB)
        .image("gcr.io/300:latest", "gcr.io/300:v1", size_bytes=300 * MB)
        .image("gcr.io/2000:latest", size_bytes=2000 * MB)
    )
    machine2 = (
        make_node("machine2")
        .capacity(cpu="4", memory="8Gi")
        .image("gcr.io/250:latest", size_bytes=250 * MB)
        .image("gcr.io/10:latest", "gcr.io/10:v1", size_bytes=10 * MB)
    )
    return [machine1, machine2]


def _pod(*images: str):  # type: ignore[no-untyped-def]
    pod = make_pod("p")
    for image in images:
        pod = pod.container(image=image)
    return pod


def test_two_images_spread_on_two_nodes_prefer_the_larger_image_one() -> None:
    handle = make_handle(_kube_nodes())
    # machine1: 40M/2 < 23M: 0; machine2: 100 * (250M/2 - 23M) / (2000M - 23M) = 5
    assert run_score(ImageLocality(handle), _pod("gcr.io/40", "gcr.io/250"), handle) == {
        "machine1": 0,
        "machine2": 5,
    }


def test_two_images_on_one_node_prefer_this_node() -> None:
    handle = make_handle(_kube_nodes())
    # machine1: 100 * ((40M + 300M)/2 - 23M) / (2000M - 23M) = 7
    assert run_score(ImageLocality(handle), _pod("gcr.io/40", "gcr.io/300"), handle) == {
        "machine1": 7,
        "machine2": 0,
    }


def test_a_sum_past_the_limit_counts_as_the_limit_and_a_node_without_images_scores_0() -> None:
    handle = make_handle(_kube_nodes())
    assert run_score(ImageLocality(handle), _pod("gcr.io/2000", "gcr.io/10"), handle) == {
        "machine1": 49,  # 100 * (2000M/2 - 23M) / (2000M - 23M)
        "machine2": 0,
    }
    nodes = [*_kube_nodes(), make_node("machine3").capacity(cpu="4", memory="8Gi")]
    handle = make_handle(nodes)
    assert run_score(ImageLocality(handle), _pod("gcr.io/2000", "gcr.io/10"), handle) == {
        "machine1": 32,  # 100 * (2000M/3 - 23M) / (2000M - 23M)
        "machine2": 0,
        "machine3": 0,
    }


def test_init_containers_count_in_the_sum_and_in_the_limit() -> None:
    handle = make_handle(_kube_nodes())
    pod = _pod("gcr.io/40").obj()
    pod.spec.init_containers = [Container(name="init", image="gcr.io/300:v1")]
    # machine1: (40M + 300M)/2 over two containers' limit: 7, as two app containers.
    assert run_score(ImageLocality(handle), pod, handle) == {"machine1": 7, "machine2": 0}


def test_without_images_anywhere_or_on_no_node_the_plugin_skips() -> None:
    bare = make_handle([make_node("n1").capacity(cpu="4", memory="8Gi")])
    assert run_score(ImageLocality(bare), _pod("nginx"), bare) is None
    handle = make_handle(_kube_nodes())
    assert run_score(ImageLocality(handle), _pod("nowhere:v9"), handle) is None


def test_names_are_normalized_as_kube_does() -> None:
    assert normalized_image_name("nginx") == "nginx:latest"
    assert normalized_image_name("nginx:1.27") == "nginx:1.27"
    assert normalized_image_name("registry:5000/team/app") == "registry:5000/team/app:latest"
    assert normalized_image_name("registry:5000/team/app:v2") == "registry:5000/team/app:v2"


_IMAGES = ["a:1", "b:1", "c:1", "d:1"]


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["set", "remove"]),
            st.integers(0, 5),
            st.frozensets(st.sampled_from(_IMAGES)),
        ),
        max_size=30,
    )
)
def test_image_state_matches_the_nodes_after_any_adds_updates_and_removals(steps) -> None:  # type: ignore[no-untyped-def]
    cluster = ClusterState()
    for action, i, images in steps:
        name = f"n{i}"
        if action == "remove":
            cluster.remove_node(name)
            continue
        node = make_node(name).capacity(cpu="1", memory="1Gi")
        for image in sorted(images):
            node = node.image(image, size_bytes=100 * MB + _IMAGES.index(image))
        cluster.add_node(node.obj())
    table, states = cluster.table, cluster.images
    for image in _IMAGES:
        having = [
            r for r in range(table.n) if any(image in i.names for i in table.nodes[r].status.images)
        ]
        found = states.state(image)
        if not having:
            assert found is None
            continue
        assert found == (100 * MB + _IMAGES.index(image), len(having))
        assert np.flatnonzero(states.mask(image)).tolist() == having


def test_the_default_profile_places_a_pod_where_its_image_already_is() -> None:
    from shoal.testing.harness import SchedulerHarness

    def place(seed: int, config: dict | None = None) -> str:  # type: ignore[type-arg]
        h = SchedulerHarness(config, seed=seed)
        h.add_nodes(
            make_node("n0").capacity(cpu="4", memory="8Gi"),
            make_node("n1").capacity(cpu="4", memory="8Gi").image("train:v3", size_bytes=900 * MB),
            make_node("n2").capacity(cpu="4", memory="8Gi"),
        )
        h.add_pods(make_pod("job").container(image="train:v3", requests={"cpu": "1"}))
        return h.run().placements["default/job"]

    assert {place(seed) for seed in range(8)} == {"n1"}
    # Without it the three nodes tie and the seed picks.
    off = {"profiles": [{"plugins": {"multiPoint": {"disabled": [{"name": "ImageLocality"}]}}}]}
    assert len({place(seed, off) for seed in range(8)}) > 1


def test_nodes_listing_the_same_image_share_one_entry_and_it_goes_when_none_lists_it() -> None:
    import gc

    cluster = ClusterState()
    for name in ("n0", "n1"):
        node = make_node(name).capacity(cpu="1", memory="1Gi")
        cluster.add_node(node.image("app:v1", "app@sha256:1", size_bytes=300 * MB).obj())
    first, second = (cluster.node(n).status.images[0] for n in ("n0", "n1"))  # type: ignore[union-attr]
    assert first is second and first.names == ["app:v1", "app@sha256:1"]
    for name in ("n0", "n1"):
        cluster.add_node(make_node(name).capacity(cpu="1", memory="1Gi").obj())  # images gone
    del first, second
    gc.collect()
    assert len(cluster.images._shared) == 0
    assert cluster.images.state("app:v1") is None
