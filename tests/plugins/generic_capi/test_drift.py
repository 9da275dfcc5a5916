"""Drift: a bound Machine whose resource's template changed says why; the NodeClass decides
whether Karpenter or CAPI replaces it."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.api.nodeclaim import NodeClaim
from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass
from karpenter_capi.core.kube import CLUSTER_API_NODE_CLASSES, MACHINE_DEPLOYMENTS, MACHINE_SETS
from karpenter_capi.plugins.generic_capi.drift import (
    DRIFT_REMEDIATION_ANNOTATION,
    REASON_BOOTSTRAP,
    REASON_INFRASTRUCTURE,
    REASON_MACHINE_SET,
    REASON_ROLLOUT_STRATEGY,
    REASON_VERSION,
)
from tests.plugins.generic_capi.env import SHAPES, Env, names, new_env

INFRA = "infrastructure.cluster.x-k8s.io"
BOOTSTRAP = "bootstrap.cluster.x-k8s.io"


def drifted(env: Env, name: str) -> str | None:
    nodeclass = ClusterAPINodeClass.model_validate(env.api.get(CLUSTER_API_NODE_CLASSES, "default"))
    return env.plugins.is_drifted(NodeClaim.model_validate(env.claim(name)), nodeclass)


def ref(env: Env, group: str, kind: str, name: str) -> dict[str, str]:
    if env.shape == "v1beta2":
        return {"apiGroup": group, "kind": kind, "name": name}
    return {"apiVersion": f"{group}/v1beta1", "kind": kind, "name": name}


def launched(env: Env, kind: str = "MachineDeployment") -> None:
    if kind == "MachineDeployment":
        env.deployment("md-a")
    else:
        env.machine_set("ms-a")
    for name in names("nc", 2):
        env.nodeclaim(name)
    env.launch_all(names("nc", 2))


CHANGES: list[tuple[str, Any, str]] = [
    ("version", lambda env: {"version": "v1.32.0"}, REASON_VERSION),
    (
        "infrastructure",
        lambda env: {"infrastructureRef": ref(env, INFRA, "DockerMachineTemplate", "workers-v2")},
        REASON_INFRASTRUCTURE,
    ),
    (
        "bootstrap",
        lambda env: {
            "bootstrap": {"configRef": ref(env, BOOTSTRAP, "KubeadmConfigTemplate", "workers-v2")}
        },
        REASON_BOOTSTRAP,
    ),
    ("anything else", lambda env: {"failureDomain": "zone-b"}, REASON_MACHINE_SET),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("change", "spec", "reason"), CHANGES, ids=[c[0] for c in CHANGES])
def test_a_machine_deployment_template_change_is_drift(
    shape: str, change: str, spec: Any, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = new_env(shape, monkeypatch=monkeypatch)
    launched(env)
    assert drifted(env, "nc-000") is None

    env.api.patch(
        env.res(MACHINE_DEPLOYMENTS),
        "md-a",
        {"spec": {"template": {"spec": spec(env)}}},
        "default",
    )
    env.driver.run_until_quiet()

    assert drifted(env, "nc-000") == reason
    assert drifted(env, "nc-001") == reason


def test_leaving_rollouts_to_cluster_api_reports_no_drift(env: Env) -> None:
    launched(env)
    env.api.patch(
        CLUSTER_API_NODE_CLASSES,
        "default",
        {"metadata": {"annotations": {DRIFT_REMEDIATION_ANNOTATION: "ClusterAPI"}}},
    )
    env.api.patch(
        env.res(MACHINE_DEPLOYMENTS),
        "md-a",
        {"spec": {"template": {"spec": {"version": "v1.32.0"}}}},
        "default",
    )
    env.driver.run_until_quiet()

    assert drifted(env, "nc-000") is None


def cloned(env: Env, kind: str, group: str, machine: str, template: str) -> None:
    """The object CAPI clones for a Machine, with the annotations naming its template."""
    resource = env.api.resource(group, "v1beta1", kind.lower() + "s")
    env.api.create(
        resource,
        {
            "apiVersion": f"{group}/v1beta1",
            "kind": kind,
            "metadata": {
                "name": machine,
                "annotations": {
                    "cluster.x-k8s.io/cloned-from-name": template,
                    "cluster.x-k8s.io/cloned-from-groupkind": f"{kind}Template.{group}",
                },
            },
        },
        "default",
    )


def crd(group: str, kind: str) -> dict[str, Any]:
    plural = kind.lower() + "s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural},
            "versions": [
                {
                    "name": "v1beta1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


@pytest.mark.parametrize("shape", SHAPES)
def test_a_machine_set_edited_in_place_is_drift_by_what_its_machines_were_cloned_from(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = new_env(shape, monkeypatch=monkeypatch)
    env.api.apply_manifests([crd(INFRA, "DockerMachine"), crd(BOOTSTRAP, "KubeadmConfig")])
    launched(env, "MachineSet")
    for machines in env.bindings().values():
        cloned(env, "DockerMachine", INFRA, machines[0], "workers")
        cloned(env, "KubeadmConfig", BOOTSTRAP, machines[0], "workers")
    assert drifted(env, "nc-000") is None

    new_infra = ref(env, INFRA, "DockerMachineTemplate", "workers-v2")
    env.api.patch(
        env.res(MACHINE_SETS),
        "ms-a",
        {"spec": {"template": {"spec": {"infrastructureRef": new_infra}}}},
        "default",
    )
    assert drifted(env, "nc-000") == REASON_INFRASTRUCTURE

    old_infra = ref(env, INFRA, "DockerMachineTemplate", "workers")
    new_config = ref(env, BOOTSTRAP, "KubeadmConfigTemplate", "other")
    env.api.patch(
        env.res(MACHINE_SETS),
        "ms-a",
        {
            "spec": {
                "template": {
                    "spec": {"infrastructureRef": old_infra, "bootstrap": {"configRef": new_config}}
                }
            }
        },
        "default",
    )
    assert drifted(env, "nc-000") == REASON_BOOTSTRAP


def test_a_nodeclaim_without_a_machine_is_not_drifted(env: Env) -> None:
    env.deployment("md-a")
    env.nodeclaim("nc")
    env.launch("nc")

    assert drifted(env, "nc") is None


def ready_message(env: Env) -> str:
    for condition in env.api.get(CLUSTER_API_NODE_CLASSES, "default")["status"]["conditions"]:
        if condition["type"] == "Ready":
            return str(condition["message"])
    raise AssertionError("no Ready condition")


def test_the_nodeclass_status_warns_about_deployments_that_roll_out_on_their_own(
    env: Env,
) -> None:
    env.deployment("md-rolling", strategy="RollingUpdate")
    env.deployment("md-on-delete", strategy="OnDelete", zone="zone-b")
    env.nodeclaim("nc")

    env.launch("nc")  # asks for the instance types, which writes the status

    message = ready_message(env)
    assert "md-rolling: rollout strategy RollingUpdate" in message
    assert "md-on-delete: rollout strategy" not in message
    reasons = {e["reason"] for e in env.api.list(env.api.resource("", "v1", "events")).items}
    assert REASON_ROLLOUT_STRATEGY in reasons


def test_no_warning_when_cluster_api_does_the_rollouts(env: Env) -> None:
    env.api.patch(
        CLUSTER_API_NODE_CLASSES,
        "default",
        {"metadata": {"annotations": {DRIFT_REMEDIATION_ANNOTATION: "ClusterAPI"}}},
    )
    env.deployment("md-rolling", strategy="RollingUpdate")
    env.nodeclaim("nc")

    env.launch("nc")

    assert "RollingUpdate" not in ready_message(env)


def test_the_status_is_not_written_when_the_plugin_option_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # ``nodeclass_status=false`` leaves the NodeClass status to someone else (a dry run, where
    # the context says ``dry_run``, writes nothing either).
    env = new_env(monkeypatch=monkeypatch, options={"nodeclass_status": "false"})
    env.deployment("md-rolling", strategy="RollingUpdate")
    env.nodeclaim("nc")

    env.launch("nc")

    assert not (env.api.get(CLUSTER_API_NODE_CLASSES, "default").get("status") or {}).get(
        "conditions"
    )
    assert env.plugin_workload.writes == []
