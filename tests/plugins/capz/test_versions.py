"""The CAPZ version ``CAPZMachinePool`` needs (v1.17: ``delete-machine`` deletes exactly the
marked VM), read at start from clusterctl's ``Provider`` and said on the NodeClass: a
``ProviderVersionSupported`` condition, and a Warning Event when CAPZ is older."""

from __future__ import annotations

import pytest

from karpenter_capi.core.kube import CLUSTER_API_NODE_CLASSES, EVENTS, Resource
from karpenter_capi.core.kube.resources import CUSTOM_RESOURCE_DEFINITIONS, NAMESPACES
from karpenter_capi.sim.apiserver.capi_crds import crd
from tests.plugins.capz.pools_env import PoolsEnv, new_env

PROVIDERS = Resource("clusterctl.cluster.x-k8s.io", "v1alpha3", "providers", "Provider", True)


def _with_capz(version: str) -> PoolsEnv:
    env = new_env()
    env.api.create(
        CUSTOM_RESOURCE_DEFINITIONS,
        crd("clusterctl.cluster.x-k8s.io", "Provider", "providers", ("v1alpha3",), status=False),
    )
    env.api.create(NAMESPACES, {"metadata": {"name": "capz-system"}})
    env.api.create(
        PROVIDERS,
        {
            "apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3",
            "kind": "Provider",
            "metadata": {"name": "infrastructure-azure", "namespace": "capz-system"},
            "type": "InfrastructureProvider",
            "providerName": "azure",
            "version": version,
        },
        "capz-system",
    )
    return env


def _condition(env: PoolsEnv) -> dict[str, str] | None:
    nodeclass = env.api.get(CLUSTER_API_NODE_CLASSES, "azure")
    found = [
        c
        for c in (nodeclass.get("status") or {}).get("conditions") or []
        if c["type"] == "ProviderVersionSupported"
    ]
    return found[0] if found else None


def test_an_older_capz_is_said_on_the_nodeclass_naming_the_minimum() -> None:
    env = _with_capz("v1.15.2")
    nodeclass, nodepool = env.models()
    env.plugins.instance_types(nodeclass, nodepool)
    condition = _condition(env)
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "ProviderTooOld")
    assert condition["message"] == (
        "spec.launch.mode CAPZMachinePool needs CAPZ v1.17.0 or later, so that a scale-down "
        "deletes exactly the VM of the NodeClaim being deleted; clusterctl Provider "
        "capz-system/infrastructure-azure is v1.15.2: upgrade CAPZ (clusterctl upgrade apply)"
    )
    [event] = [e for e in env.api.list(EVENTS).items if e["reason"] == "ProviderTooOld"]
    assert event["type"] == "Warning"
    assert event["involvedObject"]["name"] == "azure"
    # Checked once per process: the next rounds neither read nor write again.
    env.plugins.instance_types(nodeclass, nodepool)
    assert len([e for e in env.api.list(EVENTS).items if e["reason"] == "ProviderTooOld"]) == 1


@pytest.mark.parametrize("version", ["v1.17.0", "v1.21.3"])
def test_a_recent_capz_is_supported(version: str) -> None:
    env = _with_capz(version)
    nodeclass, nodepool = env.models()
    assert env.plugins.instance_types(nodeclass, nodepool)
    condition = _condition(env)
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "ProviderSupported")


def test_without_a_clusterctl_provider_nothing_is_said() -> None:
    env = new_env()
    nodeclass, nodepool = env.models()
    assert env.plugins.instance_types(nodeclass, nodepool)
    assert _condition(env) is None
