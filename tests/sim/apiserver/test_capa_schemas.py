"""CAPA's AWSMachine and AWSMachineTemplate schemas as the simulated server serves them
(cluster-api-provider-aws config/crd/bases/infrastructure.cluster.x-k8s.io_awsmachines.yaml,
..._awsmachinetemplates.yaml, v1beta2): what the capa plugin reads and writes is kept, an
unknown field pruned, a missing ``instanceType`` and the CRD's CEL rules refused with the API
server's message."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from karpenter_capi.core.kube.errors import Invalid, NotFound
from karpenter_capi.core.kube.resources import CUSTOM_RESOURCE_DEFINITIONS as CRDS
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.sim.apiserver import InMemoryAPIServer

INFRA = "infrastructure.cluster.x-k8s.io"
AWS_MACHINES = Resource(INFRA, "v1beta2", "awsmachines", "AWSMachine", True)
TEMPLATES = Resource(INFRA, "v1beta2", "awsmachinetemplates", "AWSMachineTemplate", True)


@pytest.fixture
def capi(apiserver: InMemoryAPIServer) -> InMemoryAPIServer:
    apiserver.register_cluster_api()
    return apiserver


def machine(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": AWS_MACHINES.api_version,
        "kind": "AWSMachine",
        "metadata": {"name": "m", "namespace": "default"},
        "spec": {
            "instanceType": "m5.large",
            "iamInstanceProfile": "nodes.cluster-api-provider-aws.sigs.k8s.io",
            "additionalTags": {"karpenter.sh/nodeclaim": "a"},
            "cloudInit": {"secureSecretsBackend": "secrets-manager"},
            **spec,
        },
    }


def test_what_the_plugin_writes_is_kept_and_an_unknown_field_pruned(
    capi: InMemoryAPIServer,
) -> None:
    body = machine(providerID="aws:///us-east-1a/i-0123", spotMarketOptions={}, bogus=1)
    stored = capi.create(AWS_MACHINES, body, "default")
    assert stored["spec"]["providerID"] == "aws:///us-east-1a/i-0123"
    assert stored["spec"]["spotMarketOptions"] == {}
    assert "bogus" not in stored["spec"]


def test_an_aws_machine_without_instance_type_is_refused(capi: InMemoryAPIServer) -> None:
    body = machine()
    del body["spec"]["instanceType"]
    with pytest.raises(Invalid) as refused:
        capi.create(AWS_MACHINES, body, "default")
    # As kube says it when a schema error keeps the CRD's CEL rules from running.
    assert str(refused.value) == (
        f'AWSMachine.{INFRA} "m" is invalid: [spec.instanceType: Required value, <nil>: '
        'Invalid value: "null": some validation rules were not checked because the object was '
        "invalid; correct the existing errors to complete validation]"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"marketType": "Spot"},
            "capacityReservationId may not be set when marketType is Spot",
        ),
        (
            {"spotMarketOptions": {}},
            "capacityReservationId cannot be set when spotMarketOptions is specified",
        ),
    ],
)
def test_a_capacity_reservation_on_spot_is_refused_by_the_crd(
    capi: InMemoryAPIServer, spec: dict[str, Any], message: str
) -> None:
    capi.create(AWS_MACHINES, machine(capacityReservationId="cr-1"), "default")
    body = machine(capacityReservationId="cr-1", **spec)
    body["metadata"]["name"] = "spot"
    with pytest.raises(Invalid) as refused:
        capi.create(AWS_MACHINES, body, "default")
    assert (
        str(refused.value)
        == f'AWSMachine.{INFRA} "spot" is invalid: spec: Invalid value: "object": {message}'
    )


def test_a_template_needs_its_spec_and_instance_type(capi: InMemoryAPIServer) -> None:
    template = {
        "apiVersion": TEMPLATES.api_version,
        "kind": "AWSMachineTemplate",
        "metadata": {"name": "nodes", "namespace": "default"},
        "spec": {"template": {"spec": {"instanceType": "m5.large", "sshKeyName": "k", "x": 1}}},
    }
    stored = capi.create(TEMPLATES, template, "default")
    assert stored["spec"]["template"]["spec"] == {
        "instanceType": "m5.large",
        "sshKeyName": "k",
        "hostAffinity": "default",
    }
    template["metadata"]["name"] = "wrong"
    template["spec"]["template"]["spec"] = {"sshKeyName": "k"}
    with pytest.raises(Invalid) as refused:
        capi.create(TEMPLATES, template, "default")
    assert "spec.template.spec.instanceType: Required value" in str(refused.value)


@pytest.mark.parametrize("plural", ["awsmachines", "awsmachinetemplates", "awsclusters"])
def test_capa_kinds_are_not_served_at_v1beta1(capi: InMemoryAPIServer, plural: str) -> None:
    # config/crd/bases/infrastructure.cluster.x-k8s.io_<plural>.yaml: v1beta1 served: false.
    with pytest.raises(NotFound):
        capi.list(Resource(INFRA, "v1beta1", plural, "Any", True), "default")
    crd = capi.get(CRDS, f"{plural}.{INFRA}")
    served = {v["name"]: v["served"] for v in crd["spec"]["versions"]}
    assert served == {"v1beta2": True, "v1beta1": False}


def test_the_crd_defaults_are_filled_in_on_machines_and_templates(
    capi: InMemoryAPIServer,
) -> None:
    # +kubebuilder:default markers of AWSMachineSpec, InstanceMetadataOptions and Ignition.
    stored = capi.create(
        AWS_MACHINES,
        machine(hostID="h-0123", tenancy="host"),
        "default",
    )
    assert stored["spec"]["hostAffinity"] == "default"
    template = {
        "apiVersion": TEMPLATES.api_version,
        "kind": "AWSMachineTemplate",
        "metadata": {"name": "nodes", "namespace": "default"},
        "spec": {
            "template": {
                "spec": {
                    "instanceType": "m5.large",
                    "instanceMetadataOptions": {"httpTokens": "required"},
                    "ignition": {"version": "3.4"},
                }
            }
        },
    }
    spec = capi.create(TEMPLATES, template, "default")["spec"]["template"]["spec"]
    assert spec["hostAffinity"] == "default"
    assert spec["instanceMetadataOptions"] == {
        "httpEndpoint": "enabled",
        "httpProtocolIpv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "required",
        "instanceMetadataTags": "disabled",
    }
    assert spec["ignition"] == {"version": "3.4", "storageType": "ClusterObjectStore"}


def test_a_host_affinity_outside_the_enum_is_refused(capi: InMemoryAPIServer) -> None:
    with pytest.raises(Invalid) as refused:
        capi.create(AWS_MACHINES, machine(hostAffinity="sticky"), "default")
    message = 'spec.hostAffinity: Unsupported value: "sticky": supported values: "default", "host"'
    assert message in str(refused.value)


def test_machines_stored_before_a_crd_gained_its_defaults_read_with_them(
    capi: InMemoryAPIServer,
) -> None:
    """kube defaults what it reads from etcd: after upgrading CAPA to a CRD that defaults
    ``hostAffinity`` (v2.10), an AWSMachine stored before reads with it, on get, list and
    watch, though nothing rewrote it."""
    crd = capi.get(CRDS, f"awsmachines.{INFRA}")
    current = copy.deepcopy(crd["spec"])
    v1beta2 = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta2")
    properties = v1beta2["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    del properties["hostAffinity"]["default"]
    capi.update(CRDS, crd)  # an older CAPA
    capi.create(AWS_MACHINES, machine(), "default")
    assert "hostAffinity" not in capi.get(AWS_MACHINES, "m", "default")["spec"]

    upgraded = capi.get(CRDS, f"awsmachines.{INFRA}")
    upgraded["spec"] = current
    capi.update(CRDS, upgraded)
    assert capi.get(AWS_MACHINES, "m", "default")["spec"]["hostAffinity"] == "default"
    [listed] = capi.list(AWS_MACHINES, "default").items
    assert listed["spec"]["hostAffinity"] == "default"
    [event] = list(capi.watch(AWS_MACHINES, "default", resource_version="0", timeout_seconds=0))
    assert event.object["spec"]["hostAffinity"] == "default"
