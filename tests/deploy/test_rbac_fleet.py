"""The chart's fleet-mode RBAC allows every request a fleet-mode controller makes, and no more.

``rbac_fleet.record_fleet`` records a fleet's life (two replicas sharding through Leases,
workload clusters provisioning and deprovisioning, a Cluster appearing, one paused, a rotated
and a malformed kubeconfig Secret). The rules checked are what a user installs, rendered by
Helm's own engine: in the management cluster the chart with ``fleet.enabled`` and
``fleet.namespaces`` set to the served namespaces; in each workload cluster the chart with
``workloadRBAC.only``. Each must allow every request that went to its cluster, grant no
(group, resource, verb) no recorded request needed (unless ``JUSTIFIED``), keep Secrets to the
served namespaces and Leases to the controller's own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from karpenter_capi.sim.apiserver.audit import MANAGEMENT_CLUSTER, AuditLog, AuditRecord

from .chart_env import NAMESPACE, render
from .rbac_fleet import SERVED, record_fleet, served_namespaces, workload_label
from .rbac_policy import Grant, allowed, granted_triples, grants_for, needed_by
from .rbac_recording import LEASE_NAMESPACE
from .test_rbac_least_privilege import _denied

SERVICE_ACCOUNT = "karpenter-capi"
RBAC_KINDS = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")

_SINGLE = "reached by test_rbac_least_privilege's runs; in fleet mode each cluster runs the same "
JUSTIFIED: dict[tuple[str, str, str], str] = {
    ("cluster.x-k8s.io", "machines", "delete"): _SINGLE
    + "controllers, and an expired Machine at its MachineDeployment's minimum is deleted",
    ("cluster.x-k8s.io", "machinepools", "get"): _SINGLE + "controllers over MachinePools",
    ("cluster.x-k8s.io", "machinepools/scale", "patch"): _SINGLE + "controllers over MachinePools",
    ("cluster.x-k8s.io", "machinesets/scale", "patch"): _SINGLE + "controllers over MachineSets",
    ("cluster.x-k8s.io", "clusters", "get"): _SINGLE + "controllers, which read a Cluster by name",
    ("", "configmaps", "get"): _SINGLE + "capa and capz, which keep price ConfigMaps",
    ("", "configmaps", "create"): _SINGLE + "capa and capz, which keep price ConfigMaps",
    ("", "configmaps", "update"): _SINGLE + "capa and capz, which keep price ConfigMaps",
    ("", "pods/eviction", "create"): _SINGLE + "controllers, which drain a node with pods",
    ("", "pods/status", "patch"): _SINGLE + "controllers, which mark pods they nominate",
    ("", "events", "patch"): _SINGLE + "EventRecorder, which counts a repeated Event",
    ("karpenter.cluster.x-k8s.io", "clusterapinodeclasses", "get"): _SINGLE
    + "controllers: rounds read NodeClasses from the cache, but a NodeClass status write that "
    "conflicts reads it again, and static NodePools read theirs",
    ("coordination.k8s.io", "leases", "get"): "core.fleet.sharding re-reads a shard Lease after "
    "a write conflict (two replicas racing for it), which the stepped run does not interleave",
}
"""Granted (group, resource, verb) the fleet run does not need, each with why it is granted.

The per-cluster controllers' rights (the management ClusterRole, as in mode ``same``; the
workload ClusterRole, as in one cluster) are the single-cluster ones, which
test_rbac_least_privilege proves needed; only what the fleet run itself misses is listed."""


@pytest.fixture(scope="module")
def recorded() -> list[AuditRecord]:
    log = AuditLog()
    record_fleet(log)
    return log.records()


def _management(records: Iterable[AuditRecord]) -> list[AuditRecord]:
    return [r for r in records if r.cluster == MANAGEMENT_CLUSTER]


def _workloads(records: Iterable[AuditRecord]) -> list[AuditRecord]:
    return [r for r in records if r.cluster.startswith("workload/")]


def _fleet_grants(namespaces: Iterable[str] = served_namespaces()) -> list[Grant]:
    values = {"fleet": {"enabled": True, "namespaces": list(namespaces)}, "replicas": 2}
    rbac = [o for o in render(values) if o["kind"] in RBAC_KINDS]
    return grants_for(rbac, SERVICE_ACCOUNT, NAMESPACE)


def _workload_grants() -> list[Grant]:
    # The kubeconfig's identity, here a ServiceAccount so the evaluator can follow it.
    subject = {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}
    values: dict[str, Any] = {"workloadRBAC": {"only": True, "subjects": [subject]}}
    return grants_for(render(values), SERVICE_ACCOUNT, NAMESPACE)


def _unneeded(grants: list[Grant], records: list[AuditRecord]) -> list[str]:
    requests = [r for r in records if r.path is None]
    found = set()
    for grant in grants:
        for triple in granted_triples(grant):
            if triple in JUSTIFIED:
                continue
            if not any(needed_by(grant, triple, request) for request in requests):
                group, resource, verb = triple
                found.add(f"{grant.source}: {verb} {resource} in group {group!r}")
    return sorted(found)


def test_the_fleet_run_reaches_every_kind_of_request(recorded: list[AuditRecord]) -> None:
    """Only worth what it covers: several workload clusters, the kubeconfig Secrets of every
    served namespace, the shard Leases created, renewed and deleted, Events on Clusters."""
    clusters = {r.cluster for r in recorded}
    assert clusters >= {MANAGEMENT_CLUSTER, *(workload_label(n) for n in ("alpha", "beta"))}
    management = _management(recorded)
    seen = {(r.verb, r.group, r.resource) for r in management}
    for verb in ("create", "update", "delete", "list"):
        assert (verb, "coordination.k8s.io", "leases") in seen, verb
    # The killed replica's membership Lease, deleted by the other once expired.
    deleted = {r.name for r in management if r.resource == "leases" and r.verb == "delete"}
    assert "karpenter-capi-member-replica-a" in deleted
    assert ("watch", "cluster.x-k8s.io", "clusters") in seen
    assert ("patch", "cluster.x-k8s.io", "machinedeployments") in seen
    secrets = {(r.verb, r.namespace) for r in management if r.resource == "secrets"}
    assert secrets == {(v, ns) for v in ("list", "watch") for ns in served_namespaces()}
    events = {r.namespace for r in management if r.resource == "events" and r.verb == "create"}
    assert events == set(served_namespaces())
    writes = {(r.verb, r.resource) for r in _workloads(recorded)}
    assert {("create", "nodeclaims"), ("delete", "nodeclaims"), ("delete", "nodes")} <= writes


def test_the_fleet_chart_allows_every_management_request(recorded: list[AuditRecord]) -> None:
    assert _denied(_fleet_grants(), _management(recorded)) == []


def test_workload_rbac_only_allows_every_workload_request(recorded: list[AuditRecord]) -> None:
    assert _denied(_workload_grants(), _workloads(recorded)) == []


def test_the_fleet_chart_grants_nothing_unused(recorded: list[AuditRecord]) -> None:
    assert _unneeded(_fleet_grants(), _management(recorded)) == []


def test_workload_rbac_only_grants_nothing_unused(recorded: list[AuditRecord]) -> None:
    assert _unneeded(_workload_grants(), _workloads(recorded)) == []


def test_secrets_are_readable_only_in_the_served_namespaces(recorded: list[AuditRecord]) -> None:
    """The controller reads Secrets only where it serves Clusters, and nothing else would let
    it: a Secret elsewhere (the controller's own namespace, kube-system) is denied."""
    grants = _fleet_grants()
    management = _management(recorded)
    assert {r.namespace for r in management if r.resource == "secrets"} == set(served_namespaces())
    for namespace in (NAMESPACE, "kube-system", "elsewhere", None):
        for verb in ("get", "list", "watch"):
            name = "other-kubeconfig" if verb == "get" else None
            request = AuditRecord(MANAGEMENT_CLUSTER, verb, "", "secrets", None, namespace, name)
            assert not allowed(grants, request), request.describe()
    # Serving one namespace fewer takes its Secrets away.
    fewer = _fleet_grants(served_namespaces()[1:])
    assert _denied(fewer, management)
    assert SERVED[0] in " ".join(_denied(fewer, management))


def test_leases_are_granted_only_in_the_controllers_namespace(
    recorded: list[AuditRecord],
) -> None:
    leases = [r for r in _management(recorded) if r.resource == "leases"]
    assert {r.namespace for r in leases} == {LEASE_NAMESPACE}
    grants = _fleet_grants()
    for grant in grants:
        if "leases" in grant.rule.resources:
            assert grant.namespace == LEASE_NAMESPACE, grant.source
    elsewhere = AuditRecord(
        MANAGEMENT_CLUSTER, "create", "coordination.k8s.io", "leases", None, "team-alpha", None
    )
    assert not allowed(grants, elsewhere)
