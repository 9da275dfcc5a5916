"""The shipped RBAC allows every request the controller makes, and nothing it does not make.

``rbac_recording`` runs the controller through shipped scenarios (and variants for what none
of them reaches), two clusters, capa's price ConfigMap, Event repeats and leader election,
recording every request it made through ``AuditingClient``. The rules checked are those a user
installs: the Kustomize base (``deploy/kustomize/base/rbac.yaml``) and
``deploy/rbac/management-cluster.yaml`` always, and the Helm chart's RBAC templates rendered by
Helm's own engine (helm-python-sdk) when it is installed and the chart is present.

Two failures are possible, each listing what is wrong: a recorded request no rule allows (the
controller would get 403 in a real cluster), or a rule granting a (group, resource, verb) that
no recorded request needed (more privilege than the code uses), unless it is one of
``JUSTIFIED`` with its reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from karpenter_capi.sim.apiserver.audit import (
    MANAGEMENT_CLUSTER,
    WORKLOAD_CLUSTER,
    AuditLog,
    AuditRecord,
)

from .rbac_policy import Grant, allowed, granted_triples, grants_for, needed_by
from .rbac_recording import (
    LEASE_NAMESPACE,
    ONE_CLUSTER,
    record_capa,
    record_event_repeats,
    record_leader_election,
    record_scenarios,
    record_two_clusters,
)

REPO = Path(__file__).resolve().parents[2]
KUSTOMIZE_RBAC = REPO / "deploy" / "kustomize" / "base" / "rbac.yaml"
MANAGEMENT_RBAC = REPO / "deploy" / "rbac" / "management-cluster.yaml"
CHART_DIR = REPO / "deploy" / "charts" / "karpenter-capi"
RBAC_TEMPLATES = ("rbac-workload.yaml", "rbac-management.yaml", "rbac-leader-election.yaml")

SERVICE_ACCOUNT = "karpenter-capi"
NAMESPACE = "karpenter-capi"

JUSTIFIED: dict[tuple[str, str, str], str] = {}
"""Granted (group, resource, verb) no recorded request needed, each with why it is granted.

Empty: every rule of the shipped roles is needed by a request the runs make. A rule added for
a code path the runs do not reach must be listed here with that code path named.
"""

NOT_AUTHORIZED_BY_ROLES = {
    "get": "API discovery (GET /apis/<group>, core.kube.discovery's Cluster API version "
    "check): granted to every authenticated user by the built-in system:discovery ClusterRole",
}
"""Non-resource requests, by verb, that the shipped roles leave to Kubernetes' defaults."""


@pytest.fixture(scope="module")
def recorded() -> Iterator[list[AuditRecord]]:
    log = AuditLog()
    record_scenarios(log)
    record_two_clusters(log)
    record_event_repeats(log)
    record_leader_election(log)
    with pytest.MonkeyPatch.context() as monkeypatch:
        record_capa(log, monkeypatch)
    return log.records()


def _documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _grants(objects: Iterable[Mapping[str, Any]]) -> list[Grant]:
    return grants_for(objects, SERVICE_ACCOUNT, NAMESPACE)


def _resource_requests(records: Iterable[AuditRecord]) -> list[AuditRecord]:
    """Requests on resources; the non-resource ones must be those Kubernetes grants anyway."""
    found = []
    for record in records:
        if record.path is None:
            found.append(record)
        else:
            unexpected = f"unexpected non-resource request: {record.describe()}"
            assert record.verb in NOT_AUTHORIZED_BY_ROLES, unexpected
            assert record.path.startswith("/apis/"), unexpected
    return found


def _denied(grants: list[Grant], records: Iterable[AuditRecord]) -> list[str]:
    return sorted({r.describe() for r in _resource_requests(records) if not allowed(grants, r)})


def _unneeded(grants: list[Grant], records: list[AuditRecord]) -> list[str]:
    requests = _resource_requests(records)
    found = set()
    for grant in grants:
        for triple in granted_triples(grant):
            if triple in JUSTIFIED:
                continue
            if not any(needed_by(grant, triple, request) for request in requests):
                group, resource, verb = triple
                found.add(f"{grant.source}: {verb} {resource} in group {group!r}")
    return sorted(found)


def _in(cluster: str, records: list[AuditRecord]) -> list[AuditRecord]:
    return [r for r in records if r.cluster == cluster]


# ------------------------------------------------------------------- what the runs reached


def test_the_runs_reach_every_cluster_and_kind_of_request(recorded: list[AuditRecord]) -> None:
    """The recording is only worth what it covers: both clusters, every write the controller
    does (eviction and scale subresources included), the Lease, the price ConfigMap."""
    clusters = {r.cluster for r in recorded}
    assert clusters == {ONE_CLUSTER, WORKLOAD_CLUSTER, MANAGEMENT_CLUSTER}
    seen = {(r.verb, r.group, r.resource, r.subresource) for r in recorded}
    for expected in [
        ("create", "", "pods", "eviction"),
        ("create", "karpenter.sh", "nodeclaims", None),
        ("delete", "karpenter.sh", "nodeclaims", None),
        ("patch", "cluster.x-k8s.io", "machinedeployments", "scale"),
        ("patch", "cluster.x-k8s.io", "machinesets", "scale"),
        ("patch", "cluster.x-k8s.io", "machinepools", "scale"),
        ("delete", "cluster.x-k8s.io", "machines", None),
        ("update", "coordination.k8s.io", "leases", None),
        ("update", "", "configmaps", None),
    ]:
        assert expected in seen, f"no run made {expected}"
    lease = [r for r in recorded if r.resource == "leases"]
    assert {r.namespace for r in lease} == {LEASE_NAMESPACE}
    prices = [r for r in recorded if r.resource == "configmaps"]
    assert {r.cluster for r in prices} == {MANAGEMENT_CLUSTER}


# ------------------------------------------------------- the Kustomize base and management file


def test_one_cluster_rbac_allows_every_request(recorded: list[AuditRecord]) -> None:
    """The Kustomize base (its own management cluster) lets every request through."""
    grants = _grants(_documents(KUSTOMIZE_RBAC.read_text()))
    assert _denied(grants, recorded) == []


def test_one_cluster_rbac_grants_nothing_unused(recorded: list[AuditRecord]) -> None:
    grants = _grants(_documents(KUSTOMIZE_RBAC.read_text()))
    assert _unneeded(grants, recorded) == []


def _workload_only(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The base without the management cluster's roles, as the separate-management overlay."""
    return [o for o in objects if "-management" not in o["metadata"]["name"]]


def test_separate_clusters_each_allow_their_own_requests(recorded: list[AuditRecord]) -> None:
    """With two clusters, the workload cluster's roles allow what went to the workload
    cluster, deploy/rbac/management-cluster.yaml what went to the management cluster."""
    workload = _grants(_workload_only(_documents(KUSTOMIZE_RBAC.read_text())))
    management = _grants(_documents(MANAGEMENT_RBAC.read_text()))
    assert _denied(workload, _in(WORKLOAD_CLUSTER, recorded)) == []
    assert _denied(management, _in(MANAGEMENT_CLUSTER, recorded)) == []
    # Neither grants the other cluster's resources.
    assert _denied(workload, _in(MANAGEMENT_CLUSTER, recorded)) != []
    assert _denied(management, _in(WORKLOAD_CLUSTER, recorded)) != []


def test_separate_clusters_grant_nothing_unused(recorded: list[AuditRecord]) -> None:
    workload = _grants(_workload_only(_documents(KUSTOMIZE_RBAC.read_text())))
    management = _grants(_documents(MANAGEMENT_RBAC.read_text()))
    assert _unneeded(workload + management, recorded) == []


def test_the_management_file_holds_the_same_rules_as_the_base() -> None:
    def rules(objects: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            o["metadata"]["name"]: o["rules"]
            for o in objects
            if o["kind"] in ("Role", "ClusterRole") and "-management" in o["metadata"]["name"]
        }

    base = rules(_documents(KUSTOMIZE_RBAC.read_text()))
    assert base
    assert rules(_documents(MANAGEMENT_RBAC.read_text())) == base


def test_no_rule_grants_every_verb_and_leases_stay_in_one_namespace() -> None:
    objects = _documents(KUSTOMIZE_RBAC.read_text()) + _documents(MANAGEMENT_RBAC.read_text())
    grants = _grants(objects)
    assert grants
    assert all("*" not in g.rule.verbs for g in grants)
    for grant in grants:
        assert not ("" in grant.rule.api_groups and "*" in grant.rule.resources), grant.source
        if "leases" in grant.rule.resources or "configmaps" in grant.rule.resources:
            assert grant.namespace == NAMESPACE, f"{grant.source} is not confined to a namespace"
            if grant.rule.verbs - {"create"}:
                # Only the Lease has a fixed name; the price ConfigMaps are named by region.
                assert grant.rule.resource_names or "configmaps" in grant.rule.resources


# --------------------------------------------------------------------------------- the chart


def _render(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    if not (CHART_DIR / "Chart.yaml").exists():
        pytest.skip("the Helm chart (deploy/charts/karpenter-capi/Chart.yaml) is not here")
    with helm.Chart.load(CHART_DIR) as chart:
        rendered = chart.render(dict(values), name=SERVICE_ACCOUNT, namespace=NAMESPACE)
    return [
        doc
        for path, text in sorted(rendered.items())
        if path.rsplit("/", 1)[-1] in RBAC_TEMPLATES
        for doc in _documents(text)
    ]


def _by_name(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def _without_helm_labels(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for obj in objects:
        labels = obj["metadata"].get("labels") or {}
        for key in ("helm.sh/chart", "app.kubernetes.io/version", "app.kubernetes.io/managed-by"):
            labels.pop(key, None)
    return objects


def test_chart_defaults_render_the_kustomize_base_rbac(recorded: list[AuditRecord]) -> None:
    """The chart's RBAC with default values is the base's (so the checks above hold for it),
    and allows every request with nothing unused."""
    chart = _without_helm_labels(_render({}))
    assert _by_name(chart) == _by_name(_documents(KUSTOMIZE_RBAC.read_text()))
    grants = _grants(chart)
    assert _denied(grants, recorded) == []
    assert _unneeded(grants, recorded) == []


@pytest.mark.parametrize("mode", ["kubeconfigSecret", "urlToken"])
def test_chart_with_a_separate_management_cluster_renders_workload_rights_only(
    mode: str, recorded: list[AuditRecord]
) -> None:
    values = {
        "managementCluster": {
            "mode": mode,
            "kubeconfigSecret": {"name": "management-kubeconfig"},
            "urlToken": {"url": "https://mgmt:6443", "tokenSecret": {"name": "management-token"}},
        }
    }
    chart = _grants(_render(values))
    assert _denied(chart, _in(WORKLOAD_CLUSTER, recorded)) == []
    # The management cluster's rights (its price ConfigMaps too) belong in that cluster.
    assert not any("configmaps" in g.rule.resources for g in chart)
    management_groups = {"cluster.x-k8s.io", "infrastructure.cluster.x-k8s.io"}
    assert not any(g.rule.api_groups & management_groups for g in chart)


def test_chart_leader_election_namespace_and_switches() -> None:
    elsewhere = _render({"leaderElection": {"namespace": "kube-system"}})
    [role] = [o for o in elsewhere if o["kind"] == "Role" and "leader" in o["metadata"]["name"]]
    assert role["metadata"]["namespace"] == "kube-system"
    [binding] = [
        o for o in elsewhere if o["kind"] == "RoleBinding" and "leader" in o["metadata"]["name"]
    ]
    assert binding["metadata"]["namespace"] == "kube-system"
    assert binding["subjects"][0]["namespace"] == NAMESPACE
    without = _render({"leaderElection": {"enabled": False}})
    assert without
    assert not any("leader" in o["metadata"]["name"] for o in without)
    assert _render({"rbac": {"create": False}}) == []
