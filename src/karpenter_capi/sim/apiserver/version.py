"""The release the in-memory API server claims to be, as ``/version`` answers it.

Clients gate features on it (kubectl prints it; the controller nominates planned pods' nodes
only on a control plane whose kube-scheduler honours that by default, v1.35 and later). The
simulator's kube-scheduler stand-in follows v1.35's nominated-node rules, so the API server
says v1.35. A test that wants an older control plane sets ``InMemoryAPIServer.version_info``.
"""

from __future__ import annotations

from typing import Final

from karpenter_capi.core.kube.client import JsonObject

VERSION_INFO: Final[JsonObject] = {
    "major": "1",
    "minor": "35",
    "gitVersion": "v1.35.0",
    "gitCommit": "66452049f3d692768c39c797b21b793dce80314e",
    "gitTreeState": "clean",
    "buildDate": "2025-12-17T12:32:06Z",
    "goVersion": "go1.25.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}
