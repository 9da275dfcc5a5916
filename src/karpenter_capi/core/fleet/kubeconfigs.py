"""Reading a workload cluster's kubeconfig out of the Secret Cluster API writes for it.

Cluster API stores every Cluster's admin kubeconfig in the Secret ``<cluster>-kubeconfig`` of
the Cluster's namespace, under the key ``value`` (base64 in ``.data``, as every Secret). Fleet
mode reaches each workload cluster through it. Everything that can be wrong with that Secret
(missing, no ``value``, not base64, not YAML, no server) is a ``KubeconfigProblem`` whose
message names the Secret and what to fix: it becomes an Event on the Cluster, never a
traceback, and the other clusters go on.

The fingerprint is a digest of the decoded document: a rotated Secret (new content) rebuilds
the cluster's controllers; a rewrite with the same content (new resourceVersion only) does not.
"""

from __future__ import annotations

import base64
import binascii
import copy
import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from karpenter_capi.core.kube.client import JsonObject

SECRET_SUFFIX: Final = "-kubeconfig"
SECRET_KEY: Final = "value"

REASON_MISSING: Final = "KubeconfigMissing"
REASON_INVALID: Final = "KubeconfigInvalid"


def secret_name(cluster: str) -> str:
    """The name of the Secret holding ``cluster``'s kubeconfig."""
    return f"{cluster}{SECRET_SUFFIX}"


class KubeconfigProblem(Exception):
    """The kubeconfig Secret cannot be used; ``reason`` is the Event reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Kubeconfig:
    """A usable kubeconfig document and what identifies its content."""

    document: Mapping[str, Any] = field(repr=False)
    fingerprint: str
    server: str
    """The API server URL of the current context's cluster (for messages and tests)."""


def read_kubeconfig(secret: JsonObject | None, namespace: str, cluster: str) -> Kubeconfig:
    """The kubeconfig in ``secret`` (``None``: not found) for Cluster ``namespace/cluster``."""
    where = f"Secret {namespace}/{secret_name(cluster)}"
    if secret is None:
        raise KubeconfigProblem(
            REASON_MISSING,
            f"{where} not found: Cluster API writes it once the control plane is up; a "
            "Secret written by hand needs the label cluster.x-k8s.io/cluster-name="
            f"{cluster} to be seen",
        )
    encoded = (secret.get("data") or {}).get(SECRET_KEY)
    if not isinstance(encoded, str) or not encoded:
        raise KubeconfigProblem(REASON_INVALID, f"{where} has no key {SECRET_KEY!r} in its data")
    decoded = _decode(encoded)
    if isinstance(decoded, str):
        raise KubeconfigProblem(REASON_INVALID, f"{where}: {decoded}")
    document, fingerprint, server = decoded
    # A copy: the connect function may keep or adjust what it is given.
    return Kubeconfig(copy.deepcopy(document), fingerprint, server)


@functools.lru_cache(maxsize=1024)
def _decode(encoded: str) -> tuple[Mapping[str, Any], str, str] | str:
    """``(document, fingerprint, server)``, or what is wrong with it.

    Cached on the Secret's data: every sync reads every served Cluster's Secret, and parsing
    the YAML (about 12 ms) each time would cost a 100-cluster fleet a second of CPU per sync.
    """
    try:
        raw = base64.b64decode(encoded, validate=True)
        document = yaml.safe_load(raw.decode("utf-8"))
    except (binascii.Error, ValueError):
        return f"data.{SECRET_KEY} is not base64-encoded UTF-8"
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        return f"data.{SECRET_KEY} is not a YAML kubeconfig{at}"
    server = _server(document)
    if server is None:
        return (
            f"data.{SECRET_KEY} is not a kubeconfig with a cluster server URL "
            "(expected clusters[].cluster.server)"
        )
    return document, hashlib.sha256(raw).hexdigest(), server


def _server(document: object) -> str | None:
    """The server of the current context's cluster, else of the only cluster."""
    if not isinstance(document, Mapping):
        return None
    clusters = {
        str(entry.get("name")): entry.get("cluster") or {}
        for entry in document.get("clusters") or []
        if isinstance(entry, Mapping) and isinstance(entry.get("cluster") or {}, Mapping)
    }
    wanted: object = None
    for context in document.get("contexts") or []:
        if isinstance(context, Mapping) and context.get("name") == document.get("current-context"):
            wanted = (context.get("context") or {}).get("cluster")
    chosen = clusters.get(str(wanted)) if wanted is not None else None
    if chosen is None and len(clusters) == 1:
        chosen = next(iter(clusters.values()))
    server = (chosen or {}).get("server")
    return (
        server if isinstance(server, str) and server.startswith(("https://", "http://")) else None
    )


__all__ = [
    "REASON_INVALID",
    "REASON_MISSING",
    "SECRET_KEY",
    "SECRET_SUFFIX",
    "Kubeconfig",
    "KubeconfigProblem",
    "read_kubeconfig",
    "secret_name",
]
