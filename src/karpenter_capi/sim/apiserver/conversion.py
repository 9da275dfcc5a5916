"""Conversion between a custom resource's served versions: the CRD's conversion webhook, in
process.

A CRD with ``spec.conversion.strategy: Webhook`` has kube-apiserver call a service to convert
an object between versions: on a write, from the version it was written at to the storage
version; on a read or a watch, to the version asked for. Strategy ``None`` only rewrites
``apiVersion``. The simulated cluster runs the webhooks it knows in process, found by the
service the CRD names (``spec.conversion.webhook.clientConfig.service``), so a CRD written by a
test or a manifest picks them up the same way; a CRD naming an unknown service converts as
``None`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from karpenter_capi.sim.apiserver import capi_core_versions, kubeadm_versions
from karpenter_capi.sim.apiserver.capi_core_versions import VersionOf

JsonObject = dict[str, Any]

# (object, target apiVersion) -> the object at that version. The object is a private copy the
# converter may change in place.
Converter = Callable[[JsonObject, str], JsonObject]

# Each webhook is built for a cluster: ``VersionOf`` answers which version of a kind it serves
# (CAPI's core webhook writes it into the references it converts to v1beta1).
_WEBHOOKS: dict[tuple[str, str], Callable[[VersionOf], Converter]] = {
    kubeadm_versions.WEBHOOK_SERVICE: lambda _: kubeadm_versions.convert,
    capi_core_versions.WEBHOOK_SERVICE: capi_core_versions.converter,
}


def webhook(namespace: str, name: str) -> JsonObject:
    """A CRD's ``spec.conversion`` calling the webhook of service ``namespace/name``."""
    return {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {"service": {"namespace": namespace, "name": name, "path": "/convert"}},
            "conversionReviewVersions": ["v1", "v1beta1"],
        },
    }


def converter_of(crd: JsonObject, version_of: VersionOf) -> Converter | None:
    """The in-process webhook ``crd`` converts through, or None (strategy ``None``)."""
    conversion = (crd.get("spec") or {}).get("conversion") or {}
    if conversion.get("strategy") != "Webhook":
        return None
    service = ((conversion.get("webhook") or {}).get("clientConfig") or {}).get("service") or {}
    build = _WEBHOOKS.get((str(service.get("namespace")), str(service.get("name"))))
    return None if build is None else build(version_of)
