"""Cluster API's kubeadm bootstrap kinds at each served version: a schema per version and
conversion between them, as CAPI's CRDs and conversion webhook have it.

``KubeadmConfig`` and ``KubeadmConfigTemplate`` are served as v1beta2 (storage) and v1beta1;
``nodeRegistration.kubeletExtraArgs`` is a map in v1beta1 and a list of ``{name, value}`` in
v1beta2 (cluster-api api/bootstrap/kubeadm/v1beta2/conversion.go: ConvertToArgs,
ConvertFromArgs). An object written at one version reads back converted at the other, and a
body in the other version's shape is refused with the API server's schema message.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.kube.errors import Invalid
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.sim.apiserver import InMemoryAPIServer

GROUP = "bootstrap.cluster.x-k8s.io"
V1BETA1 = Resource(GROUP, "v1beta1", "kubeadmconfigs", "KubeadmConfig", True)
V1BETA2 = Resource(GROUP, "v1beta2", "kubeadmconfigs", "KubeadmConfig", True)
TEMPLATES_V1BETA1 = Resource(
    GROUP, "v1beta1", "kubeadmconfigtemplates", "KubeadmConfigTemplate", True
)
TEMPLATES_V1BETA2 = Resource(
    GROUP, "v1beta2", "kubeadmconfigtemplates", "KubeadmConfigTemplate", True
)
ARGS_FIELD = "spec.joinConfiguration.nodeRegistration.kubeletExtraArgs"


@pytest.fixture
def capi(apiserver: InMemoryAPIServer) -> InMemoryAPIServer:
    apiserver.register_cluster_api()
    return apiserver


def config(version: str, args: Any, name: str = "pool") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "KubeadmConfig",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": args}},
            "files": [{"path": "/etc/x", "content": "kept as is"}],
        },
    }


def args_of(obj: dict[str, Any]) -> Any:
    spec = obj["spec"]
    if obj["kind"] == "KubeadmConfigTemplate":
        spec = spec["template"]["spec"]
    return spec["joinConfiguration"]["nodeRegistration"]["kubeletExtraArgs"]


def test_written_at_v1beta2_reads_back_as_a_map_at_v1beta1(capi: InMemoryAPIServer) -> None:
    listed = [{"name": "max-pods", "value": "30"}, {"name": "cloud-provider", "value": "external"}]
    capi.create(V1BETA2, config("v1beta2", listed), "default")
    old = capi.get(V1BETA1, "pool", "default")
    assert old["apiVersion"] == f"{GROUP}/v1beta1"
    assert args_of(old) == {"max-pods": "30", "cloud-provider": "external"}
    assert old["spec"]["files"] == [{"path": "/etc/x", "content": "kept as is"}]
    assert args_of(capi.get(V1BETA2, "pool", "default")) == listed
    assert [args_of(o) for o in capi.list(V1BETA1, "default").items] == [
        {"max-pods": "30", "cloud-provider": "external"}
    ]
    watch = capi.watch(V1BETA1, "default", timeout_seconds=0)
    [event] = list(watch)
    assert args_of(event.object) == {"max-pods": "30", "cloud-provider": "external"}


def test_written_at_v1beta1_is_stored_as_a_sorted_list(capi: InMemoryAPIServer) -> None:
    created = capi.create(
        V1BETA1, config("v1beta1", {"max-pods": "30", "cloud-provider": "external"}), "default"
    )
    assert args_of(created) == {"max-pods": "30", "cloud-provider": "external"}
    assert args_of(capi.get(V1BETA2, "pool", "default")) == [
        {"name": "cloud-provider", "value": "external"},
        {"name": "max-pods", "value": "30"},
    ]
    # A merge patch at v1beta1 adds a key to the map it sees.
    capi.patch(
        V1BETA1,
        "pool",
        {"spec": {"joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": {"v": "2"}}}}},
        "default",
    )
    assert args_of(capi.get(V1BETA2, "pool", "default"))[-1] == {"name": "v", "value": "2"}


def test_v1beta2_shape_written_at_v1beta1_is_refused(capi: InMemoryAPIServer) -> None:
    listed = [{"name": "cloud-provider", "value": "external"}]
    with pytest.raises(Invalid) as refused:
        capi.create(V1BETA1, config("v1beta1", listed), "default")
    assert str(refused.value) == (
        f'KubeadmConfig.{GROUP} "pool" is invalid: {ARGS_FIELD}: Invalid value: "array": '
        f'{ARGS_FIELD} in body must be of type object: "array"'
    )


def test_v1beta1_shape_written_at_v1beta2_is_refused(capi: InMemoryAPIServer) -> None:
    with pytest.raises(Invalid) as refused:
        capi.create(V1BETA2, config("v1beta2", {"max-pods": "30"}), "default")
    assert f'{ARGS_FIELD}: Invalid value: "object": {ARGS_FIELD} in body must be of type ' \
        'array: "object"' in str(refused.value)  # fmt: skip


def test_v1beta2_names_must_be_unique(capi: InMemoryAPIServer) -> None:
    twice = [{"name": "max-pods", "value": "30"}, {"name": "max-pods", "value": "40"}]
    with pytest.raises(Invalid) as refused:
        capi.create(V1BETA2, config("v1beta2", twice), "default")
    assert "kubeletExtraArgs name must be unique" in str(refused.value)


def test_template_converts_under_spec_template_spec(capi: InMemoryAPIServer) -> None:
    template = {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "KubeadmConfigTemplate",
        "metadata": {"name": "workers", "namespace": "default"},
        "spec": {
            "template": {
                "spec": {
                    "joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": {"a": "1"}}}
                }
            }
        },
    }
    capi.create(TEMPLATES_V1BETA1, template, "default")
    assert args_of(capi.get(TEMPLATES_V1BETA2, "workers", "default")) == [
        {"name": "a", "value": "1"}
    ]
    template["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"][
        "kubeletExtraArgs"
    ] = [{"name": "a", "value": "1"}]
    template["metadata"]["name"] = "wrong"
    with pytest.raises(Invalid):
        capi.create(TEMPLATES_V1BETA1, template, "default")
