"""kubectl's habits in `shoal get` and `shoal explain`, against the fake API server:
resource names (singular, plural, short, group-qualified, TYPE/NAME), NAME arguments and
kubectl's NotFound error, `-n` and `-A`, `-l` label selectors, `-o wide` and `-o name`,
options before the resource, and `explain -n NAMESPACE POD`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result
from kubehelpers import async_test, pod
from test_ctl import GROUP_LABEL, PLUGINS, SHOAL, _cluster, _json, _shoal

from shoal.commands.ctl import (
    EXIT_BLOCKED,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    parse_selector,
)
from shoal.testing.fake_apiserver import FakeApiServer

LIGHT_NAME = "pod-group.scheduling.sigs.k8s.io/name"  # a gang named by pod labels only


def _labelled(api: FakeApiServer) -> None:
    """test_ctl's cluster, plus labelled objects: queues team-c (tier=gold, team=c) and
    team-d (tier=silver) under root; PodGroup ml/ddp (app=train, tier=gold) with two
    pods, PodGroup ml/eval (no labels), a gang ml/light of pod labels only; NodePool
    `cpu` (tier=gold) over the nodes labelled pool=cpu (none)."""
    _cluster(api)
    for name, labels in (("team-c", {"tier": "gold", "team": "c"}), ("team-d", {"tier": "silver"})):
        api.create(
            SHOAL,
            "queues",
            {"metadata": {"name": name, "labels": labels}, "spec": {"parent": "root"}},
        )
    for name, labels in (("ddp", {"app": "train", "tier": "gold"}), ("eval", {})):
        api.create(
            PLUGINS,
            "podgroups",
            {
                "apiVersion": PLUGINS,
                "kind": "PodGroup",
                "metadata": {"name": name, "namespace": "ml", "labels": labels},
                "spec": {"minMember": 2},
            },
        )
        for i in range(2):
            api.create(
                "v1",
                "pods",
                pod(f"{name}-{i}", cpu="100m", namespace="ml", labels={GROUP_LABEL: name}),
            )
    api.create(
        "v1", "pods", pod("light-0", cpu="100m", namespace="ml", labels={LIGHT_NAME: "light"})
    )
    api.create(
        SHOAL,
        "nodepools",
        {
            "metadata": {"name": "cpu", "labels": {"tier": "gold"}},
            "spec": {"nodeSelector": {"pool": "cpu"}},
        },
    )


def _lines(result: Result) -> list[str]:
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def _names(data: Any) -> list[str]:
    """Names of a `get -o json` document: a queue list's, or a list of rows."""
    rows = data["queues"] if isinstance(data, dict) else data
    return [r["name"] if "namespace" not in r else f"{r['namespace']}/{r['name']}" for r in rows]


@async_test(timeout=120)
async def test_every_kubectl_name_of_a_resource_works(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _labelled(api)
        expected = {
            "queues": [
                "queue",
                "queues",
                "q",
                "sq",
                "QUEUES",
                "queue.shoal.dev",
                "queues.shoal.dev",
            ],
            "podgroups": ["podgroup", "podgroups", "pg", "pgs", "PodGroup"],
            "pools": ["pool", "pools", "nodepool", "nodepools", "np", "nodepools.shoal.dev"],
        }
        for canonical, aliases in expected.items():
            want = _lines(await _shoal(tmp_path, api, "get", canonical, "-o", "name"))
            assert want
            for alias in aliases:
                got = _lines(await _shoal(tmp_path, api, "get", alias, "-o", "name"))
                assert got == want, (alias, got, want)

        # A group-qualified name shows that API's objects only: the label-only gang is
        # in `podgroups`, not in `podgroups.scheduling.x-k8s.io`.
        every = _lines(await _shoal(tmp_path, api, "get", "podgroups", "-o", "name"))
        assert "podgroup/ml/light" in every
        for name in ("podgroups.scheduling.x-k8s.io", "podgroup.scheduling.x-k8s.io"):
            qualified = await _shoal(tmp_path, api, "get", name, "-o", "name")
            assert _lines(qualified) == [n for n in every if n != "podgroup/ml/light"]
        volcano = await _shoal(tmp_path, api, "get", "podgroups.scheduling.volcano.sh")
        assert volcano.exit_code == 0 and volcano.stdout == ""
        assert "No resources found." in volcano.stderr

        # Unknown: the error lists what is accepted.
        bad = await _shoal(tmp_path, api, "get", "widgets")
        assert bad.exit_code == EXIT_USAGE
        assert "unknown resource type 'widgets'" in bad.stderr
        for name in ("queues", "q", "podgroups", "pg", "pools", "nodepools", "queue/team"):
            assert name in bad.stderr, name
        nothing = await _shoal(tmp_path, api, "get", "-n", "ml")
        assert nothing.exit_code == EXIT_USAGE and "name the resource type" in nothing.stderr
        assert "podgroups (podgroup, pg, pgs)" in nothing.stderr


@async_test(timeout=120)
async def test_options_go_before_or_after_the_resource(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _labelled(api)
        after = _json(await _shoal(tmp_path, api, "get", "pg", "-n", "ml", "-o", "json"))
        assert _names(after) == ["ml/ddp", "ml/eval", "ml/light"]
        for args in (
            ("get", "-n", "ml", "pg", "-o", "json"),
            ("get", "-n", "ml", "-o", "json", "pg"),
            ("get", "--namespace=ml", "--output=json", "pg"),
            ("get", "-n", "ml", "-ojson", "pg"),
            ("get", "-n=ml", "pg", "-o=json"),  # kubectl takes -o=json
        ):
            assert _json(await _shoal(tmp_path, api, *args)) == after, args


@async_test(timeout=120)
async def test_a_name_shows_that_object_or_kubectls_not_found(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _labelled(api)
        table = await _shoal(tmp_path, api, "get", "queues", "team-a")
        assert table.exit_code == 0, table.output
        rows = [line.split()[0] for line in table.stdout.splitlines()[1:] if line[:1] != "c"]
        assert rows == ["team-a"]  # that row only, no tree indentation

        # One NAME: the object itself, as kubectl prints it; TYPE/NAME alike.
        one = _json(await _shoal(tmp_path, api, "get", "queue", "team-a", "-o", "json"))
        assert one["name"] == "team-a" and one["parent"] == "root"
        assert _json(await _shoal(tmp_path, api, "get", "queue/team-a", "-o", "json")) == one
        as_yaml = await _shoal(tmp_path, api, "get", "q", "team-a", "-o", "yaml")
        assert yaml.safe_load(as_yaml.stdout) == one
        # Several: the usual document, in the order asked.
        two = _json(await _shoal(tmp_path, api, "get", "queues", "team-b", "team-a", "-o", "json"))
        assert _names(two) == ["team-b", "team-a"] and "capacity" in two
        pool = _json(await _shoal(tmp_path, api, "get", "nodepool", "gpu", "-o", "json"))
        assert pool["name"] == "gpu" and pool["nodes"] == 1

        missing = await _shoal(tmp_path, api, "get", "queues", "team")
        assert missing.exit_code == EXIT_NOT_FOUND
        assert missing.stdout == ""
        assert missing.stderr.splitlines()[0] == (
            'Error from server (NotFound): queues "team" not found'
        )
        assert "shoal get queues" in missing.stderr  # what to do about it
        pools = await _shoal(tmp_path, api, "get", "pools", "nope")
        assert pools.exit_code == EXIT_NOT_FOUND
        assert 'Error from server (NotFound): nodepools "nope" not found' in pools.stderr
        # Found ones are printed, the missing one is an error: exit 3.
        some = await _shoal(tmp_path, api, "get", "queues", "team-a", "nope", "-o", "name")
        assert some.exit_code == EXIT_NOT_FOUND
        assert some.stdout.splitlines() == ["queue.shoal.dev/team-a"]
        assert 'queues "nope" not found' in some.stderr

        # Pod groups: NAME in every namespace (Shoal's default), -n NS NAME, NS/NAME.
        ddp = _json(await _shoal(tmp_path, api, "get", "pg", "-n", "ml", "ddp", "-o", "json"))
        assert (ddp["namespace"], ddp["name"], ddp["minMember"]) == ("ml", "ddp", 2)
        assert _json(await _shoal(tmp_path, api, "get", "pg", "ml/ddp", "-o", "json")) == ddp
        assert _json(await _shoal(tmp_path, api, "get", "podgroup/ml/ddp", "-o", "json")) == ddp
        listed = _json(await _shoal(tmp_path, api, "get", "pg", "ddp", "-o", "json"))
        assert listed == [ddp]  # no namespace named: a list, as for -A
        elsewhere = await _shoal(tmp_path, api, "get", "pg", "-n", "default", "ddp")
        assert elsewhere.exit_code == EXIT_NOT_FOUND
        assert 'Error from server (NotFound): podgroups "ddp" not found' in elsewhere.stderr
        assert "in namespace ml: use -n ml or -A" in elsewhere.stderr
        wrong = await _shoal(tmp_path, api, "get", "pg", "default/ddp")
        assert wrong.exit_code == EXIT_NOT_FOUND and "write ml/ddp" in wrong.stderr

        # Names that cannot be this kind's name the fix.
        for args, fix in (
            (("get", "queues", "pg/ddp"), "shoal get podgroups"),
            (("get", "queues", "a/b"), "NAME or queue/NAME"),
            (("get", "pg", "-n", "ml", "default/g"), "drop one"),
            (("get", "pg", "a/b/c/d"), "NAMESPACE/NAME"),
            (("get", "queues", "team-a", "-l", "tier=gold"), "cannot be used together"),
        ):
            bad = await _shoal(tmp_path, api, *args)
            assert bad.exit_code == EXIT_USAGE and fix in bad.stderr, (args, bad.stderr)


@async_test(timeout=120)
async def test_namespace_and_all_namespaces(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _labelled(api)
        every = _names(_json(await _shoal(tmp_path, api, "get", "pg", "-o", "json")))
        assert every == ["default/g", "ml/ddp", "ml/eval", "ml/light"]
        for flag in ("-A", "--all-namespaces"):
            got = _json(await _shoal(tmp_path, api, "get", "pg", flag, "-o", "json"))
            assert _names(got) == every
        # -A wins over -n, as in kubectl.
        both = _json(await _shoal(tmp_path, api, "get", "pg", "-n", "ml", "-A", "-o", "json"))
        assert _names(both) == every
        ml = _json(await _shoal(tmp_path, api, "get", "pg", "-n", "ml", "-o", "json"))
        assert _names(ml) == ["ml/ddp", "ml/eval", "ml/light"]
        table = await _shoal(tmp_path, api, "get", "pg", "-n", "ml")
        assert table.exit_code == 0 and " g " not in table.stdout and "ddp" in table.stdout
        none = await _shoal(tmp_path, api, "get", "pg", "-n", "nowhere")
        assert none.exit_code == 0 and none.stdout == ""
        assert "No resources found in nowhere namespace." in none.stderr
        assert _json(await _shoal(tmp_path, api, "get", "pg", "-n", "nowhere", "-o", "json")) == []

        # Cluster-scoped kinds accept -A and -n and ignore them.
        for kind in ("queues", "pools"):
            plain = _lines(await _shoal(tmp_path, api, "get", kind, "-o", "name"))
            for args in (("-A",), ("--all-namespaces",), ("-n", "ml")):
                got = _lines(await _shoal(tmp_path, api, "get", kind, *args, "-o", "name"))
                assert got == plain, (kind, args)


@async_test(timeout=120)
async def test_label_selectors_on_the_objects_labels(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _labelled(api)

        async def names(kind: str, selector: str) -> list[str]:
            result = await _shoal(tmp_path, api, "get", kind, "-l", selector, "-o", "json")
            return _names(_json(result))

        assert await names("queues", "tier=gold") == ["team-c"]
        assert await names("queues", "tier==gold") == ["team-c"]
        assert await names("queues", "=tier=gold") == ["team-c"]  # -l=tier=gold
        assert await names("queues", "tier=gold,team=c") == ["team-c"]
        assert await names("queues", "tier=gold,team!=c") == []
        # != holds for objects without the label (kubectl's semantics).
        assert await names("queues", "tier!=gold") == [
            "default",
            "root",
            "team-a",
            "team-b",
            "team-d",
        ]
        assert await names("queues", "tier!=gold,tier!=silver") == [
            "default",
            "root",
            "team-a",
            "team-b",
        ]
        assert await names("queues", "tier") == ["team-c", "team-d"]
        assert await names("queues", "!tier") == ["default", "root", "team-a", "team-b"]
        assert await names("queues", "tier in (gold, silver)") == ["team-c", "team-d"]
        assert await names("queues", "tier notin (gold),team!=x") == [
            "default",
            "root",
            "team-a",
            "team-b",
            "team-d",
        ]
        assert await names("pg", "app=train") == ["ml/ddp"]
        assert await names("pg", "tier!=gold") == ["default/g", "ml/eval", "ml/light"]
        assert await names("pools", "tier=gold") == ["cpu"]

        # A filtered queue table is flat (no tree), and --show-labels shows them.
        table = await _shoal(tmp_path, api, "get", "q", "-l", "tier", "--show-labels")
        lines = _lines(table)
        assert lines[0].split()[-1] == "LABELS"
        assert lines[1].startswith("team-c ") and lines[1].rstrip().endswith("team=c,tier=gold")
        assert lines[2].startswith("team-d ") and lines[2].rstrip().endswith("tier=silver")
        empty = await _shoal(tmp_path, api, "get", "pools", "-l", "tier=platinum")
        assert empty.exit_code == 0 and empty.stdout == ""
        assert "No resources found." in empty.stderr

        bad = await _shoal(tmp_path, api, "get", "queues", "-l", "tier=gold,,")
        assert bad.exit_code == EXIT_USAGE
        assert "key=value" in bad.stderr and "key!=value" in bad.stderr


@pytest.mark.parametrize(
    ("text", "requirements"),
    [
        ("", ()),
        ("a=b", (("a", "In", ("b",)),)),
        ("a==b", (("a", "In", ("b",)),)),
        ("a!=b", (("a", "NotIn", ("b",)),)),
        ("a=", (("a", "In", ("",)),)),
        (" a = b , c != d ", (("a", "In", ("b",)), ("c", "NotIn", ("d",)))),
        ("shoal.dev/queue=team-a", (("shoal.dev/queue", "In", ("team-a",)),)),
        ("a", (("a", "Exists", ()),)),
        ("!a", (("a", "DoesNotExist", ()),)),
        ("a in (y, x),b notin (z)", (("a", "In", ("x", "y")), ("b", "NotIn", ("z",)))),
    ],
)
def test_parse_selector(text: str, requirements: tuple[Any, ...]) -> None:
    assert parse_selector(text) == requirements


@pytest.mark.parametrize("text", ["a=b,", "a b", "a=(b)", "a in (b", "a in ()", "!a=b", "=b"])
def test_parse_selector_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="'"):
        parse_selector(text)


@async_test(timeout=120)
async def test_output_wide_and_name(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _labelled(api)
        wide = _lines(await _shoal(tmp_path, api, "get", "queues", "-o", "wide"))
        header = wide[0].split()
        assert header[:3] == ["QUEUE", "STATE", "ALLOCATED"]
        assert header[-5:] == ["PARENT", "WEIGHT", "DOMINANT", "SHARE", "MESSAGE"]
        # Never folded: one line per queue, with its parent near the end.
        (team_a,) = [line for line in wide if "team-a" in line]
        assert "cpu=2.5 memory=512Mi" in team_a and team_a.split()[-4] == "root"
        pg = _lines(await _shoal(tmp_path, api, "get", "pg", "-o", "wide"))
        assert pg[0].split()[-4:] == ["SUCCEEDED", "FAILED", "SOURCE", "API"]
        (ddp,) = [line for line in pg if " ddp " in line]
        assert ddp.split()[-2:] == ["scheduler-plugins", "scheduling.x-k8s.io"]
        (light,) = [line for line in pg if " light " in line]
        assert light.split()[-2:] == ["labels", "-"]  # source "pod-group labels", no object
        pools = _lines(await _shoal(tmp_path, api, "get", "pools", "-o", "wide"))
        assert pools[0].split()[-5:] == ["PODS", "EPHEMERAL", "STORAGE", "NODE", "SELECTOR"]
        (gpu,) = [line for line in pools if line.startswith("gpu ")]
        assert gpu.split()[-1] == "pool=gpu" and "0/110" in gpu
        # The plain table is not folded either when piped (`| grep` finds whole rows).
        plain = _lines(await _shoal(tmp_path, api, "get", "queues"))
        assert any("team-a" in line and "cpu=2.5 memory=512Mi" in line for line in plain)

        names = {
            kind: _lines(await _shoal(tmp_path, api, "get", kind, "-o", "name"))
            for kind in ("queues", "pg", "pools")
        }
        assert names["queues"] == [
            "queue.shoal.dev/default",
            "queue.shoal.dev/root",
            "queue.shoal.dev/team-a",
            "queue.shoal.dev/team-b",
            "queue.shoal.dev/team-c",
            "queue.shoal.dev/team-d",
        ]
        assert names["pg"] == [
            "podgroup.scheduling.x-k8s.io/default/g",
            "podgroup.scheduling.x-k8s.io/ml/ddp",
            "podgroup.scheduling.x-k8s.io/ml/eval",
            "podgroup/ml/light",  # no PodGroup object: no API group
        ]
        assert names["pools"] == [
            "nodepool.shoal.dev/cpu",
            "nodepool.shoal.dev/gpu",
        ]  # not (no pool)
        # Each line reads back as TYPE/NAME.
        for kind_names in names.values():
            for line in kind_names:
                again = await _shoal(tmp_path, api, "get", line, "-o", "name")
                assert _lines(again) == [line], line
        both = await _shoal(tmp_path, api, "get", *names["pools"], "-o", "name")
        assert _lines(both) == names["pools"]

        bad = await _shoal(tmp_path, api, "get", "queues", "-o", "jsonpath={.x}")
        assert bad.exit_code == EXIT_USAGE
        assert "use table, wide, name, json or yaml" in bad.stderr


@async_test(timeout=120)
async def test_explain_takes_the_namespace_as_kubectl_does(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _labelled(api)
        slash = await _shoal(tmp_path, api, "explain", "default/huge", "-o", "json")
        assert slash.exit_code == EXIT_BLOCKED
        answer = json.loads(slash.stdout)
        for args in (
            ("explain", "-n", "default", "huge"),
            ("explain", "huge", "--namespace", "default"),
            ("explain", "-n", "default", "pod/huge"),  # kubectl's -o name
            ("explain", "-n", "default", "default/huge"),
        ):
            result = await _shoal(tmp_path, api, *args, "-o", "json")
            assert result.exit_code == EXIT_BLOCKED, (args, result.output)
            assert json.loads(result.stdout) == answer, args

        ml = await _shoal(tmp_path, api, "explain", "-n=ml", "ddp-0", "-o", "json")
        assert ml.exit_code == 0, ml.output
        assert json.loads(ml.stdout)["gang"]["name"] == "ml/ddp"

        bare = await _shoal(tmp_path, api, "explain", "huge")
        assert bare.exit_code == EXIT_USAGE
        assert "NAMESPACE/NAME" in bare.stderr and "-n NAMESPACE NAME" in bare.stderr
        clash = await _shoal(tmp_path, api, "explain", "-n", "ml", "default/huge")
        assert clash.exit_code == EXIT_USAGE and "drop one" in clash.stderr
        missing = await _shoal(tmp_path, api, "explain", "-n", "ml", "huge")
        assert missing.exit_code == EXIT_NOT_FOUND and "ml/huge not found" in missing.stderr
        typed = await _shoal(tmp_path, api, "explain", "pod/huge")
        assert typed.exit_code == EXIT_NOT_FOUND and "add -n NAMESPACE" in typed.stderr
