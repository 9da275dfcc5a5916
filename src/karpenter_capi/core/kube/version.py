"""Which Kubernetes release the API server is, from its ``/version`` document.

Some of what the controller does depends on the control plane's release rather than on what
it serves: kube-scheduler's feature gates, for one, are not discoverable, but their defaults
follow the release. ``gitVersion`` (``v1.35.0``, ``v1.35.2-eks-1234``, ``v1.36.0-rc.1``) is
what kubectl prints and what every distribution keeps; ``major``/``minor`` (``"1"``,
``"35+"``) are the fallback when a build stamps only those.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from karpenter_capi.core.kube.client import KubeClient

_GIT_VERSION = re.compile(r"^v?(\d+)\.(\d+)")
_NUMBER = re.compile(r"^(\d+)")


def parse_version(info: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(major, minor)`` of a ``/version`` document, or None when it says neither."""
    found = _GIT_VERSION.match(str(info.get("gitVersion") or "").strip())
    if found:
        return int(found.group(1)), int(found.group(2))
    major = _NUMBER.match(str(info.get("major") or "").strip())
    minor = _NUMBER.match(str(info.get("minor") or "").strip())
    if major and minor:
        return int(major.group(1)), int(minor.group(1))
    return None


def server_version(client: KubeClient) -> tuple[tuple[int, int] | None, str]:
    """The server's ``(major, minor)`` (None when unknown) and its ``gitVersion`` as said."""
    info = client.server_version()
    return parse_version(info), str(info.get("gitVersion") or "unknown")
