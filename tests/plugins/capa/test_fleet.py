"""CAPAFleet launches: the CreateFleet request, capacity errors, idempotency, adoption, delete
and garbage collection, against moto's EC2 and an in-memory management cluster."""

from __future__ import annotations

import base64
import gzip
from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.errors import InstanceNotFoundError, InsufficientCapacityError
from karpenter_capi.core.hookspecs import Instance
from karpenter_capi.core.instancetype import InstanceType, Offering
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.resources import NODECLAIMS, Resource
from karpenter_capi.core.lifecycle.garbagecollection import orphan_nodeclaim
from karpenter_capi.core.values.resources import ResourceList
from karpenter_capi.plugins._cloud.unavailable import UnavailableOfferings
from karpenter_capi.plugins.capa import fleet
from karpenter_capi.plugins.capa.adopt import aws_machines, kubeadm_configs
from karpenter_capi.plugins.capa.plugin import CapaPlugin
from tests.plugins.capa.fleet_env import CLOUD_INIT, NAMESPACE, FleetAws, FleetWorld, tags_of
from tests.support.aws import fake_credentials

AWS_MACHINES = aws_machines("infrastructure.cluster.x-k8s.io/v1beta2")
KUBEADM_CONFIGS = kubeadm_configs("bootstrap.cluster.x-k8s.io/v1beta2")
AWS_CLUSTERS = Resource(
    "infrastructure.cluster.x-k8s.io", "v1beta2", "awsclusters", "AWSCluster", True
)
TEMPLATES = Resource(
    "infrastructure.cluster.x-k8s.io", "v1beta2", "awsmachinetemplates", "AWSMachineTemplate", True
)


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[FleetWorld]:
    fake_credentials(monkeypatch)
    with mock_aws():
        aws = FleetAws()
        aws.queue_prices()
        yield FleetWorld(aws)


def launch(world: FleetWorld, name: str) -> Any:
    """Create until the bootstrap data is needed, provide it, create again."""
    world.nodeclaim(name)
    waiting = world.create(name)
    assert waiting.provider_id is None
    world.bootstrap_ready(name)
    return world.create(name)


def test_the_fleet_request_offers_every_compatible_offering_cheapest_first(
    world: FleetWorld,
) -> None:
    result = launch(world, "general-a1")
    [request] = world.aws.fleet_requests
    assert request["Type"] == "instant"
    assert request["TargetCapacitySpecification"] == {
        "TotalTargetCapacity": 1,
        "DefaultTargetCapacityType": "spot",
    }
    assert request["SpotOptions"] == {"AllocationStrategy": "price-capacity-optimized"}
    assert "OnDemandOptions" not in request
    [config] = request["LaunchTemplateConfigs"]
    overrides = [
        (o["InstanceType"], o["AvailabilityZone"], o["SubnetId"]) for o in config["Overrides"]
    ]
    subnets = world.aws.subnets
    # Spot prices: m5.large 0.0365 (1a) / 0.0412 (1b), m6i.large 0.0391 (1a); c5.large has no
    # spot price, and the public subnet of us-east-1c is never used.
    assert overrides == [
        ("m5.large", "us-east-1a", subnets["us-east-1a"]),
        ("m6i.large", "us-east-1a", subnets["us-east-1a"]),
        ("m5.large", "us-east-1b", subnets["us-east-1b"]),
    ]
    assert all(o["ImageId"] == world.aws.ami for o in config["Overrides"])
    uid = world.server.get(NODECLAIMS, "general-a1")["metadata"]["uid"]
    assert request["ClientToken"].startswith(uid)
    assert len(request["ClientToken"]) <= 64
    tags = tags_of(request)
    assert tags == {
        "sigs.k8s.io/cluster-api-provider-aws/cluster/prod": "owned",
        "kubernetes.io/cluster/prod": "owned",
        "sigs.k8s.io/cluster-api-provider-aws/role": "node",
        "Name": "general-a1",
        "MachineName": "capi/general-a1",
        "karpenter.sh/nodeclaim": "general-a1",
        "karpenter.sh/nodepool": "general",
        "karpenter.cluster.x-k8s.io/nodeclass": "fleet",
    }
    # An instant fleet may tag only itself and its instances (EC2 refuses other types).
    assert {spec["ResourceType"] for spec in request["TagSpecifications"]} == {"instance", "fleet"}
    # The node is what EC2 chose, as EC2 reported it.
    [instance] = world.aws.instances()
    assert result.provider_id == (
        f"aws:///{instance['Placement']['AvailabilityZone']}/{instance['InstanceId']}"
    )
    assert (result.instance_type, result.capacity_type) == (instance["InstanceType"], "spot")
    assert result.zone == instance["Placement"]["AvailabilityZone"]


EC2_WRITES = ("Create", "Delete", "Modify", "Run", "Terminate", "Associate", "Attach")


def test_ec2_writes_per_node_are_one_create_fleet(world: FleetWorld) -> None:
    """The launch template is the NodeClass's, written once: per node, one CreateFleet."""
    writes: list[str] = []

    def record(model: Any, **_: Any) -> None:
        if model.name.startswith(EC2_WRITES):
            writes.append(model.name)

    world.aws.catalog.meta.events.register("before-call.ec2", record)
    for name in ("general-a1", "general-a2", "general-a3"):
        assert launch(world, name).provider_id
    assert writes == ["CreateLaunchTemplate", "CreateFleet", "CreateFleet", "CreateFleet"]
    template_ids = {
        r["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateId"]
        for r in world.aws.fleet_requests
    }
    assert len(template_ids) == 1


def test_the_launch_template_is_the_nodeclasss_and_the_node_data_is_a_capa_secret(
    world: FleetWorld,
) -> None:
    result = launch(world, "general-a1")
    [config] = world.aws.fleet_requests[-1]["LaunchTemplateConfigs"]
    spec = config["LaunchTemplateSpecification"]
    [version] = world.aws.catalog.describe_launch_template_versions(
        LaunchTemplateId=spec["LaunchTemplateId"], Versions=[spec["Version"]]
    )["LaunchTemplateVersions"]
    data = version["LaunchTemplateData"]
    user_data = base64.b64decode(data["UserData"])
    # Shared by every node: the boothook that fetches the node's own data, no join token.
    assert b"text/cloud-boothook" in user_data
    assert b"aws.cluster.x-k8s.io/${INSTANCE}" in user_data
    assert b"abc.def" not in user_data
    assert data["IamInstanceProfile"] == {"Name": "nodes.example"}
    # CAPA's core groups of a node (node and lb; GetCoreSecurityGroups), then the template's.
    assert data["SecurityGroupIds"] == [world.aws.node_sg, world.aws.lb_sg, world.aws.extra_sg]
    # The template sets no metadata options: CAPA's defaults, which CAPA would set back.
    assert data["MetadataOptions"] == {
        "HttpEndpoint": "enabled",
        "HttpProtocolIpv6": "disabled",
        "HttpPutResponseHopLimit": 1,
        "HttpTokens": "optional",
        "InstanceMetadataTags": "disabled",
    }
    instance_id = str(result.provider_id).rpartition("/")[2]
    secret = world.aws.secrets_client.get_secret_value(
        SecretId=f"aws.cluster.x-k8s.io/{instance_id}-0"
    )
    assert gzip.decompress(secret["SecretBinary"]) == CLOUD_INIT
    awsm = world.server.get(AWS_MACHINES, "general-a1", NAMESPACE)
    assert awsm["spec"]["cloudInit"] == {
        "secretPrefix": f"aws.cluster.x-k8s.io/{instance_id}",
        "secretCount": 1,
        "secureSecretsBackend": "secrets-manager",
    }


def test_a_changed_nodeclass_gets_a_new_default_version_used_from_then_on(
    world: FleetWorld,
) -> None:
    launch(world, "general-a1")
    first = world.aws.fleet_requests[-1]["LaunchTemplateConfigs"][0]
    image = world.aws.catalog.describe_images(
        Owners=["amazon"], Filters=[{"Name": "architecture", "Values": ["x86_64"]}]
    )["Images"]
    other = next(i["ImageId"] for i in image if i["ImageId"] != world.aws.ami)
    world.server.patch(
        TEMPLATES, "nodes", {"spec": {"template": {"spec": {"ami": {"id": other}}}}}, NAMESPACE
    )
    launch(world, "general-a2")
    second = world.aws.fleet_requests[-1]["LaunchTemplateConfigs"][0]
    spec = second["LaunchTemplateSpecification"]
    assert spec["LaunchTemplateId"] == first["LaunchTemplateSpecification"]["LaunchTemplateId"]
    assert int(spec["Version"]) > int(first["LaunchTemplateSpecification"]["Version"])
    [default] = world.aws.catalog.describe_launch_template_versions(
        LaunchTemplateId=spec["LaunchTemplateId"], Versions=["$Default"]
    )["LaunchTemplateVersions"]
    assert default["VersionNumber"] == int(spec["Version"])
    assert default["LaunchTemplateData"]["ImageId"] == other


def test_stock_capa_adopts_through_an_aws_machine_that_names_the_instance(
    world: FleetWorld,
) -> None:
    world.nodeclaim("general-a1")
    world.create("general-a1")
    machine = world.machine("general-a1")
    assert machine["spec"]["infrastructureRef"] == {
        "apiGroup": "infrastructure.cluster.x-k8s.io",
        "kind": "AWSMachine",
        "name": "general-a1",
    }
    assert machine["metadata"]["labels"][wellknown.LABEL_CAPI_CLUSTER_NAME] == "prod"
    assert machine["metadata"]["labels"][wellknown.LABEL_NODEPOOL] == "general"
    config = world.server.get(KUBEADM_CONFIGS, "general-a1", NAMESPACE)
    taints = config["spec"]["joinConfiguration"]["nodeRegistration"]["taints"]
    assert {"key": "karpenter.sh/unregistered", "effect": "NoExecute"} in taints
    assert {"key": "team", "value": "a", "effect": "NoSchedule"} in taints
    assert config["metadata"]["ownerReferences"][0]["uid"] == machine["metadata"]["uid"]
    with pytest.raises(NotFound):  # not before the fleet returned
        world.server.get(AWS_MACHINES, "general-a1", NAMESPACE)
    world.bootstrap_ready("general-a1")
    result = world.create("general-a1")
    awsm = world.server.get(AWS_MACHINES, "general-a1", NAMESPACE)
    [instance] = world.aws.instances()
    assert awsm["spec"]["providerID"] == result.provider_id
    assert awsm["spec"]["instanceID"] == instance["InstanceId"]
    assert awsm["spec"]["instanceType"] == instance["InstanceType"]
    assert awsm["spec"]["subnet"] == {"id": instance["SubnetId"]}
    assert awsm["spec"]["ami"] == {"id": world.aws.ami}
    assert awsm["spec"]["spotMarketOptions"] == {}
    assert awsm["spec"]["cloudInit"]["secretPrefix"] == (
        f"aws.cluster.x-k8s.io/{instance['InstanceId']}"
    )


def test_a_capacity_error_caches_the_offerings_and_the_next_launch_avoids_them(
    world: FleetWorld,
) -> None:
    world.nodeclaim("general-a1")
    world.create("general-a1")
    world.bootstrap_ready("general-a1")
    subnets = world.aws.subnets
    world.aws.refuse_next_fleet(
        [
            ("m5.large", subnets["us-east-1a"], "InsufficientInstanceCapacity"),
            ("m6i.large", subnets["us-east-1a"], "InsufficientInstanceCapacity"),
        ]
    )
    with pytest.raises(InsufficientCapacityError, match="InsufficientInstanceCapacity"):
        world.create("general-a1")
    assert world.aws.instances() == []
    # The inventory shows them unavailable now, for three minutes.
    unavailable = {
        (it.name, o.zone, o.capacity_type)
        for it in world.inventory()
        for o in it.offerings
        if not o.available
    }
    assert unavailable == {("m5.large", "us-east-1a", "spot"), ("m6i.large", "us-east-1a", "spot")}
    # The core deletes that NodeClaim; the next one launches without the refused offerings.
    result = launch(world, "general-b2")
    second = world.aws.fleet_requests[-1]
    overrides = [
        (o["InstanceType"], o["AvailabilityZone"])
        for o in second["LaunchTemplateConfigs"][0]["Overrides"]
    ]
    assert overrides == [("m5.large", "us-east-1b")]
    assert result.zone == "us-east-1b"
    assert second["ClientToken"] != world.aws.fleet_requests[0]["ClientToken"]
    world.clock.advance(181)
    assert all(o.available for it in world.inventory() for o in it.offerings)


def test_without_spot_left_the_fleet_asks_for_on_demand_at_the_lowest_price(
    world: FleetWorld,
) -> None:
    world.nodeclaim(
        "general-a1", capacity_types=("on-demand",), instance_types=("c5.large", "m5.large")
    )
    world.create("general-a1")
    world.bootstrap_ready("general-a1")
    result = world.create("general-a1")
    request = world.aws.fleet_requests[-1]
    assert request["OnDemandOptions"] == {"AllocationStrategy": "lowest-price"}
    assert request["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "on-demand"
    assert [o["InstanceType"] for o in request["LaunchTemplateConfigs"][0]["Overrides"]] == [
        "c5.large",
        "c5.large",
        "m5.large",
        "m5.large",
    ]
    assert result.capacity_type == "on-demand"
    awsm = world.server.get(AWS_MACHINES, "general-a1", NAMESPACE)
    assert "spotMarketOptions" not in awsm["spec"]


def test_overrides_are_sixty_types_each_in_every_zone_and_leave_out_cached_offerings() -> None:
    """As upstream Karpenter: the 60 cheapest types, each in every zone it is offered in (one
    subnet per zone), not 60 (type x subnet) pairs."""
    clock = FakeClock()
    unavailable = UnavailableOfferings(clock)
    types = [
        InstanceType(
            name=f"t{i:03d}.large",
            capacity=ResourceList.parse({"cpu": "2", "memory": "4Gi"}),
            offerings=(
                Offering("us-east-1a", "spot", 0.01 * (100 - i)),
                Offering("us-east-1b", "spot", 0.01 * (100 - i) + 0.001),
            ),
        )
        for i in range(70)
    ]
    unavailable.mark("t069.large", "us-east-1a", "spot", "ICE")
    found = fleet.candidates(
        types, {"us-east-1a": ("subnet-a",), "us-east-1b": ("subnet-b",)}, unavailable
    )
    chosen = fleet.overrides(found, "spot", {"us-east-1a": "subnet-a", "us-east-1b": "subnet-b"})
    kept = {c.instance_type for c in chosen}
    assert kept == {f"t{i:03d}.large" for i in range(10, 70)}  # the 60 cheapest
    assert len(chosen) == 2 * 60 - 1  # every zone of each, but the cached offering
    assert [c.price for c in chosen] == sorted(c.price for c in chosen)
    assert ("t069.large", "us-east-1a") not in {(c.instance_type, c.zone) for c in chosen}


def test_each_zone_launches_into_its_subnet_with_the_most_free_addresses(
    world: FleetWorld,
) -> None:
    bigger = world.aws.catalog.create_subnet(
        VpcId=world.aws.vpc, CidrBlock="10.0.16.0/20", AvailabilityZone="us-east-1a"
    )["Subnet"]["SubnetId"]
    cluster = world.server.get(AWS_CLUSTERS, "prod", NAMESPACE)
    subnets = cluster["spec"]["network"]["subnets"]
    subnets.append({"id": bigger, "availabilityZone": "us-east-1a", "isPublic": False})
    world.server.patch(AWS_CLUSTERS, "prod", {"spec": {"network": {"subnets": subnets}}}, NAMESPACE)
    launch(world, "general-a1")
    [config] = world.aws.fleet_requests[-1]["LaunchTemplateConfigs"]
    pairs = [(o["InstanceType"], o["SubnetId"]) for o in config["Overrides"]]
    assert len(pairs) == len(set(pairs))
    in_zone_a = {
        subnet for _, subnet in pairs if subnet in (bigger, world.aws.subnets["us-east-1a"])
    }
    assert in_zone_a == {bigger}  # 4,091 free addresses against 251


def test_a_subnet_out_of_addresses_is_left_out_for_every_type(world: FleetWorld) -> None:
    world.nodeclaim("general-a1")
    world.create("general-a1")
    world.bootstrap_ready("general-a1")
    full = world.aws.subnets["us-east-1a"]
    world.aws.refuse_next_fleet([("m5.large", full, "InsufficientFreeAddressesInSubnet")])
    with pytest.raises(InsufficientCapacityError):
        world.create("general-a1")
    assert world.create("general-a1").provider_id
    [config] = world.aws.fleet_requests[-1]["LaunchTemplateConfigs"]
    assert config["Overrides"]
    assert full not in {o["SubnetId"] for o in config["Overrides"]}


def test_a_repeated_create_answers_from_the_work_done_and_never_launches_twice(
    world: FleetWorld,
) -> None:
    first = launch(world, "general-a1")
    again = world.create("general-a1")
    assert again == first
    # A restarted controller (nothing in memory) finds the same answer too.
    restarted = world.new_plugins(CapaPlugin(world.aws, background_refresh=False))
    assert world.create("general-a1", restarted).provider_id == first.provider_id
    assert len(world.aws.fleet_requests) == 1
    assert len(world.aws.instances()) == 1


def test_a_crash_between_the_fleet_and_the_aws_machine_adopts_the_tagged_instance(
    world: FleetWorld,
) -> None:
    world.nodeclaim("general-a1")
    world.create("general-a1")
    world.bootstrap_ready("general-a1")

    def crash(**_: Any) -> None:
        raise RuntimeError("controller killed")

    # The AWSMachine write never happens: the process dies right after CreateFleet returned.
    world.aws.catalog.meta.events.register("after-call.ec2.CreateFleet", crash)
    with pytest.raises(Exception, match="controller killed"):
        world.create("general-a1")
    world.aws.catalog.meta.events.unregister("after-call.ec2.CreateFleet", crash)
    [instance] = world.aws.instances("general-a1")
    restarted = world.new_plugins(CapaPlugin(world.aws, background_refresh=False))
    result = world.create("general-a1", restarted)
    assert result.provider_id.endswith(instance["InstanceId"])
    assert len(world.aws.fleet_requests) == 1
    assert (
        world.server.get(AWS_MACHINES, "general-a1", NAMESPACE)["spec"]["instanceID"]
        == (instance["InstanceId"])
    )


def test_get_reports_the_instance_and_then_that_it_is_gone(world: FleetWorld) -> None:
    result = launch(world, "general-a1")
    found = world.plugins.get(result.provider_id)
    assert (found.instance_type, found.zone, found.capacity_type, found.nodeclaim_name) == (
        result.instance_type,
        result.zone,
        "spot",
        "general-a1",
    )
    world.aws.catalog.terminate_instances(InstanceIds=[result.provider_id.rsplit("/", 1)[1]])
    with pytest.raises(InstanceNotFoundError):
        world.plugins.get(result.provider_id)
    # Not ours: another plugin's business.
    with pytest.raises(InstanceNotFoundError, match="no enabled plugin"):
        world.plugins.get("aws:///us-east-1a/i-0123456789abcdef0")


def test_delete_goes_through_the_machine_and_ends_when_machine_and_instance_are_gone(
    world: FleetWorld,
) -> None:
    launch(world, "general-a1")
    claim = world.claim("general-a1")
    assert world.plugins.delete(claim) == "capa"
    with pytest.raises(NotFound):
        world.machine("general-a1")
    # The Machine's owned objects go with it (CAPA would terminate the adopted instance; with
    # the AWSMachine gone and no CAPA here, the plugin ends what is tagged for the NodeClaim).
    with pytest.raises(NotFound):
        world.server.get(AWS_MACHINES, "general-a1", NAMESPACE)
    world.plugins.delete(claim)
    assert world.aws.instances() == []
    with pytest.raises(InstanceNotFoundError):
        world.plugins.delete(claim)


def test_a_nodeclaim_deleted_while_waiting_for_bootstrap_data_leaves_nothing(
    world: FleetWorld,
) -> None:
    world.nodeclaim("general-a1")
    world.create("general-a1")
    claim = world.claim("general-a1")
    world.plugins.delete(claim)
    with pytest.raises(InstanceNotFoundError):
        world.plugins.delete(claim)
    with pytest.raises(NotFound):
        world.server.get(KUBEADM_CONFIGS, "general-a1", NAMESPACE)
    assert world.aws.fleet_requests == []


def test_garbage_collection_terminates_an_instance_no_nodeclaim_claims(world: FleetWorld) -> None:
    launch(world, "general-a1")
    # An instance tagged for a NodeClaim that no longer exists and has no Machine (a crash
    # after CreateFleet, then the NodeClaim force-deleted).
    orphan = world.aws.catalog.run_instances(
        ImageId=world.aws.ami,
        MinCount=1,
        MaxCount=1,
        InstanceType="m5.large",
        SubnetId=world.aws.subnets["us-east-1b"],
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": fleet.instance_tags(
                    "prod", "ghost", "ghost", "general", "fleet", namespace="capi"
                ),
            }
        ],
    )["Instances"][0]["InstanceId"]
    listed = {i.nodeclaim_name: i for i in world.plugins.list_instances()}
    assert set(listed) == {"general-a1", "ghost"}
    claims = {c["metadata"]["name"] for c in world.server.list(NODECLAIMS).items}
    unclaimed: list[Instance] = [i for i in listed.values() if i.nodeclaim_name not in claims]
    assert [i.provider_id for i in unclaimed] == [f"aws:///us-east-1b/{orphan}"]
    stand_in = orphan_nodeclaim(unclaimed[0])
    assert world.plugins.delete(stand_in) == "capa"
    assert [i["InstanceId"] for i in world.aws.instances()] != [orphan]
    assert orphan not in {i["InstanceId"] for i in world.aws.instances()}
    with pytest.raises(InstanceNotFoundError):
        world.plugins.delete(stand_in)
    assert {i.nodeclaim_name for i in world.plugins.list_instances()} == {"general-a1"}


def test_a_machine_whose_instance_is_gone_is_cleaned_up(world: FleetWorld) -> None:
    result = launch(world, "general-a1")
    world.aws.catalog.terminate_instances(InstanceIds=[result.provider_id.rsplit("/", 1)[1]])
    [listed] = world.plugins.list_instances()
    assert listed.provider_id is None  # the core's GC then asks get, which says gone
    with pytest.raises(InstanceNotFoundError):
        world.plugins.get(result.provider_id)
    # The NodeClaim is deleted by the core; its delete removes the Machine.
    world.plugins.delete(world.claim("general-a1"))
    with pytest.raises(NotFound):
        world.machine("general-a1")
    with pytest.raises(InstanceNotFoundError):
        world.plugins.delete(world.claim("general-a1"))


def test_generic_capi_leaves_fleet_nodeclasses_alone(world: FleetWorld) -> None:
    assert world.plugins.serving_plugin(world.nodeclass, _nodepool(world)) == "capa"
    names = {it.name for it in world.inventory()}
    assert {"m5.large", "c5.large"} <= names


def test_only_types_of_the_images_architecture_are_offered(world: FleetWorld) -> None:
    inventory = world.inventory()
    assert {it.name for it in inventory} >= {"m5.large", "c5.large"}
    assert "m6g.large" not in {it.name for it in inventory}  # arm64, the AMI is x86_64
    arm = world.aws.catalog.describe_images(
        Owners=["amazon"], Filters=[{"Name": "architecture", "Values": ["arm64"]}]
    )["Images"][0]["ImageId"]
    world.server.patch(
        TEMPLATES, "nodes", {"spec": {"template": {"spec": {"ami": {"id": arm}}}}}, NAMESPACE
    )
    arm_inventory = world.inventory()
    assert "m6g.large" in {it.name for it in arm_inventory}
    assert {a for it in arm_inventory for a in it.requirements[wellknown.LABEL_ARCH]} == {"arm64"}


def _nodepool(world: FleetWorld) -> Any:
    from karpenter_capi.core.api.nodepool import NodePool

    return NodePool.model_validate(world.nodepool_raw)


def test_an_architecture_mismatch_marks_the_offering_instead_of_retrying_it() -> None:
    unavailable = UnavailableOfferings(FakeClock())
    outcome = fleet.FleetOutcome(
        None,
        (
            (
                "m6g.large",
                "us-east-1a",
                "InvalidParameterValue",
                "The architecture 'arm64' of the specified instance type does not match the "
                "architecture 'x86_64' of the specified AMI.",
            ),
        ),
    )
    fleet.mark_capacity_errors(outcome, "spot", unavailable)
    assert unavailable.is_unavailable("m6g.large", "us-east-1a", "spot")


def test_the_templates_public_ip_volumes_and_ssh_key_are_launched(world: FleetWorld) -> None:
    world.server.patch(
        TEMPLATES,
        "nodes",
        {
            "spec": {
                "template": {
                    "spec": {
                        "publicIP": True,
                        "sshKeyName": "ops",
                        "rootVolume": {"size": 80, "type": "gp3"},
                        "nonRootVolumes": [{"deviceName": "/dev/sdb", "size": 100}],
                    }
                }
            }
        },
        NAMESPACE,
    )
    launch(world, "general-a1")
    spec = world.aws.fleet_requests[-1]["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]
    [version] = world.aws.catalog.describe_launch_template_versions(
        LaunchTemplateId=spec["LaunchTemplateId"], Versions=[spec["Version"]]
    )["LaunchTemplateVersions"]
    data = version["LaunchTemplateData"]
    # A public address is asked for on the primary interface, which then holds the groups
    # (EC2 refuses SecurityGroupIds next to NetworkInterfaces).
    [interface] = data["NetworkInterfaces"]
    assert interface["AssociatePublicIpAddress"] is True
    assert interface["DeviceIndex"] == 0
    assert interface["Groups"] == [world.aws.node_sg, world.aws.lb_sg, world.aws.extra_sg]
    assert "SecurityGroupIds" not in data
    assert data["KeyName"] == "ops"
    devices = {m["DeviceName"]: m["Ebs"] for m in data["BlockDeviceMappings"]}
    assert devices["/dev/xvda"]["VolumeSize"] == 80
    assert devices["/dev/xvda"]["VolumeType"] == "gp3"
    assert devices["/dev/sdb"]["VolumeSize"] == 100
