"""The Helm chart in fleet mode (issue 28 item 5), rendered by Helm's own engine.

In the management cluster the controller gets exactly the fleet's rights besides the Cluster
API ones it always had: Clusters read and watched, Secrets read only in the served namespaces
(a Role per namespace: RBAC cannot narrow to the ``-kubeconfig`` suffix), Leases in its own
namespace, Events. The workload rights are not granted there; ``workloadRBAC.only`` renders
them for each workload cluster, bound to the kubeconfig's identity. Fleet off, nothing changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from karpenter_capi.cli.entry import build_parser

from .chart_env import NAMESPACE, VALUES_COMBINATIONS, controller_container, find, helm, render

RBAC_KINDS = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
FLEET = VALUES_COMBINATIONS["fleet"]
SERVED = ("default", "kube-public")


def _rules(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str | None], list[Any]]:
    """(kind, name, namespace) of every Role and ClusterRole, to its rules."""
    return {
        (o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")): o["rules"]
        for o in objects
        if o["kind"] in ("ClusterRole", "Role")
    }


def _grants(rules: list[dict[str, Any]], resource: str) -> set[str]:
    return {v for r in rules if resource in r["resources"] for v in r["verbs"]}


def test_fleet_mode_grants_exactly_clusters_secrets_per_namespace_leases_and_events() -> None:
    objects = render(FLEET)
    roles = _rules(objects)

    assert roles[("ClusterRole", "karpenter-capi-fleet", None)] == [
        {
            "apiGroups": ["cluster.x-k8s.io"],
            "resources": ["clusters"],
            "verbs": ["list", "watch"],
        },
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "list", "patch"]},
    ]
    assert roles[("Role", "karpenter-capi-fleet-leases", NAMESPACE)] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "create", "update", "delete"],
        }
    ]
    secrets = {key: rules for key, rules in roles.items() if _grants(rules, "secrets")}
    assert secrets == {
        ("Role", "karpenter-capi-fleet-kubeconfigs", namespace): [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch"]}
        ]
        for namespace in SERVED
    }
    # Every role is bound to the controller's ServiceAccount, in the role's own namespace.
    for binding in (o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "karpenter-capi", "namespace": NAMESPACE}
        ]
        role = (
            binding["roleRef"]["kind"],
            binding["roleRef"]["name"],
            binding["metadata"].get("namespace"),
        )
        assert role in roles
    # No leader election (the Clusters' Leases replace it), and the workload rights belong in
    # the workload clusters, not here.
    assert ("Role", "karpenter-capi-leader-election", NAMESPACE) not in roles
    assert ("ClusterRole", "karpenter-capi-workload", None) not in roles
    # The Cluster API rights of the management cluster are those of mode "same".
    assert (
        roles[("ClusterRole", "karpenter-capi-management", None)]
        == _rules(render())[("ClusterRole", "karpenter-capi-management", None)]
    )


def test_fleet_off_renders_no_fleet_object() -> None:
    for values in ({}, {"fleet": {"enabled": False, "namespaces": list(SERVED)}}):
        objects = render(values)
        names = {o["metadata"]["name"] for o in objects}
        assert not any("fleet" in name for name in names), names
        assert "karpenter-capi-workload" in names
        assert "karpenter-capi-leader-election" in names
        assert not any(_grants(rules, "secrets") for rules in _rules(objects).values())
        assert not any(a.startswith("--fleet") for a in controller_container(objects)["args"])


def test_fleet_mode_passes_its_flags_and_the_lease_namespace() -> None:
    values = {**FLEET, "leaderElection": {"namespace": "karpenter-leases"}}
    objects = render(values)
    container = controller_container(objects)
    args = container["args"]
    assert args[args.index("--fleet") :][:6] == [
        "--fleet",
        "--fleet-cluster-selector=karpenter.cluster.x-k8s.io/fleet=on",
        "--fleet-namespace=default",
        "--fleet-namespace=kube-public",
        "--fleet-shards",
        "--no-leader-elect",
    ]
    assert not any(a.startswith("--leader-election") for a in args)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["LEADER_ELECTION_NAMESPACE"] == "karpenter-leases"
    assert find(objects, "Role", "karpenter-capi-fleet-leases")["metadata"]["namespace"] == (
        "karpenter-leases"
    )
    assert find(objects, "Deployment")["spec"]["replicas"] == 3

    single = render({"fleet": {**FLEET["fleet"], "shards": False}, "replicas": 1})
    assert "--no-fleet-shards" in controller_container(single)["args"]


def test_the_fleet_args_are_the_run_commands_flags(tmp_path: Path) -> None:
    parser = build_parser()
    if "--fleet" not in parser.format_help() and "--fleet" not in _run_help(parser):
        pytest.skip("`run --fleet` is not in this tree yet (the fleet helper adds it)")
    args = [str(a) for a in controller_container(render(FLEET))["args"]]
    ns = parser.parse_args(["run", *args])
    assert ns.fleet is True


def _run_help(parser: Any) -> str:
    for action in parser._subparsers._group_actions:  # argparse has no public accessor
        run = action.choices.get("run")
        if run is not None:
            return str(run.format_help())
    return ""


def test_workload_rbac_only_renders_the_workload_rights_for_the_kubeconfigs_identity() -> None:
    objects = render(VALUES_COMBINATIONS["workload-rbac"])
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objects) == [
        ("ClusterRole", "karpenter-capi-workload"),
        ("ClusterRoleBinding", "karpenter-capi-workload"),
    ]
    default = render()
    # Exactly the single-cluster workload rules, nothing of the management cluster's.
    assert (
        find(objects, "ClusterRole")["rules"]
        == find(default, "ClusterRole", "karpenter-capi-workload")["rules"]
    )
    assert find(objects, "ClusterRoleBinding")["subjects"] == [
        {"kind": "User", "name": "karpenter-capi", "apiGroup": "rbac.authorization.k8s.io"}
    ]
    sa = render(
        {
            "workloadRBAC": {
                "only": True,
                "subjects": [{"kind": "ServiceAccount", "name": "fleet", "namespace": "ops"}],
            }
        }
    )
    assert find(sa, "ClusterRoleBinding")["subjects"] == [
        {"kind": "ServiceAccount", "name": "fleet", "namespace": "ops"}
    ]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"fleet": {"enabled": True}}, "fleet.namespaces is required with fleet.enabled"),
        (
            {"fleet": {"enabled": True, "namespaces": ["a"], "shards": False}},
            "fleet.shards false makes one replica serve every Cluster: set replicas to 1",
        ),
        (
            {
                "fleet": {"enabled": True, "namespaces": ["a"]},
                "managementCluster": {
                    "mode": "kubeconfigSecret",
                    "kubeconfigSecret": {"name": "m"},
                },
            },
            "managementCluster.mode must be same",
        ),
        ({"workloadRBAC": {"only": True}}, "workloadRBAC.subjects is required"),
        ({"fleet": {"enabled": True, "namespaces": ["Not_A_Namespace"]}}, "/fleet/namespaces/0"),
    ],
)
def test_a_fleet_setting_that_cannot_work_fails_the_install_naming_it(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmError) as caught:
        render(values)
    assert message in str(caught.value)
