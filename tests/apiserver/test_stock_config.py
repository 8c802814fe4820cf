"""The configuration the stock kube-scheduler writes (`--write-config-to`, v1.36 from
../shared/k8s) is accepted by `shoal validate-config` and runs: what Shoal lacks (the
workload placement points) is warned about, never refused; the args' `apiVersion`/`kind`
are taken as kube takes them.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from apihelpers import space, wait_for
from kubehelpers import async_test
from typer.testing import CliRunner

from shoal.cli import app
from shoal.config import load_config
from shoal.scheduler import default_registry


def _stock_config(control_plane: dict[str, str], out: Path) -> Path:
    binary = Path(control_plane["K8S_BIN_DIR"]) / "kube-scheduler"
    done = subprocess.run(
        [
            str(binary),
            f"--kubeconfig={control_plane['KUBECONFIG']}",
            f"--write-config-to={out}",
            "--leader-elect=false",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and out.exists(), done.stderr
    return out


@async_test(timeout=120)
async def test_the_stock_kube_scheduler_configuration_validates_and_runs(
    control_plane: dict[str, str], tmp_path: Path
) -> None:
    path = _stock_config(control_plane, tmp_path / "kube-scheduler.yaml")
    result = CliRunner().invoke(app, ["validate-config", str(path)])
    assert result.exit_code == 0, result.output
    for known in (
        "DynamicResources",
        "ImageLocality",
        "VolumeRestrictions",
        "NodeDeclaredFeatures",
    ):
        assert f"{known} is not in Shoal" not in result.output

    async with space(control_plane["KUBECONFIG"], "stockcfg") as s:
        # The stock file with its profile renamed to this test's scheduler name (next to
        # the kit's kube-scheduler, as a user running both would), everything else as
        # kube-scheduler wrote it.
        raw = yaml.safe_load(path.read_text())
        raw["profiles"][0]["schedulerName"] = s.scheduler
        renamed = tmp_path / "renamed.yaml"
        renamed.write_text(yaml.safe_dump(raw))
        config = load_config(renamed, registry=default_registry())
        await s.add_node("n0", cpu="2")
        await s.create_pod("p0", "500m")
        async with s.shoal(s.options("stockcfg"), scheduler_config=config):

            async def bound() -> bool:
                return "p0" in {k.rpartition("/")[2] for k in await s.bound()}

            await wait_for(bound, what="the pod bound under the stock configuration")
