"""The Cluster API core version the generic_capi plugin needs (v1.0: the first release serving
``cluster.x-k8s.io/v1beta1``), read at start from clusterctl's ``Provider`` and said on the
NodeClass: a ``ClusterAPIVersionSupported`` condition, and a Warning Event when older."""

from __future__ import annotations

import logging

import pytest

from karpenter_capi.core.kube import CLUSTER_API_NODE_CLASSES, EVENTS, Resource
from karpenter_capi.core.kube.resources import CUSTOM_RESOURCE_DEFINITIONS, NAMESPACES
from karpenter_capi.sim.apiserver.capi_crds import crd
from tests.plugins.generic_capi.env import Env

PROVIDERS = Resource("clusterctl.cluster.x-k8s.io", "v1alpha3", "providers", "Provider", True)


def _install_capi(env: Env, version: str) -> None:
    env.api.create(
        CUSTOM_RESOURCE_DEFINITIONS,
        crd("clusterctl.cluster.x-k8s.io", "Provider", "providers", ("v1alpha3",), status=False),
    )
    env.api.create(NAMESPACES, {"metadata": {"name": "capi-system"}})
    env.api.create(
        PROVIDERS,
        {
            "apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3",
            "kind": "Provider",
            "metadata": {"name": "cluster-api", "namespace": "capi-system"},
            "type": "CoreProvider",
            "providerName": "cluster-api",
            "version": version,
        },
        "capi-system",
    )


def _condition(env: Env) -> dict[str, str] | None:
    nodeclass = env.api.get(CLUSTER_API_NODE_CLASSES, "default")
    found = [
        c
        for c in (nodeclass.get("status") or {}).get("conditions") or []
        if c["type"] == "ClusterAPIVersionSupported"
    ]
    return found[0] if found else None


def _judge(env: Env) -> None:
    nodeclass, nodepool = env._models()
    env.plugins.instance_types(nodeclass, nodepool)


def _too_old_events(env: Env) -> list[dict[str, object]]:
    return [e for e in env.api.list(EVENTS).items if e["reason"] == "ClusterAPITooOld"]


def test_an_older_cluster_api_is_said_on_the_nodeclass_naming_the_minimum(env: Env) -> None:
    env.deployment("md-a")
    _install_capi(env, "v0.4.7")
    _judge(env)
    condition = _condition(env)
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "ClusterAPITooOld")
    assert condition["message"] == (
        "the generic_capi plugin needs Cluster API v1.0.0 or later, the first release serving "
        "cluster.x-k8s.io/v1beta1, the oldest API version it reads and writes; clusterctl "
        "Provider capi-system/cluster-api is v0.4.7: upgrade Cluster API (clusterctl upgrade "
        "apply)"
    )
    [event] = _too_old_events(env)
    assert event["type"] == "Warning"
    assert event["involvedObject"]["name"] == "default"  # type: ignore[index]
    # Checked once per process: the next rounds neither read nor write again.
    _judge(env)
    assert len(_too_old_events(env)) == 1
    # The Ready condition the inventory writes keeps the version condition.
    assert _condition(env) == condition


@pytest.mark.parametrize("version", ["v1.0.0", "v1.11.2"])
def test_a_recent_cluster_api_is_supported(env: Env, version: str) -> None:
    env.deployment("md-a")
    _install_capi(env, version)
    _judge(env)
    condition = _condition(env)
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "ClusterAPISupported")
    assert condition["message"] == (
        f"Cluster API {version} (clusterctl Provider capi-system/cluster-api) is at least v1.0.0"
    )
    assert _too_old_events(env) == []


def test_without_a_clusterctl_provider_nothing_is_said(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    env.deployment("md-a")
    with caplog.at_level(logging.INFO):
        _judge(env)
        _judge(env)
    assert _condition(env) is None
    skipped = [r for r in caplog.records if "minimum version not checked" in r.getMessage()]
    assert [r.getMessage() for r in skipped] == [
        "Cluster API version unknown (no clusterctl Provider): minimum version not checked"
    ]
    assert skipped[0].levelno == logging.INFO
