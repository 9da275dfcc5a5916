"""The Helm chart, rendered by Helm's own engine with each documented combination of values.

Beyond the shape of the objects, the controller's container is started the way the kubelet
would start it: its environment resolved from the Secrets and the downward API, its Secret
volumes mounted, and its args handed to the real `karpenter-capi run` parser and cluster
configuration. A flag the CLI does not know, a token that leaks onto the command line or a
kubeconfig mounted where the args do not look fails here, not in a user's cluster.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from karpenter_capi.cli.entry import build_parser
from karpenter_capi.cli.options import KNOWN_FEATURE_GATES, parse_feature_gates
from karpenter_capi.core.kube.config import ClusterConfig, cluster_config_from_args
from karpenter_capi.core.plugin_host import parse_plugin_options

from .chart_env import (
    CHART_DIR,
    HELM_LABELS,
    NAMESPACE,
    SECRETS,
    VALUES_COMBINATIONS,
    chart_crds,
    controller_container,
    find,
    helm,
    kinds,
    kubelet_environment,
    render,
)

RBAC_KINDS = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def start_like_kubelet(
    objects: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[argparse.Namespace, ClusterConfig, dict[str, str]]:
    """Parse the controller's args with the environment and mounts its pod would get."""
    container = controller_container(objects)
    pod = find(objects, "Deployment")["spec"]["template"]["spec"]
    env = kubelet_environment(container, pod_namespace=NAMESPACE)
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    args = [str(a) for a in container["args"]]
    for mount in container.get("volumeMounts", []):
        secret = volumes[mount["name"]].get("secret")
        if secret is None:
            continue
        assert mount.get("readOnly") is True, f"secret volume {mount['name']} is writable"
        local = tmp_path / mount["name"]
        local.mkdir()
        data = SECRETS[secret["secretName"]]
        for item in secret.get("items") or [{"key": k, "path": k} for k in data]:
            (local / item["path"]).write_text(data[item["key"]])
        args = [a.replace(mount["mountPath"], str(local)) for a in args]
        env = {k: v.replace(mount["mountPath"], str(local)) for k, v in env.items()}
    # The parser reads its defaults from the environment when it is built.
    monkeypatch.setattr(os, "environ", {"PATH": "/usr/bin:/bin", **env})
    ns = build_parser().parse_args(["run", *args])
    return ns, cluster_config_from_args(ns, env), env


def test_defaults_render_a_highly_available_restricted_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = render()
    assert kinds(objects) - RBAC_KINDS == {
        "ServiceAccount",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
    }
    deployment = find(objects, "Deployment", "karpenter-capi")
    assert deployment["metadata"]["namespace"] == NAMESPACE
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == find(objects, "ServiceAccount")["metadata"]["name"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    spread = {c["topologyKey"]: c for c in pod["topologySpreadConstraints"]}
    assert set(spread) == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    assert all(c["labelSelector"]["matchLabels"] == selector for c in spread.values())
    assert spread["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"
    # Never scheduled onto a node it launched: draining that node would evict it.
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert {"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"} in terms[
        "nodeSelectorTerms"
    ][0]["matchExpressions"]

    # The "restricted" Pod Security Standard.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = controller_container(objects)
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics"}
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "512Mi"}
    assert container["image"] == "karpenter-capi:0.1.0"

    pdb = find(objects, "PodDisruptionBudget")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}
    service = find(objects, "Service")
    assert service["spec"]["selector"] == selector
    port_names = {p["name"] for p in container["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= port_names

    ns, config, env = start_like_kubelet(objects, tmp_path, monkeypatch)
    assert ns.plugins == "generic_capi"
    assert ns.leader_elect is True
    assert ns.leader_election_namespace == NAMESPACE
    assert ns.metrics_port == 8080 == container["ports"][0]["containerPort"]
    assert (ns.batch_idle_duration, ns.batch_max_duration) == (1.0, 10.0)
    assert ns.dry_run is False
    assert parse_feature_gates(ns.feature_gates) == {"SpotToSpotConsolidation": False}
    assert config.single_cluster
    assert config.workload.in_cluster
    assert env["SYSTEM_NAMESPACE"] == env["POD_NAMESPACE"] == NAMESPACE
    assert (ns.log_level, ns.log_format) == ("info", "json")


def test_management_cluster_from_a_kubeconfig_secret_is_mounted_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = render(VALUES_COMBINATIONS["management-kubeconfig-secret"])
    _ns, config, _env = start_like_kubelet(objects, tmp_path, monkeypatch)
    assert not config.single_cluster
    assert config.management is not None
    assert config.management.kubeconfig == str(tmp_path / "management-kubeconfig" / "kubeconfig")
    assert config.management.context == "mgmt-admin"
    assert config.workload.in_cluster


def test_management_cluster_by_url_and_token_keeps_the_token_off_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = render(VALUES_COMBINATIONS["management-url-token"])
    _ns, config, _env = start_like_kubelet(objects, tmp_path, monkeypatch)
    assert config.management is not None
    assert config.management.url == "https://management.example.com:6443"
    # A mounted file, re-read when the Secret is rotated; never an env value or an argument.
    assert config.management.token is None
    assert config.management.token_file == str(tmp_path / "management-token" / "token")
    assert Path(config.management.token_file).read_text() == SECRETS["management-token"]["token"]
    assert config.management.ca_data == SECRETS["management-token"]["ca.crt"]
    container = controller_container(objects)
    assert not any("token" in a or "management" in a for a in container["args"])
    assert "KARPENTER_CAPI_MANAGEMENT_TOKEN" not in {e["name"] for e in container["env"]}
    assert "management-bearer-token" not in yaml.safe_dump_all(objects)


def test_aws_annotates_the_service_account_for_irsa_and_passes_plugin_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = render(VALUES_COMBINATIONS["aws"])
    annotations = find(objects, "ServiceAccount")["metadata"]["annotations"]
    role = "arn:aws:iam::111122223333:role/karpenter-capi"
    assert annotations == {"eks.amazonaws.com/role-arn": role}
    ns, _config, _env = start_like_kubelet(objects, tmp_path, monkeypatch)
    assert ns.plugins == "generic_capi,capa"
    assert parse_plugin_options(ns.plugin_option) == {
        "capa": {"max-pods": "58", "region": "eu-west-1"}
    }


def test_azure_workload_identity_labels_the_pods_and_annotates_the_service_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = render(VALUES_COMBINATIONS["azure"])
    annotations = find(objects, "ServiceAccount")["metadata"]["annotations"]
    assert annotations == {
        "azure.workload.identity/client-id": "11111111-2222-3333-4444-555555555555",
        "azure.workload.identity/tenant-id": "66666666-7777-8888-9999-000000000000",
    }
    template = find(objects, "Deployment")["spec"]["template"]
    assert template["metadata"]["labels"]["azure.workload.identity/use"] == "true"
    # Not in the selector: a Deployment's selector cannot change after install.
    selector = find(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    assert "azure.workload.identity/use" not in selector
    ns, _config, env = start_like_kubelet(objects, tmp_path, monkeypatch)
    assert ns.plugins == "generic_capi,capz"
    assert env["AZURE_SUBSCRIPTION_ID"] == "00000000-0000-0000-0000-000000000001"


def test_service_monitor_scrapes_the_metrics_port_of_the_service() -> None:
    objects = render(VALUES_COMBINATIONS["service-monitor"])
    monitor = find(objects, "ServiceMonitor")
    service = find(objects, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    selected = monitor["spec"]["selector"]["matchLabels"]
    assert selected.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint == {"port": "http-metrics", "path": "/metrics", "interval": "30s"}
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert "ServiceMonitor" not in kinds(render())


def _without_release_metadata(crd: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in crd["metadata"].items() if k not in ("labels", "annotations")}
    return {**crd, "metadata": meta}


def test_templated_crds_are_the_crds_directory_kept_on_uninstall() -> None:
    rendered = render(VALUES_COMBINATIONS["crds-template"])
    templated = [o for o in rendered if o["kind"] == "CustomResourceDefinition"]
    assert [_without_release_metadata(c) for c in templated] == chart_crds()
    for crd in templated:
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert crd["metadata"]["labels"]["app.kubernetes.io/instance"] == "karpenter-capi"
    assert "CustomResourceDefinition" not in kinds(render())
    unkept = render({"crds": {"template": True, "keep": False}})
    crds = [o for o in unkept if o["kind"] == "CustomResourceDefinition"]
    assert crds
    assert all("annotations" not in o["metadata"] for o in crds)


def test_extra_env_args_and_tuning_reach_the_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = render(VALUES_COMBINATIONS["extra-env-and-tuning"])
    assert find(objects, "Deployment")["spec"]["replicas"] == 3
    ns, _config, env = start_like_kubelet(objects, tmp_path, monkeypatch)
    assert env["HTTPS_PROXY"] == "http://proxy.internal:3128"
    assert env["NODE_NAME"] == "node-a"
    assert ns.workers == 8
    assert parse_feature_gates(ns.feature_gates) == {"SpotToSpotConsolidation": True}
    assert (ns.batch_idle_duration, ns.batch_max_duration) == (2.5, 30.0)
    assert ns.dry_run is True
    assert ns.leader_election_namespace == "kube-system"
    assert (ns.log_level, ns.log_format) == ("debug", "text")


def test_leader_election_off_is_passed_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = render({"leaderElection": {"enabled": False}, "replicas": 1})
    ns, _config, _env = start_like_kubelet(objects, tmp_path, monkeypatch)
    assert ns.leader_elect is False


def test_release_name_and_existing_service_account() -> None:
    objects = render(
        {"serviceAccount": {"create": False, "name": "autoscaler"}}, release="prod", namespace="ops"
    )
    assert "ServiceAccount" not in kinds(objects)
    deployment = find(objects, "Deployment", "prod-karpenter-capi")
    assert deployment["metadata"]["namespace"] == "ops"
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "autoscaler"
    assert "--leader-election-namespace=ops" in controller_container(objects)["args"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"logLevel": "verbose"}, "at '/logLevel': value must be one of 'debug', 'info'"),
        ({"logFormat": "logfmt"}, "at '/logFormat': value must be one of 'text', 'json'"),
        ({"managementCluster": {"mode": "sameCluster"}}, "at '/managementCluster/mode'"),
        ({"replica": 3}, "additional properties 'replica' not allowed"),
        ({"featureGates": {"Drift": True}}, "additional properties 'Drift' not allowed"),
        ({"managementCluster": {"mode": "urlToken"}}, "at '/managementCluster/urlToken/url'"),
        ({"aws": {"roleArn": "karpenter"}}, "at '/aws/roleArn'"),
        ({"batchMaxDuration": "10s"}, "at '/batchMaxDuration': got string, want number"),
        ({"plugins": []}, "at '/plugins'"),
    ],
)
def test_the_schema_rejects_a_bad_value_naming_it(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmValuesError) as caught:
        render(values)
    assert message in str(caught.value)


def test_the_schema_knows_exactly_the_feature_gates_and_log_levels_of_the_code() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert set(schema["properties"]["featureGates"]["properties"]) == KNOWN_FEATURE_GATES
    for level in schema["properties"]["logLevel"]["enum"]:
        assert level.upper() in logging.getLevelNamesMapping()


@pytest.mark.parametrize("combination", sorted(VALUES_COMBINATIONS))
def test_helm_lint_is_clean(combination: str) -> None:
    report = helm.lint(CHART_DIR, VALUES_COMBINATIONS[combination], strict=True)
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # 2 warning, 3 error
    assert not problems, problems
    assert report["errors"] == []


def test_every_object_carries_the_chart_labels() -> None:
    for combination in VALUES_COMBINATIONS.values():
        for obj in render(combination):
            labels = obj["metadata"].get("labels") or {}
            missing = [k for k in (*HELM_LABELS, "app.kubernetes.io/instance") if k not in labels]
            assert not missing, f"{obj['kind']} {obj['metadata']['name']} lacks {missing}"
