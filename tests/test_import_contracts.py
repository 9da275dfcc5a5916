"""The import-linter contracts of pyproject.toml catch the imports they are there to refuse.

A contract that names a module wrongly, or allows too much, is kept forever and protects
nothing. Each case copies the source tree, adds one import the contract forbids, and expects
``lint-imports`` to report that contract broken, naming the bad import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

# (contract id, module that gets the import, the import, the text the report shows)
CASES = [
    (
        "values-below",
        "core/values/taints.py",
        "from karpenter_capi.core.scheduling import solver",
        "karpenter_capi.core.values.taints -> karpenter_capi.core.scheduling.solver",
    ),
    (
        "values-below",
        "core/values/quantity.py",
        "from karpenter_capi.core.kube import client",
        "karpenter_capi.core.values.quantity -> karpenter_capi.core.kube.client",
    ),
    (
        "scheduling-without-kube",
        "core/scheduling/solver.py",
        "from karpenter_capi.core.kube import client",
        "karpenter_capi.core.scheduling.solver -> karpenter_capi.core.kube.client",
    ),
    (
        "sim-apart-from-solver",
        "sim/workloads/objects.py",
        "from karpenter_capi.core.scheduling.daemons import daemon_pod",
        "karpenter_capi.sim.workloads.objects -> karpenter_capi.core.scheduling.daemons",
    ),
    (
        "sim-apart-from-solver",
        "sim/scheduler/rules.py",
        "from karpenter_capi.core.scheduling.hostports import HostPort",
        "karpenter_capi.sim.scheduler.rules -> karpenter_capi.core.scheduling.hostports",
    ),
]


def _lint(src: Path, cwd: Path, contract: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT_IMPORTS), str(ROOT / "pyproject.toml"), "--contract", contract,
         "--no-cache"],
        cwd=cwd, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("contract", "module", "line", "shown"), CASES)
def test_a_forbidden_import_breaks_its_contract(
    tmp_path: Path, contract: str, module: str, line: str, shown: str
) -> None:
    kept = _lint(ROOT / "src", tmp_path, contract)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "1 kept, 0 broken" in kept.stdout

    src = tmp_path / "src"
    shutil.copytree(
        ROOT / "src" / "karpenter_capi",
        src / "karpenter_capi",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    target = src / "karpenter_capi" / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")

    broken = _lint(src, tmp_path, contract)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "0 kept, 1 broken" in broken.stdout
    assert shown in " ".join(broken.stdout.split())
