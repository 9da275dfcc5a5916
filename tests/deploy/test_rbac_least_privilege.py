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

from .rbac_native import (
    record_capa_fleet,
    record_capz_pools_one_cluster,
    record_capz_pools_two_clusters,
)
from .rbac_policy import Grant, allowed, granted_triples, grants_for, needed_by
from .rbac_recording import (
    LEASE_NAMESPACE,
    MANAGEMENT_GROUPS,
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
NATIVE_OVERLAY_RBAC = {
    "capa": REPO / "deploy" / "kustomize" / "overlays" / "aws" / "rbac-capa-fleet.yaml",
    "capz": REPO / "deploy" / "kustomize" / "overlays" / "azure" / "rbac-capz-machinepool.yaml",
}
"""Each native launch mode's optional roles, as the Kustomize overlay adds them."""
MODES = ("capa", "capz")

SERVICE_ACCOUNT = "karpenter-capi"
NAMESPACE = "karpenter-capi"

JUSTIFIED: dict[tuple[str, str, str], str] = {}
"""Granted (group, resource, verb) no recorded request needed, each with why it is granted.

Empty: every rule of the shipped roles is needed by a request the runs make. A rule added for
a code path the runs do not reach must be listed here with that code path named.
"""

NOT_AUTHORIZED_BY_ROLES = {
    "get": "API discovery (GET /apis/<group>, core.kube.discovery's Cluster API version "
    "check) and GET /version (core.provisioning.nominations' mode): granted to every "
    "authenticated user by the built-in system:discovery and system:public-info-viewer "
    "ClusterRoles",
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


@pytest.fixture(scope="module")
def native() -> Iterator[dict[str, list[AuditRecord]]]:
    """Each native launch mode's requests, in the one-cluster and two-cluster layouts."""
    logs = {mode: AuditLog() for mode in MODES}
    with pytest.MonkeyPatch.context() as monkeypatch:
        for layout in ("one cluster", "two clusters"):
            record_capa_fleet(logs["capa"], monkeypatch, layout)
    record_capz_pools_one_cluster(logs["capz"])
    record_capz_pools_two_clusters(logs["capz"])
    return {mode: log.records() for mode, log in logs.items()}


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
            assert record.path.startswith("/apis/") or record.path == "/version", unexpected
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
        ("patch", "", "pods", "status"),
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
    # Events on Cluster API objects (a left-out MachineDeployment) go to their own cluster.
    events = [r for r in _in(MANAGEMENT_CLUSTER, recorded) if r.resource == "events"]
    assert {(r.verb, r.group) for r in events} >= {("create", "")}


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
    assert _by_name(chart) == _by_name(_without_helm_labels(_render(_native_values(()))))
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


# ---------------------------------------------------------------------- native launch modes

COMBINATIONS = [(), ("capa",), ("capz",), ("capa", "capz")]


def _native_values(on: Iterable[str]) -> dict[str, Any]:
    return {"nativeLaunch": {mode: mode in on for mode in MODES}}


def _optional_blocks(text: str) -> dict[str, list[dict[str, Any]]]:
    """The commented-out documents of deploy/rbac/management-cluster.yaml, by mode, as a user
    gets them by uncommenting a block (between its ``[begin optional: MODE]`` and
    ``[end optional: MODE]`` lines)."""
    blocks: dict[str, list[str]] = {}
    mode = None
    for line in text.splitlines():
        if line.startswith("# [begin optional: "):
            mode = line.removeprefix("# [begin optional: ").rstrip("]")
            blocks[mode] = []
        elif line.startswith("# [end optional: "):
            mode = None
        elif mode is not None:
            assert line == "#" or line.startswith("# "), line
            blocks[mode].append(line[2:])
    return {mode: _documents("\n".join(lines)) for mode, lines in blocks.items()}


def _with_modes(on: Iterable[str], recorded: list[AuditRecord], native: Any) -> list[AuditRecord]:
    return [*recorded, *(r for mode in on for r in native[mode])]


def _check_modes(
    grants: list[Grant],
    on: tuple[str, ...],
    recorded: list[AuditRecord],
    native: dict[str, list[AuditRecord]],
) -> None:
    """Every request of the base runs and of the modes turned on is allowed, nothing granted
    goes unused by them, and each mode turned off would be refused."""
    needed = _with_modes(on, recorded, native)
    assert _denied(grants, needed) == []
    assert _unneeded(grants, needed) == []
    for mode in set(MODES) - set(on):
        assert _denied(grants, native[mode]) != [], f"{mode} is off but allowed"


def test_the_native_runs_reach_each_modes_writes(native: dict[str, list[AuditRecord]]) -> None:
    """Both layouts, and the writes each mode makes to record its launches in Cluster API."""
    for mode, records in native.items():
        clusters = {r.cluster for r in records}
        assert clusters == {ONE_CLUSTER, WORKLOAD_CLUSTER, MANAGEMENT_CLUSTER}, mode
    expected = {
        "capa": [
            ("create", "cluster.x-k8s.io", "machines", None),
            ("delete", "cluster.x-k8s.io", "machines", None),
            ("create", "infrastructure.cluster.x-k8s.io", "awsmachines", None),
            ("create", "bootstrap.cluster.x-k8s.io", "kubeadmconfigs", None),
            ("get", "", "secrets", None),
        ],
        "capz": [
            ("create", "cluster.x-k8s.io", "machinepools", None),
            ("patch", "cluster.x-k8s.io", "machinepools", None),
            ("delete", "cluster.x-k8s.io", "machinepools", None),
            ("patch", "cluster.x-k8s.io", "machinepools", "scale"),
            ("patch", "cluster.x-k8s.io", "machines", None),
            ("create", "infrastructure.cluster.x-k8s.io", "azuremachinepools", None),
            ("delete", "infrastructure.cluster.x-k8s.io", "azuremachinepools", None),
            ("create", "bootstrap.cluster.x-k8s.io", "kubeadmconfigs", None),
            ("delete", "bootstrap.cluster.x-k8s.io", "kubeadmconfigs", None),
        ],
    }
    for mode, writes in expected.items():
        seen = {(r.verb, r.group, r.resource, r.subresource) for r in native[mode]}
        for write in writes:
            assert write in seen, f"no {mode} run made {write}"
    # The Cluster API objects go to the management cluster, the NodeClasses come from the
    # workload one.
    for records in native.values():
        two = [r for r in records if r.cluster != ONE_CLUSTER]
        assert all(r.group != "karpenter.cluster.x-k8s.io" for r in _in(MANAGEMENT_CLUSTER, two))
        assert all(r.group not in MANAGEMENT_GROUPS for r in _in(WORKLOAD_CLUSTER, two))


@pytest.mark.parametrize("on", COMBINATIONS, ids=lambda on: "+".join(on) or "none")
def test_chart_grants_each_native_mode_exactly_when_on(
    on: tuple[str, ...], recorded: list[AuditRecord], native: dict[str, list[AuditRecord]]
) -> None:
    _check_modes(_grants(_render(_native_values(on))), on, recorded, native)


@pytest.mark.parametrize("on", COMBINATIONS, ids=lambda on: "+".join(on) or "none")
def test_kustomize_grants_each_native_mode_exactly_when_on(
    on: tuple[str, ...], recorded: list[AuditRecord], native: dict[str, list[AuditRecord]]
) -> None:
    """The base with the overlays' optional role files of the modes turned on."""
    objects = _documents(KUSTOMIZE_RBAC.read_text())
    for mode in on:
        objects += _documents(NATIVE_OVERLAY_RBAC[mode].read_text())
    _check_modes(_grants(objects), on, recorded, native)


@pytest.mark.parametrize("on", COMBINATIONS, ids=lambda on: "+".join(on) or "none")
def test_management_file_grants_each_native_mode_exactly_when_uncommented(
    on: tuple[str, ...], recorded: list[AuditRecord], native: dict[str, list[AuditRecord]]
) -> None:
    """Two clusters: the workload cluster's roles and deploy/rbac/management-cluster.yaml
    with the optional blocks of the modes turned on uncommented."""
    text = MANAGEMENT_RBAC.read_text()
    management = _documents(text)
    blocks = _optional_blocks(text)
    assert sorted(blocks) == sorted(MODES)
    for mode in on:
        management += blocks[mode]
    workload = _grants(_workload_only(_documents(KUSTOMIZE_RBAC.read_text())))
    management_grants = _grants(management)
    needed = _with_modes(on, recorded, native)
    assert _denied(workload, _in(WORKLOAD_CLUSTER, needed)) == []
    assert _denied(management_grants, _in(MANAGEMENT_CLUSTER, needed)) == []
    assert _unneeded(workload + management_grants, needed) == []
    for mode in set(MODES) - set(on):
        assert _denied(management_grants, _in(MANAGEMENT_CLUSTER, native[mode])) != [], mode


def test_the_optional_roles_are_the_same_everywhere() -> None:
    """The chart's, the overlays' and the management file's optional roles are one set."""
    chart = _without_helm_labels(_render(_native_values(MODES)))
    blocks = _optional_blocks(MANAGEMENT_RBAC.read_text())
    for mode in MODES:
        overlay = _by_name(_documents(NATIVE_OVERLAY_RBAC[mode].read_text()))
        assert overlay == _by_name(blocks[mode])
        assert overlay
        for key, obj in overlay.items():
            assert _by_name(chart)[key] == obj
