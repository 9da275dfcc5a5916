"""The controller's Kubernetes writes, per launched node: what a launch mode costs the API.

Launch modes differ in how many objects they write for one node: a MachineDeployment launch
raises a replica count and labels a Machine; a native launch also creates the pool (or the
adopted Machine and its infrastructure object) the node comes from. The server's own request
counts cannot tell the controller's writes from the emulated cluster's (Cluster API, kubelet,
scheduler), so the runner hands the controller an ``AuditingClient`` and this module sums what
it recorded. A launched node is a NodeClaim that got a provider ID during the run.
"""

from __future__ import annotations

from typing import Any, Final

from karpenter_capi.core.kube.resources import MACHINE_POOLS
from karpenter_capi.sim.apiserver.audit import AuditLog, AuditRecord

WRITE_VERBS: Final = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def _key(record: AuditRecord) -> str:
    what = record.resource + (f"/{record.subresource}" if record.subresource else "")
    return f"{record.verb} {what}"


def controller_writes(log: AuditLog, launched_nodes: int) -> dict[str, Any]:
    """``total`` writes, ``launched_nodes``, ``per_launched_node`` (``None`` without a launch),
    ``machine_pools_created`` and ``by_request`` (``"<verb> <resource>[/<subresource>]"`` to
    count), every subresource write (status, scale, eviction) included."""
    by_request: dict[str, int] = {}
    pools = 0
    for record in log.records():
        if record.verb not in WRITE_VERBS or record.path is not None:
            continue
        count = log.count(record)
        key = _key(record)
        by_request[key] = by_request.get(key, 0) + count
        if (
            record.verb == "create"
            and record.subresource is None
            and (record.group, record.resource) == (MACHINE_POOLS.group, MACHINE_POOLS.plural)
        ):
            pools += count
    total = sum(by_request.values())
    return {
        "total": total,
        "launched_nodes": launched_nodes,
        "per_launched_node": round(total / launched_nodes, 2) if launched_nodes else None,
        "machine_pools_created": pools,
        "by_request": dict(sorted(by_request.items(), key=lambda item: (-item[1], item[0]))),
    }
