"""The release the in-memory API server claims to be, as ``/version`` answers it.

Clients gate features on it. kubectl 1.32 and later send typed objects (``kubectl create
secret``) as protobuf to a server of their own minor release or newer, and the HTTP front
decodes JSON only, so by default the server says v1.31: every kubectl still talks JSON to it.

The simulator's control plane (the scenario runner, ``simulate --demo``) plays v1.35
(``SIMULATED_CONTROL_PLANE``): its kube-scheduler stand-in follows v1.35's nominated-node rules,
and the controller nominates planned pods only where kube-scheduler honours that by default
(``core.provisioning.nominations``). A test sets ``InMemoryAPIServer.version_info`` for another.
"""

from __future__ import annotations

from typing import Final

from karpenter_capi.core.kube.client import JsonObject

_BUILD: Final[JsonObject] = {
    "gitTreeState": "clean",
    "compiler": "gc",
    "platform": "linux/amd64",
}

VERSION_INFO: Final[JsonObject] = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0",
    "gitCommit": "9edcffcde5595e8a5b1a35f88c421764e575afce",
    "buildDate": "2024-08-13T07:28:49Z",
    "goVersion": "go1.22.5",
    **_BUILD,
}
"""What ``karpenter-capi apiserver`` and a bare ``InMemoryAPIServer`` say."""

SIMULATED_CONTROL_PLANE: Final[JsonObject] = {
    "major": "1",
    "minor": "35",
    "gitVersion": "v1.35.0",
    "gitCommit": "66452049f3d692768c39c797b21b793dce80314e",
    "buildDate": "2025-12-17T12:32:06Z",
    "goVersion": "go1.25.5",
    **_BUILD,
}
"""What the simulator's control plane says: the release its kube-scheduler stand-in plays."""
