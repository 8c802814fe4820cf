"""Download the openb trace (pinned commit, sha256-checked) for users with internet.

The files are fetched from alibaba/clusterdata at commit 50a91c7c, folder
cluster-trace-gpu-v2023/csv/, and each one is checked against the sha256 sums below
(the content of the trace's SHA256SUMS file). The trace carries no open-source licence:
its owners allow research and study use and ask users to cite the FGD paper (Weng et
al., USENIX ATC 2023). Never commit the files to a repository.
"""

from __future__ import annotations

import hashlib
import urllib.request
from collections.abc import Callable
from pathlib import Path

__all__ = ["COMMIT", "SHA256SUMS", "URL", "download", "expected_sums", "verify"]

COMMIT = "50a91c7c74abe3b658188dc78ac1dd302970d40c"
URL = f"https://raw.githubusercontent.com/alibaba/clusterdata/{COMMIT}/cluster-trace-gpu-v2023/csv/"

SHA256SUMS = """\
5a85c2af79c66a1efff8bbcbda430400aae56d8431370d738480967e1a9c6b15  openb_node_list_all_node.csv
2beca64b4d3dfa342036a34b56a495c6cef9225db836c81f541282cb1df320b5  openb_node_list_gpu_node.csv
747f43247bffc2b0bb081d7f61f0705ca8d390dafc0b647e642c92f3baf3ba1e  openb_pod_list_cpu050.csv
bec1c33fbdde61fd463877534ec79b393aec73e1cbb22d55fab9f166ac480982  openb_pod_list_cpu100.csv
1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8  openb_pod_list_default.csv
d83ce79a4eb6987524bedbb0c65e41aed3a36bf6c1b78b86234c3687a07e1d40  openb_pod_list_gpushare40.csv
d31809628128a1f24491086eda4af3e23882b9213d3ef57a56ee2d1af69492fe  openb_pod_list_gpushare60.csv
2dc7e4cb9480484f08539720b433a9ec9ab5d76b396f3f7557c53a2ff78a7611  openb_pod_list_gpuspec10.csv
6b9b89ab8913c1c074e994e98f548cf1a872fc5f76f2442ca8cd514a478b00a9  openb_pod_list_gpuspec20.csv
d9ec6f6c74fb980cc0b81239470c6353fceea077ea9abd610003b604c7cc2b01  openb_pod_list_multigpu20.csv
a5e479c6444b1d83eef848159cf00c3cfa13441b2d1e2c113c391b91f1cc5b11  openb_pod_list_multigpu30.csv
"""


def expected_sums(text: str | None = None) -> dict[str, str]:
    """file name -> sha256 from `sha256sum` output (default: the pinned SHA256SUMS)."""
    sums: dict[str, str] = {}
    for line in (SHA256SUMS if text is None else text).splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            sums[name.strip().lstrip("*")] = digest.lower()
    return sums


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(folder: Path, sums: dict[str, str] | None = None) -> list[str]:
    """Names of the files that are missing or whose sha256 does not match."""
    sums = sums or expected_sums()
    return [
        name
        for name, digest in sums.items()
        if not (folder / name).is_file() or _sha256(folder / name) != digest
    ]


def download(
    dest: Path,
    *,
    base_url: str = URL,
    force: bool = False,
    log: Callable[[str], None] = print,
    opener: Callable[[str], bytes] | None = None,
) -> Path:
    """Fetch every file of SHA256SUMS into `dest` (skipping verified ones) and write
    SHA256SUMS next to them. Raises RuntimeError on a checksum mismatch."""
    sums = expected_sums()
    dest.mkdir(parents=True, exist_ok=True)
    fetch = opener or _fetch
    for name, digest in sums.items():
        target = dest / name
        if not force and target.is_file() and _sha256(target) == digest:
            log(f"ok       {name}")
            continue
        data = fetch(base_url + name)
        got = hashlib.sha256(data).hexdigest()
        if got != digest:
            raise RuntimeError(f"{name}: sha256 {got} does not match the pinned {digest}")
        partial = target.with_suffix(target.suffix + ".part")
        partial.write_bytes(data)
        partial.replace(target)
        log(f"fetched  {name} ({len(data)} bytes)")
    (dest / "SHA256SUMS").write_text("".join(f"{d}  {n}\n" for n, d in sums.items()))
    return dest


def _fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:
        data: bytes = response.read()
    return data
