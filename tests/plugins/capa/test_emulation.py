"""The emulated stock CAPA (``sim.capi.capa``) and kubeadm bootstrap step (``sim.capi.bootstrap``)
under the capa plugin's ``CAPAFleet`` launches, over moto's EC2.

What a user of the simulator relies on: the plugin waits for bootstrap data the emulation
provides; an AWSMachine naming the fleet's instance is adopted (the Machine gets the provider
ID, a Node of the instance's real shape registers) and never launches a second instance; an
AWSMachine without a provider ID does make CAPA launch one (the mistake the plugin must never
make shows); deleting the Machine terminates the instance; an instance that vanished fails the
Machine instead of being replaced behind the autoprovisioner's back.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.resources import NODES, SECRETS, Resource
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.plugins.capa.adopt import aws_machines, kubeadm_configs
from karpenter_capi.sim.capi import add_capi_emulation
from karpenter_capi.sim.capi.capa import CapaMachineController
from tests.plugins.capa.fleet_env import NAMESPACE, FleetAws, FleetWorld, ec2_client
from tests.support.aws import fake_credentials

AWS_MACHINES = aws_machines("infrastructure.cluster.x-k8s.io/v1beta2")
KUBEADM_CONFIGS = kubeadm_configs("bootstrap.cluster.x-k8s.io/v1beta2")
TEMPLATES = Resource(
    "infrastructure.cluster.x-k8s.io", "v1beta2", "awsmachinetemplates", "AWSMachineTemplate", True
)


class Emulated:
    def __init__(self, world: FleetWorld) -> None:
        self.world = world
        manager = Manager(world.server, clock=world.clock)
        controllers = add_capi_emulation(
            manager,
            nodes=True,
            kubeadm_bootstrap=True,
            bootstrap_delay=2,
            aws_ec2=ec2_client(),
            aws_secrets=world.aws.secrets_client,
        )
        self.capa = next(c for c in controllers if isinstance(c, CapaMachineController))
        self.driver = SteppedDriver(manager)
        self.driver.run_until_quiet()

    def launch(self, name: str) -> str:
        """NodeClaim ``name`` through the plugin, with the emulation answering in between."""
        self.world.nodeclaim(name)
        for _ in range(5):
            result = self.world.create(name)
            if result.provider_id:
                self.driver.run_until_quiet()
                return str(result.provider_id)
            self.driver.run_until_quiet()
            self.driver.advance(2)
        raise AssertionError(f"{name} never launched")

    def node(self, provider_id: str) -> dict[str, Any]:
        [node] = [
            n for n in self.world.server.list(NODES).items if n["spec"]["providerID"] == provider_id
        ]
        return node


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulated]:
    fake_credentials(monkeypatch)
    with mock_aws():
        aws = FleetAws()
        aws.queue_prices()
        yield Emulated(FleetWorld(aws))


def test_bootstrap_data_arrives_after_the_delay_and_the_plugin_waits_for_it(env: Emulated) -> None:
    world = env.world
    world.nodeclaim("general-a")
    assert not world.create("general-a").provider_id  # Machine and KubeadmConfig only
    env.driver.run_until_quiet()
    assert not (world.machine("general-a")["spec"]["bootstrap"]).get("dataSecretName")
    assert world.aws.fleet_requests == []

    env.driver.advance(2)
    machine = world.machine("general-a")
    secret_name = machine["spec"]["bootstrap"]["dataSecretName"]
    config = world.server.get(KUBEADM_CONFIGS, "general-a", NAMESPACE)
    assert config["status"]["dataSecretName"] == secret_name
    secret = world.server.get(SECRETS, secret_name, NAMESPACE)
    assert base64.b64decode(secret["data"]["value"]).startswith(b"#cloud-config")
    assert world.create("general-a").provider_id
    assert len(world.aws.fleet_requests) == 1


def test_an_aws_machine_naming_the_fleet_instance_is_adopted_with_a_real_node(
    env: Emulated,
) -> None:
    provider_id = env.launch("general-a")
    world = env.world
    [instance] = world.aws.instances("general-a")
    assert provider_id.endswith(instance["InstanceId"])

    machine = world.machine("general-a")
    assert machine["spec"]["providerID"] == provider_id
    assert machine["status"]["phase"] == "Running"
    awsm = world.server.get(AWS_MACHINES, "general-a", NAMESPACE)
    assert awsm["status"]["ready"] is True
    assert {"type": "InternalIP", "address": instance["PrivateIpAddress"]} in awsm["status"][
        "addresses"
    ]
    node = env.node(provider_id)
    labels = node["metadata"]["labels"]
    assert node["metadata"]["name"] == instance["PrivateDnsName"]
    assert labels["node.kubernetes.io/instance-type"] == instance["InstanceType"]
    assert labels["topology.kubernetes.io/zone"] == instance["Placement"]["AvailabilityZone"]
    assert node["status"]["capacity"]["cpu"] == "2"  # every candidate is a 2-vCPU .large
    # The NodeClaim's taints and karpenter.sh/unregistered came through the KubeadmConfig.
    taints = {(t["key"], t["effect"]) for t in node["spec"]["taints"]}
    assert {("team", "NoSchedule"), ("karpenter.sh/unregistered", "NoExecute")} <= taints
    # Adopted, never launched again: one instance in EC2, none of CAPA's own.
    assert env.capa.run_instances == 0
    assert len(world.aws.instances()) == 1


def test_an_aws_machine_without_a_provider_id_makes_capa_launch_its_own_instance(
    env: Emulated,
) -> None:
    world = env.world
    env.launch("general-a")
    # What a plugin writing the AWSMachine before its fleet returned would leave.
    world.server.create(
        AWS_MACHINES,
        {
            "apiVersion": AWS_MACHINES.api_version,
            "kind": "AWSMachine",
            "metadata": {"name": "stray", "namespace": NAMESPACE},
            "spec": {"instanceType": "m5.large", "ami": {"id": world.aws.ami}},
        },
    )
    machine = dict(world.machine("general-a"))
    world.server.create(
        world.capi.machines,
        {
            "apiVersion": machine["apiVersion"],
            "kind": "Machine",
            "metadata": {"name": "stray", "namespace": NAMESPACE},
            "spec": {
                "clusterName": "prod",
                "bootstrap": {"dataSecretName": machine["spec"]["bootstrap"]["dataSecretName"]},
                "infrastructureRef": {**machine["spec"]["infrastructureRef"], "name": "stray"},
            },
        },
    )
    env.driver.run_until_quiet()
    assert env.capa.run_instances == 1
    assert len(world.aws.instances()) == 2
    awsm = world.server.get(AWS_MACHINES, "stray", NAMESPACE)
    assert awsm["spec"]["providerID"].startswith("aws:///")
    assert world.machine("stray")["spec"]["providerID"] == awsm["spec"]["providerID"]


def test_deleting_the_machine_terminates_the_instance_and_removes_its_objects(
    env: Emulated,
) -> None:
    world = env.world
    provider_id = env.launch("general-a")
    world.server.delete(world.capi.machines, "general-a", NAMESPACE)
    env.driver.run_until_quiet()
    env.driver.advance(10)  # the drain takes the delete delay
    with pytest.raises(NotFound):
        world.machine("general-a")
    with pytest.raises(NotFound):
        world.server.get(AWS_MACHINES, "general-a", NAMESPACE)
    assert [
        n for n in world.server.list(NODES).items if n["spec"]["providerID"] == provider_id
    ] == []
    assert world.aws.instances() == []
    assert env.capa.terminated == 1


def test_an_instance_terminated_behind_capas_back_fails_the_machine(env: Emulated) -> None:
    world = env.world
    provider_id = env.launch("general-a")
    ec2_client().terminate_instances(InstanceIds=[provider_id.rpartition("/")[2]])
    # Any event wakes the Machine; CAPA's periodic resync would.
    world.server.patch(
        world.capi.machines, "general-a", {"metadata": {"labels": {"poke": "1"}}}, NAMESPACE
    )
    env.driver.run_until_quiet()
    machine = world.machine("general-a")
    assert machine["status"]["phase"] == "Failed"
    assert machine["status"]["deprecated"]["v1beta1"]["failureReason"] == "UpdateError"
    awsm = world.server.get(AWS_MACHINES, "general-a", NAMESPACE)
    assert awsm["status"]["instanceState"] == "terminated"
    assert env.capa.run_instances == 0
    assert world.aws.instances() == []


def metadata_options(instance_id: str) -> dict[str, Any]:
    found = ec2_client().describe_instances(InstanceIds=[instance_id])
    options = dict(found["Reservations"][0]["Instances"][0]["MetadataOptions"])
    return {k: options[k] for k in ("HttpTokens", "HttpPutResponseHopLimit", "HttpEndpoint")}


def test_without_template_options_the_instance_gets_capas_defaults_and_keeps_them(
    env: Emulated,
) -> None:
    provider_id = env.launch("general-a")
    # CAPA defaults an AWSMachine's metadata options (IMDSv1 allowed, hop limit 1) and makes
    # the instance's match after adopting it: launched otherwise, they would be rewritten.
    assert env.capa.metadata_changes == 0
    assert metadata_options(provider_id.rpartition("/")[2]) == {
        "HttpTokens": "optional",
        "HttpPutResponseHopLimit": 1,
        "HttpEndpoint": "enabled",
    }


def test_the_templates_metadata_options_are_launched_and_kept(env: Emulated) -> None:
    world = env.world
    world.server.patch(
        TEMPLATES,
        "nodes",
        {
            "spec": {
                "template": {
                    "spec": {
                        "instanceMetadataOptions": {
                            "httpTokens": "required",
                            "httpPutResponseHopLimit": 2,
                        }
                    }
                }
            }
        },
        NAMESPACE,
    )
    provider_id = env.launch("general-a")
    assert env.capa.metadata_changes == 0
    assert metadata_options(provider_id.rpartition("/")[2]) == {
        "HttpTokens": "required",
        "HttpPutResponseHopLimit": 2,
        "HttpEndpoint": "enabled",
    }
    awsm = world.server.get(AWS_MACHINES, "general-a", NAMESPACE)
    assert awsm["spec"]["instanceMetadataOptions"]["httpTokens"] == "required"


def test_capa_deletes_the_bootstrap_secret_once_the_node_registered(env: Emulated) -> None:
    world = env.world
    provider_id = env.launch("general-a")
    instance_id = provider_id.rpartition("/")[2]
    assert env.node(provider_id)  # registered
    env.driver.run_until_quiet()
    secrets = world.aws.secrets_client.list_secrets()["SecretList"]
    assert [s["Name"] for s in secrets if instance_id in s["Name"]] == []
    assert env.capa.secrets_deleted == 1
    awsm = world.server.get(AWS_MACHINES, "general-a", NAMESPACE)
    assert awsm["spec"]["cloudInit"] == {"secureSecretsBackend": "secrets-manager"}
