"""The NodeClaim a proposed claim becomes, and the line that says it was created.

Provisioning, disruption replacements and static NodePools all create NodeClaims the way
upstream Karpenter's provisioner does; this is that one body and that one log line, kept apart
from the provisioning round so each creator builds the same object.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.resources import NODECLAIMS, NODEPOOLS
from karpenter_capi.core.observability.logs import first, ref
from karpenter_capi.core.scheduling.podspec import pod_key
from karpenter_capi.core.scheduling.solver_io import ProposedNodeClaim, compatible_offerings

# The provisioner's logger: ``created nodeclaim`` is one of the round's lines, filtered with them.
log = logging.getLogger("karpenter_capi.core.provisioning.provisioner")

NODEPOOL_HASH_VERSION: Final = "v3"
NOMINATED_PODS_MAX_CHARS: Final = 32 * 1024
"""Past this the pods a claim is launched for are not written on it (a claim of hundreds of
long-named pods would eat into the API's 256 KiB for all annotations); it is then planned from
memory only, as before, and a restart packs its pods afresh."""


def _without_hostname(claim: ProposedNodeClaim) -> list[dict[str, Any]]:
    return [r for r in claim.requirements.to_dicts() if r["key"] != wellknown.LABEL_HOSTNAME]


def log_created(
    name: str, claim: ProposedNodeClaim, *, dry_run: bool = False, level: int = logging.INFO
) -> None:
    """Upstream's ``created nodeclaim`` line (``would create nodeclaim`` in a dry run)."""
    log.log(
        level,
        "would create nodeclaim" if dry_run else "created nodeclaim",
        extra={
            "NodePool": ref(claim.nodepool.name),
            "NodeClaim": ref(name),
            "requests": claim.requests.to_dict(),
            "instance-types": first([it.name for it in claim.instance_types]),
            "pod-count": len(claim.pods),
        },
    )


def template_hashes(models: Iterable[NodePool | None]) -> dict[str, str]:
    """Each NodePool's ``template_hash`` by name, once for all the NodeClaims a round makes of
    it (``None``: a NodePool not validated, which ``nodeclaim_body`` hashes itself)."""
    return {m.name: m.template_hash() for m in {id(m): m for m in models if m}.values()}


def nodeclaim_body(
    raw_pool: Mapping[str, Any],
    claim: ProposedNodeClaim,
    *,
    template_hash: str | None = None,
) -> JsonObject:
    """The NodeClaim Karpenter would create for a proposed claim of this NodePool.

    ``template_hash``: the NodePool's ``NodePool.template_hash()`` when the caller has it (a
    round creating twenty NodeClaims of one NodePool validated and hashed it twenty times)."""
    meta = raw_pool["metadata"]
    template = (raw_pool.get("spec") or {}).get("template") or {}
    spec = template.get("spec") or {}
    name = str(meta["name"])
    requirements = _without_hostname(claim)
    capacity_types = sorted(
        {
            offering.capacity_type
            for instance_type in claim.instance_types
            for offering in compatible_offerings(instance_type, claim.requirements)
        }
    )
    requirements = [r for r in requirements if r["key"] != wellknown.LABEL_CAPACITY_TYPE]
    requirements.append(
        {"key": wellknown.LABEL_CAPACITY_TYPE, "operator": "In", "values": capacity_types}
    )
    requirements.sort(key=lambda r: (r["key"], r["operator"]))
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    labels.update(
        (key, value)
        for key, value in claim.requirements.labels().items()
        if key != wellknown.LABEL_HOSTNAME
    )
    labels[wellknown.LABEL_NODEPOOL] = name
    annotations = dict((template.get("metadata") or {}).get("annotations") or {})
    if template_hash is None:
        template_hash = NodePool.model_validate(raw_pool).template_hash()
    annotations[wellknown.ANNOTATION_NODEPOOL_HASH] = template_hash
    annotations[wellknown.ANNOTATION_NODEPOOL_HASH_VERSION] = NODEPOOL_HASH_VERSION
    nominated = ",".join(sorted(pod_key(p) for p in claim.pods))
    if nominated and len(nominated) <= NOMINATED_PODS_MAX_CHARS:
        annotations[wellknown.ANNOTATION_NOMINATED_PODS] = nominated
    body: JsonObject = {
        "apiVersion": NODECLAIMS.api_version,
        "kind": NODECLAIMS.kind,
        "metadata": {
            "generateName": f"{name}-",
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": NODEPOOLS.api_version,
                    "kind": NODEPOOLS.kind,
                    "name": name,
                    "uid": meta.get("uid", ""),
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "requirements": requirements,
            "resources": {"requests": claim.requests.to_dict()},
            "nodeClassRef": spec.get("nodeClassRef"),
        },
    }
    for key in ("taints", "startupTaints", "expireAfter", "terminationGracePeriod"):
        if spec.get(key) is not None:
            body["spec"][key] = spec[key]
    return body
