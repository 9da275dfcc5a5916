"""CAPA's AWSMachine webhooks in the simulator (``sim.apiserver.capa_webhooks``), and the
AWSMachines the ``capa`` plugin writes to adopt a fleet instance passing them.

Each rule emulated from cluster-api-provider-aws ``webhooks/awsmachine_webhook.go`` has an
object that passes and one refused with upstream's message; then, for AWSMachineTemplates
whose fields a naive copy would turn into a refused AWSMachine (Secrets Manager settings next
to ``insecureSkipSecretsManager``, ignition, ``marketType: OnDemand`` on a spot instance), the
fleet launch ends with an adopted AWSMachine instead of an instance nobody manages (an
ignition template is a NodeClass error instead: the fleet's nodes fetch their data with a
cloud-init boothook).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from karpenter_capi.core.errors import NodeClassNotReadyError
from karpenter_capi.core.kube.errors import Invalid, NotFound
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.plugins.capa.adopt import aws_machines
from karpenter_capi.sim.apiserver.capa_webhooks import VALIDATING
from tests.plugins.capa.fleet_env import NAMESPACE, FleetAws, FleetWorld
from tests.support.aws import fake_credentials

INFRA = "infrastructure.cluster.x-k8s.io"
AWS_MACHINES = aws_machines(f"{INFRA}/v1beta2")
AWS_MACHINES_V1BETA1 = aws_machines(f"{INFRA}/v1beta1")
TEMPLATES = Resource(INFRA, "v1beta2", "awsmachinetemplates", "AWSMachineTemplate", True)


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[FleetWorld]:
    fake_credentials(monkeypatch)
    with mock_aws():
        aws = FleetAws()
        aws.queue_prices()
        yield FleetWorld(aws)


def aws_machine(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{INFRA}/v1beta2",
        "kind": "AWSMachine",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"instanceType": "m5.large", **spec},
    }


def refused(world: FleetWorld, spec: dict[str, Any]) -> str:
    with pytest.raises(Invalid) as caught:
        world.server.create(AWS_MACHINES, aws_machine("refused", spec))
    return caught.value.message


PREFIX = (
    f'admission webhook "{VALIDATING}" denied the request: '
    'AWSMachine.infrastructure.cluster.x-k8s.io "refused" is invalid: '
)

RULES: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    (
        "validateCloudInitSecret: Secrets Manager fields with insecureSkipSecretsManager",
        {"cloudInit": {"insecureSkipSecretsManager": True}},
        {"cloudInit": {"insecureSkipSecretsManager": True, "secureSecretsBackend": "ssm"}},
        "spec.cloudInit.secureSecretsBackend: Forbidden: cannot be set if "
        "spec.cloudInit.insecureSkipSecretsManager is true",
    ),
    (
        "validateCloudInitSecret: secretPrefix without secretCount",
        {"cloudInit": {"secretPrefix": "aws.cluster.x-k8s.io/x", "secretCount": 1}},
        {"cloudInit": {"secretPrefix": "aws.cluster.x-k8s.io/x"}},
        "spec.cloudInit.secretCount: Forbidden: must be set together with "
        "spec.CloudInit.SecretPrefix",
    ),
    (
        "validateIgnitionAndCloudInit: cloudInit next to ignition",
        {"ignition": {"storageType": "UnencryptedUserData"}},
        {"ignition": {}, "cloudInit": {"insecureSkipSecretsManager": True}},
        "spec.cloudInit: Forbidden: cannot be set if spec.ignition is set",
    ),
    (
        "validateIgnitionAndCloudInit: proxy with ignition 2.3",
        {"ignition": {"version": "3.4", "proxy": {"httpProxy": "http://proxy:3128"}}},
        {"ignition": {"version": "2.3", "proxy": {"httpProxy": "http://proxy:3128"}}},
        "spec.ignition.proxy: Forbidden: cannot be set if spec.ignition.version is 2.3 or 3.0",
    ),
    (
        "validateRootVolume: io1 without iops",
        {"rootVolume": {"size": 20, "type": "io1", "iops": 100}},
        {"rootVolume": {"size": 20, "type": "io1"}},
        "spec.rootVolume.iops: Required value: iops required if type is 'io1' or 'io2'",
    ),
    (
        "validateNonRootVolumes: no device name",
        {"nonRootVolumes": [{"size": 20, "deviceName": "/dev/sdb"}]},
        {"nonRootVolumes": [{"size": 20}]},
        "spec.nonRootVolumes.deviceName: Required value: non root volume should have device name",
    ),
    (
        "validateAdditionalSecurityGroups: both id and filters",
        {"additionalSecurityGroups": [{"id": "sg-1"}]},
        {"additionalSecurityGroups": [{"id": "sg-1", "filters": [{"name": "n", "values": ["v"]}]}]},
        "spec.additionalSecurityGroups: Forbidden: only one of ID or Filters may be specified, "
        "specifying both is forbidden",
    ),
    (
        "validateInstanceMarketType: OnDemand with spotMarketOptions",
        {"marketType": "Spot", "spotMarketOptions": {}},
        {"marketType": "OnDemand", "spotMarketOptions": {}},
        "spec.marketType: Forbidden: setting marketType to OnDemand and spotMarketOptions cannot "
        "be used together",
    ),
    (
        "validateCapacityReservation: CapacityReservationsOnly with spot",
        {"capacityReservationPreference": "CapacityReservationsOnly"},
        {"capacityReservationPreference": "CapacityReservationsOnly", "spotMarketOptions": {}},
        "spec.capacityReservationPreference: Forbidden: when capacityReservationPreference is "
        "'CapacityReservationsOnly', spotMarketOptions cannot be set (which implies marketType: "
        "'Spot')",
    ),
    (
        "Tags.Validate: a key with the aws: prefix",
        {"additionalTags": {"karpenter.sh/nodepool": "default", "team": "a b"}},
        {"additionalTags": {"aws:owner": "me"}},
        'spec.additionalTags: Invalid value: "aws:owner": user created tag\'s key cannot have '
        "prefix aws:",
    ),
    (
        "Tags.Validate: a character outside the allowed ones",
        {"additionalTags": {"owner": "me@example.com"}},
        {"additionalTags": {"owner": "me, you"}},
        'spec.additionalTags: Invalid value: "me, you": value cannot have characters other than '
        "alphabets, numbers, spaces and _ . : / = + - @ .",
    ),
    (
        "Tags.Validate: more than 50",
        {"additionalTags": {f"k{i}": "v" for i in range(50)}},
        {"additionalTags": {f"k{i}": "v" for i in range(51)}},
        "user created tags cannot be more than 50",
    ),
    (
        "validateNetworkElasticIPPool: a pool without publicIP",
        {
            "publicIP": True,
            "elasticIpPool": {
                "publicIpv4Pool": "ipv4pool-ec2-0123",
                "publicIpv4PoolFallbackOrder": "amazon-pool",
            },
        },
        {"elasticIpPool": {"publicIpv4Pool": "ipv4pool-ec2-0123"}},
        "[spec.elasticIpPool: Required value: publicIp must be set to 'true' to assign custom "
        "public IPv4 pools with elasticIpPool, spec.elasticIpPool.publicIpv4PoolFallbackOrder: "
        "Invalid value:",
    ),
    (
        "validateNetworkElasticIPPool: a pool name without its prefix",
        {"publicIP": True, "elasticIpPool": {}},
        {
            "publicIP": True,
            "elasticIpPool": {"publicIpv4Pool": "my-pool", "publicIpv4PoolFallbackOrder": "none"},
        },
        "publicIpv4Pool must start with ipv4pool-ec2-.",
    ),
    (
        "validateHostAllocation: hostID without tenancy host",
        {"tenancy": "host", "hostID": "h-0123", "hostAffinity": "host"},
        {"hostID": "h-0123"},
        "spec.hostID: Forbidden: hostID can only be set when tenancy is 'host'",
    ),
    (
        "validateHostAllocation: hostID with dynamicHostAllocation",
        {"tenancy": "host", "hostAffinity": "host", "dynamicHostAllocation": {}},
        {"tenancy": "host", "hostAffinity": "host", "hostID": "h-1", "dynamicHostAllocation": {}},
        "[spec.hostID: Forbidden: hostID and dynamicHostAllocation are mutually exclusive, "
        "spec.dynamicHostAllocation: Forbidden: hostID and dynamicHostAllocation are mutually "
        "exclusive]",
    ),
    (
        "validateHostAllocation: hostAffinity host without tenancy host",
        {"hostAffinity": "default"},
        {"hostAffinity": "host"},
        "spec.hostAffinity: Forbidden: hostAffinity can only be set to 'host' when tenancy is "
        "'host'",
    ),
]


GO_RENDERED = {
    "Tags.Validate: more than 50",
    "validateNetworkElasticIPPool: a pool without publicIP",
    "validateNetworkElasticIPPool: a pool name without its prefix",
}


@pytest.mark.parametrize(("rule", "good", "bad", "message"), RULES, ids=[r[0] for r in RULES])
def test_each_rule_admits_a_right_aws_machine_and_refuses_a_wrong_one_as_capa_does(
    world: FleetWorld, rule: str, good: dict[str, Any], bad: dict[str, Any], message: str
) -> None:
    world.server.create(AWS_MACHINES, aws_machine("admitted", good))
    answer = refused(world, bad)
    if rule in GO_RENDERED:  # the refused value is a Go struct or map, printed Go's way
        assert answer.startswith(PREFIX)
        assert message in answer
    else:
        assert answer == PREFIX + message


def test_the_defaulting_webhook_fills_the_secrets_backend_and_metadata_options(
    world: FleetWorld,
) -> None:
    stored = world.server.create(AWS_MACHINES, aws_machine("plain", {}))
    assert stored["spec"]["cloudInit"] == {"secureSecretsBackend": "secrets-manager"}
    assert stored["spec"]["instanceMetadataOptions"] == {
        "httpEndpoint": "enabled",
        "httpProtocolIpv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "optional",
        "instanceMetadataTags": "disabled",
    }


def test_the_spec_cannot_change_after_creation_but_the_provider_id_can(world: FleetWorld) -> None:
    world.server.create(AWS_MACHINES, aws_machine("fixed", {}))
    world.server.patch(
        AWS_MACHINES, "fixed", {"spec": {"providerID": "aws:///us-east-1a/i-1"}}, NAMESPACE
    )
    world.server.patch(
        AWS_MACHINES, "fixed", {"status": {"ready": True}}, NAMESPACE, subresource="status"
    )
    with pytest.raises(Invalid) as caught:
        world.server.patch(AWS_MACHINES, "fixed", {"spec": {"instanceType": "c5.large"}}, NAMESPACE)
    assert caught.value.message.endswith('"fixed" is invalid: spec: Forbidden: cannot be modified')


def test_v1beta1_is_not_served_so_nothing_bypasses_the_webhook(world: FleetWorld) -> None:
    # Upstream's CRD lists v1beta1 with served: false: only v1beta2 can be written.
    obj = aws_machine("old-version", {"cloudInit": {"secretPrefix": "p"}})
    obj["apiVersion"] = f"{INFRA}/v1beta1"
    with pytest.raises(NotFound):
        world.server.create(AWS_MACHINES_V1BETA1, obj)


def launch(world: FleetWorld, name: str) -> Any:
    world.nodeclaim(name)
    world.create(name)
    world.bootstrap_ready(name)
    return world.create(name)


def template_spec(world: FleetWorld, **fields: Any) -> None:
    """Set ``fields`` on the AWSMachineTemplate's ``spec.template.spec``."""
    world.server.patch(TEMPLATES, "nodes", {"spec": {"template": {"spec": fields}}}, NAMESPACE)


@pytest.mark.parametrize(
    "cloud_init",
    [
        {"secureSecretsBackend": "secrets-manager"},
        {"secureSecretsBackend": "ssm-parameter-store", "secretPrefix": "p", "secretCount": 2},
    ],
    ids=["secrets-manager", "parameter-store-with-prefix"],
)
def test_a_template_with_secrets_manager_settings_still_yields_an_adopted_machine(
    world: FleetWorld, cloud_init: dict[str, Any]
) -> None:
    template_spec(world, cloudInit=cloud_init)
    result = launch(world, "general-a1")
    awsm = world.server.get(AWS_MACHINES, "general-a1", NAMESPACE)
    assert awsm["spec"]["providerID"] == result.provider_id
    # The bootstrap data is in Secrets Manager under the instance's ID, whatever the template
    # said: CAPA deletes it once the node registered.
    instance_id = str(result.provider_id).rpartition("/")[2]
    assert awsm["spec"]["cloudInit"] == {
        "secretPrefix": f"aws.cluster.x-k8s.io/{instance_id}",
        "secretCount": 1,
        "secureSecretsBackend": "secrets-manager",
    }


def test_an_ignition_template_is_a_nodeclass_error_before_anything_is_launched(
    world: FleetWorld,
) -> None:
    template_spec(world, ignition={"version": "3.4"})
    world.nodeclaim("general-a1")
    with pytest.raises(NodeClassNotReadyError) as caught:
        world.create("general-a1")
    assert "AWSMachineTemplate nodes uses ignition; CAPAFleet launches cloud-init nodes" in str(
        caught.value
    )
    assert world.aws.instances() == []


def test_a_spot_instance_from_an_on_demand_template_is_adopted_as_spot(world: FleetWorld) -> None:
    template_spec(world, marketType="OnDemand")
    result = launch(world, "general-a1")
    assert result.capacity_type == "spot"
    awsm = world.server.get(AWS_MACHINES, "general-a1", NAMESPACE)
    assert awsm["spec"]["marketType"] == "Spot"
    assert awsm["spec"]["spotMarketOptions"] == {}
