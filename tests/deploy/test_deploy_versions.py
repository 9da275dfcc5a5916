"""What `deploy/` ships must not drift from the code it installs.

The chart's version and appVersion, the image tag and version label of the Kustomize base are
the package version, and the CRD copies in the chart and the Kustomize base are deploy/crds/
byte for byte (Helm installs only the chart's own crds/, Kustomize loads nothing from outside
its directory, so both need copies; `make crds` writes all three).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml

from karpenter_capi import __version__

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
COPIES = (DEPLOY / "charts" / "karpenter-capi" / "crds", DEPLOY / "kustomize" / "base" / "crds")


def _package_version() -> str:
    with (REPO / "pyproject.toml").open("rb") as f:
        version: str = tomllib.load(f)["project"]["version"]
    return version


def test_chart_version_and_app_version_are_the_package_version() -> None:
    chart = yaml.safe_load((DEPLOY / "charts" / "karpenter-capi" / "Chart.yaml").read_text())
    assert _package_version() == __version__
    assert (chart["version"], chart["appVersion"]) == (__version__, __version__), (
        "deploy/charts/karpenter-capi/Chart.yaml: set version and appVersion to "
        f"{__version__} (pyproject.toml)"
    )


def test_kustomize_base_image_and_version_label_are_the_package_version() -> None:
    base = DEPLOY / "kustomize" / "base"
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    assert kustomization["images"] == [{"name": "karpenter-capi", "newTag": __version__}]
    assert kustomization["labels"][0]["pairs"]["app.kubernetes.io/version"] == __version__


@pytest.mark.parametrize("copy", COPIES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_crd_copies_are_deploy_crds(copy: Path) -> None:
    source = {p.name: p.read_bytes() for p in (DEPLOY / "crds").glob("*.yaml")}
    copied = {p.name: p.read_bytes() for p in copy.glob("*.yaml")}
    assert source, "deploy/crds/ is empty"
    names = source.keys() | copied.keys()
    stale = sorted(name for name in names if source.get(name) != copied.get(name))
    where = copy.relative_to(REPO)
    assert not stale, f"{where} differs from deploy/crds/ in {stale}: run `make crds`"
