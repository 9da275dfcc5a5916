"""A third party's plugin, pip-installed as its own distribution, is found and called.

The fixture distribution in ``fixtures/acme_plugin`` is built and installed with pip (offline:
``--no-index --no-build-isolation``, using the venv's setuptools) into a temporary directory; a
subprocess with that directory on ``PYTHONPATH`` then loads it by name through its entry point,
exactly as ``karpenter-capi run --plugins acme`` would.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parent / "fixtures" / "acme_plugin"


def _can_build_wheels_offline() -> str | None:
    """Why the venv cannot build the fixture without the network, or None when it can."""
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return "setuptools is not installed in the test environment"
    major, minor = (int(part) for part in version.split(".")[:2])
    if (major, minor) < (70, 1) and importlib.util.find_spec("wheel") is None:
        return "setuptools < 70.1 needs the 'wheel' package to build wheels; add it to dev deps"
    return None


@pytest.fixture(scope="module")
def installed_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = _can_build_wheels_offline()
    if reason:
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("acme")
    source = workdir / "source"
    # Build from a copy: setuptools writes build/ and *.egg-info next to the sources.
    shutil.copytree(FIXTURE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    target = workdir / "site"
    environment = {
        **os.environ,
        "PIP_NO_INDEX": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
    }
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(source),
        ],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert (target / "acme_karpenter" / "plugin.py").exists()
    return target


_PROBE = textwrap.dedent(
    """
    import json
    import logging
    import sys

    from karpenter_capi.core.clock import FakeClock
    from karpenter_capi.core.plugin_host import (
        PluginEnvironment,
        PluginLoadError,
        Plugins,
        describe_plugins,
        resolve_enabled,
    )

    report = {}
    enabled = resolve_enabled(None)  # from KARPENTER_CAPI_PLUGINS
    report["enabled"] = enabled
    environment = PluginEnvironment(
        workload=object(),
        management=object(),
        clock=FakeClock(),
        logger=logging.getLogger("probe"),
        options={"acme": {"base_price": "0.25"}},
    )
    plugins = Plugins.load(enabled, environment)
    report["names"] = plugins.names
    report["kinds"] = sorted(
        [list(kind), owners] for kind, owners in plugins.nodeclass_kinds().items()
    )
    types = plugins.instance_types(
        {"apiVersion": "acme.example.com/v1", "kind": "AcmeNodeClass", "metadata": {"name": "a"}},
        {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"}},
    )
    report["types"] = [
        [t.name, t.allocatable.to_dict(), [o.price for o in t.offerings]] for t in types
    ]
    # A plugin written as a class: one object per Plugins, holding its context and its state.
    fleet_environment = PluginEnvironment(
        workload=object(),
        management=object(),
        clock=FakeClock(),
        options={"acme_fleet": {"zone": "acme-1b"}},
    )
    fleet = Plugins.load(["acme", "acme_fleet"], fleet_environment)
    fleet_class = {"kind": "AcmeFleetNodeClass", "metadata": {"name": "f"}}
    claims = [{"kind": "NodeClaim", "metadata": {"name": n}} for n in ("nc-1", "nc-2")]
    report["fleet_zones"] = [fleet.create(claim, [], fleet_class).zone for claim in claims]
    report["fleet_list"] = [i.name for i in fleet.list_instances()]
    report["fleet_object"] = type(fleet.plugin("acme_fleet")).__name__
    restarted = Plugins.load(["acme_fleet"], fleet_environment)
    report["fleet_restarted_list"] = [i.name for i in restarted.list_instances()]
    for name in ("acme-typo", "acme_gpu", "acme_empty"):
        try:
            Plugins.load([name], environment)
        except PluginLoadError as error:
            report[name] = {"message": str(error), "extra": error.extra}
    report["describe"] = {
        info.name: [info.distribution, info.version, info.enabled, info.error]
        for info in describe_plugins(enabled + ["acme_gpu"])
    }
    json.dump(report, sys.stdout)
    """
)


def test_installed_plugin_is_discovered_enabled_by_name_and_called(installed_target: Path) -> None:
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(installed_target), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
        # Only the fixture: the built-in plugins are exercised by their own tests.
        "KARPENTER_CAPI_PLUGINS": " acme, ",
        # stevedore caches entry points per sys.path; keep its cache out of the home directory.
        "XDG_CACHE_HOME": str(installed_target.parent / "cache"),
    }
    completed = subprocess.run(
        [sys.executable, "-c", _PROBE],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)

    assert report["enabled"] == ["acme"]
    assert report["names"] == ["acme"]
    assert report["kinds"] == [[["acme.example.com", "AcmeNodeClass"], ["acme"]]]
    # The plugin's own option (base_price=0.25) reached it through its PluginContext.
    assert report["types"] == [
        ["acme.small", {"cpu": "2", "memory": "8Gi"}, [0.5]],
        ["acme.large", {"cpu": "8", "memory": "32Gi"}, [2.0]],
    ]

    unknown = report["acme-typo"]["message"]
    assert "'acme-typo'" in unknown
    assert "not installed" in unknown
    assert "acme, acme_empty, acme_fleet, acme_gpu" in unknown  # lists what is installed
    assert report["acme_empty"]["message"] == (
        "plugin 'acme_empty' could not be loaded: acme_karpenter implements no hook"
    )

    # The class plugin kept the machines it launched, in its object, with its own option.
    assert report["fleet_zones"] == ["acme-1b", "acme-1b"]
    assert report["fleet_list"] == ["acme_fleet-nc-1", "acme_fleet-nc-2"]
    assert report["fleet_object"] == "AcmeFleet"
    assert report["fleet_restarted_list"] == []

    missing_extra = report["acme_gpu"]
    assert missing_extra["extra"] == "gpu"
    assert "'acme_gpu'" in missing_extra["message"]
    assert "acme-karpenter-plugin" in missing_extra["message"]
    assert "'acme_gpu_sdk' is not installed" in missing_extra["message"]
    assert "pip install 'acme-karpenter-plugin[gpu]'" in missing_extra["message"]

    describe = report["describe"]
    assert describe["acme"] == ["acme-karpenter-plugin", "1.2.0", True, None]
    assert describe["acme_fleet"] == ["acme-karpenter-plugin", "1.2.0", False, None]
    assert describe["generic_capi"][:3] == ["karpenter-capi", "0.1.0", False]
    assert describe["acme_gpu"][2] is True
    assert "acme-karpenter-plugin[gpu]" in describe["acme_gpu"][3]
    assert describe["capa"][2] is False
