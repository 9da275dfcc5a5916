"""Enabling capa without boto3 is a clear error naming the ``aws`` extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from karpenter_capi.core.plugin_host import load_plugins
from karpenter_capi.plugins.capa.plugin import CapaHooks


def test_capa_loads_with_boto3_installed() -> None:
    loaded = dict(load_plugins(["generic_capi", "capa"]))
    assert loaded["capa"] is CapaHooks


def test_enabling_capa_without_boto3_names_the_aws_extra() -> None:
    # A fresh interpreter where boto3 cannot be imported, as without the extra.
    script = textwrap.dedent(
        """
        import sys
        sys.modules["boto3"] = None
        from karpenter_capi.core.plugin_host import PluginLoadError, load_plugins
        try:
            load_plugins(["capa"])
        except PluginLoadError as exc:
            print(exc)
        else:
            print("loaded")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    message = done.stdout.strip()
    assert "capa" in message
    assert "boto3" in message
    assert "pip install 'karpenter-capi[aws]'" in message
