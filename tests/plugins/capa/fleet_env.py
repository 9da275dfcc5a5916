"""A CAPAFleet world for the capa plugin's launch tests: moto's EC2 with a VPC, a Cluster API
cluster that names it, and the generic_capi + capa plugin stack over an in-memory API.

``FleetAws`` records every ``CreateFleet`` botocore sent (its parameters as given to the
client, through botocore's ``provide-client-params`` event) and can answer the next ones with
injected ``Errors[]`` (a ``before-call`` handler returning a response short-circuits the HTTP
call, as a real capacity shortage would answer) while everything else is moto's.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import boto3

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodeclaim import NodeClaim
from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass
from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.discovery import capi_resources
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    NODECLAIMS,
    NODEPOOLS,
    SECRETS,
)
from karpenter_capi.core.lifecycle.launch import claim_requirements, launchable_instance_types
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.plugins.capa.plugin import CapaPlugin
from karpenter_capi.plugins.generic_capi.plugin import GenericCapiPlugin
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.scenario.aws import amazon_linux_ami, serve_catalog_from_memory
from karpenter_capi.sim.scenario.aws_launch import LaunchTemplateEffects
from tests.support import operator_world
from tests.support.aws import REGION, StubbedAws

INFRA = "infrastructure.cluster.x-k8s.io"
BOOTSTRAP = "bootstrap.cluster.x-k8s.io"
CLUSTER = "prod"
NAMESPACE = "capi"
CLOUD_INIT = b"#cloud-config\nruncmd: [kubeadm join --token abc.def]\n"


class FleetAws(StubbedAws):
    """moto's EC2 (catalog, VPC, fleets, instances) with recorded and injectable fleets."""

    def __init__(self, region: str = REGION) -> None:
        super().__init__(region)
        self.fleet_requests: list[dict[str, Any]] = []
        self.fleet_answers: list[dict[str, Any]] = []
        events = self.catalog.meta.events
        events.register("provide-client-params.ec2.CreateFleet", self._record)
        events.register("before-call.ec2.CreateFleet", self._answer)
        LaunchTemplateEffects(boto3.client("ec2", region_name=region)).attach(self.catalog)
        ec2 = self.catalog
        self.vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        self.subnets = {
            zone: ec2.create_subnet(VpcId=self.vpc, CidrBlock=cidr, AvailabilityZone=zone)[
                "Subnet"
            ]["SubnetId"]
            for zone, cidr in (("us-east-1a", "10.0.1.0/24"), ("us-east-1b", "10.0.2.0/24"))
        }
        self.public_subnet = ec2.create_subnet(
            VpcId=self.vpc, CidrBlock="10.0.9.0/24", AvailabilityZone="us-east-1c"
        )["Subnet"]["SubnetId"]
        self.node_sg = ec2.create_security_group(
            GroupName="prod-node", Description="nodes", VpcId=self.vpc
        )["GroupId"]
        self.lb_sg = ec2.create_security_group(
            GroupName="prod-lb", Description="load balancers", VpcId=self.vpc
        )["GroupId"]
        self.extra_sg = ec2.create_security_group(
            GroupName="prod-extra", Description="extra", VpcId=self.vpc
        )["GroupId"]
        self.ami = amazon_linux_ami(ec2)

    def _record(self, params: dict[str, Any], **_: Any) -> None:
        self.fleet_requests.append(params)

    def _answer(self, **_: Any) -> Any:
        if not self.fleet_answers:
            return None
        return (SimpleNamespace(status_code=200, headers={}), self.fleet_answers.pop(0))

    def refuse_next_fleet(self, errors: Sequence[tuple[str, str, str]]) -> None:
        """The next CreateFleet launches nothing and reports ``(type, subnet, code)`` errors."""
        zones = {subnet: zone for zone, subnet in self.subnets.items()}
        self.fleet_answers.append(
            {
                "FleetId": "fleet-refused",
                "Errors": [
                    {
                        "LaunchTemplateAndOverrides": {
                            "Overrides": {
                                "InstanceType": instance_type,
                                "SubnetId": subnet,
                                "AvailabilityZone": zones.get(subnet, ""),
                            }
                        },
                        "Lifecycle": "spot",
                        "ErrorCode": code,
                        "ErrorMessage": f"no {instance_type} capacity",
                    }
                    for instance_type, subnet, code in errors
                ],
                "Instances": [],
            }
        )

    def instances(self, nodeclaim: str | None = None) -> list[dict[str, Any]]:
        """Live instances (optionally those tagged for ``nodeclaim``)."""
        filters: list[dict[str, Any]] = [
            {"Name": "instance-state-name", "Values": ["pending", "running"]}
        ]
        if nodeclaim is not None:
            filters.append({"Name": "tag:karpenter.sh/nodeclaim", "Values": [nodeclaim]})
        found = self.catalog.describe_instances(Filters=filters)
        return [i for r in found["Reservations"] for i in r["Instances"]]


def manifests(aws: FleetAws, *, instance_profile: str = "nodes.example") -> list[JsonObject]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": CLUSTER, "namespace": NAMESPACE},
            "spec": {
                "infrastructureRef": {"apiGroup": INFRA, "kind": "AWSCluster", "name": CLUSTER},
                "topology": {"version": "v1.31.2"},
            },
        },
        {
            "apiVersion": f"{INFRA}/v1beta2",
            "kind": "AWSCluster",
            "metadata": {"name": CLUSTER, "namespace": NAMESPACE},
            "spec": {
                "region": REGION,
                "network": {
                    "subnets": [
                        *(
                            {"id": subnet, "availabilityZone": zone, "isPublic": False}
                            for zone, subnet in aws.subnets.items()
                        ),
                        {
                            "id": aws.public_subnet,
                            "availabilityZone": "us-east-1c",
                            "isPublic": True,
                        },
                    ]
                },
            },
            "status": {
                "networkStatus": {
                    "securityGroups": {
                        "node": {"id": aws.node_sg},
                        "lb": {"id": aws.lb_sg},
                        "controlplane": {"id": "sg-control-plane"},
                    }
                }
            },
        },
        {
            "apiVersion": f"{INFRA}/v1beta2",
            "kind": "AWSMachineTemplate",
            "metadata": {"name": "nodes", "namespace": NAMESPACE},
            "spec": {
                "template": {
                    "spec": {
                        "instanceType": "m5.large",
                        "ami": {"id": aws.ami},
                        "iamInstanceProfile": instance_profile,
                        "additionalSecurityGroups": [{"id": aws.extra_sg}],
                        "sshKeyName": "",
                    }
                }
            },
        },
        {
            "apiVersion": f"{BOOTSTRAP}/v1beta2",
            "kind": "KubeadmConfigTemplate",
            "metadata": {"name": "nodes", "namespace": NAMESPACE},
            "spec": {
                "template": {
                    "spec": {
                        "joinConfiguration": {
                            "nodeRegistration": {"kubeletExtraArgs": [{"name": "v", "value": "2"}]}
                        }
                    }
                }
            },
        },
    ]


def fleet_nodeclass(name: str = "fleet") -> JsonObject:
    return {
        "apiVersion": wellknown.NODECLASS_API_VERSION,
        "kind": wellknown.NODECLASS_KIND,
        "metadata": {"name": name},
        "spec": {
            "launch": {
                "mode": "CAPAFleet",
                "clusterName": CLUSTER,
                "namespace": NAMESPACE,
                "infrastructureTemplateRef": {"kind": "AWSMachineTemplate", "name": "nodes"},
                "bootstrapConfigTemplateRef": {"kind": "KubeadmConfigTemplate", "name": "nodes"},
            }
        },
    }


class FleetWorld:
    """An in-memory management cluster, moto's EC2 and the two plugins."""

    def __init__(self, aws: FleetAws) -> None:
        self.clock = FakeClock()
        self.server: InMemoryAPIServer = new_cluster(clock=self.clock)
        self.aws = aws
        self.capa = CapaPlugin(aws, background_refresh=False)
        self.server.apply_manifests(manifests(aws))
        self.nodeclass_raw = self.server.create(CLUSTER_API_NODE_CLASSES, fleet_nodeclass())
        self.nodepool_raw = self.server.create(
            NODEPOOLS, operator_world.nodepool(nodeclass="fleet")
        )
        self.plugins = self.new_plugins()
        self.capi = capi_resources(self.server, {})

    def new_plugins(self, capa: CapaPlugin | None = None) -> Plugins:
        """A fresh plugin stack (a restarted controller: nothing in memory)."""
        if capa is not None:
            self.capa = capa
        return Plugins.from_objects(
            [("generic_capi", GenericCapiPlugin), ("capa", self.capa)],
            PluginEnvironment(
                workload=self.server,
                management=self.server,
                clock=self.clock,
                logger=logging.getLogger("test.capa.fleet"),
                options={},
            ),
        )

    @property
    def nodeclass(self) -> ClusterAPINodeClass:
        return ClusterAPINodeClass.model_validate(
            self.server.get(CLUSTER_API_NODE_CLASSES, "fleet")
        )

    def inventory(self) -> list[InstanceType]:
        return self.plugins.instance_types(
            self.nodeclass, NodePool.model_validate(self.nodepool_raw)
        )

    def nodeclaim(
        self,
        name: str,
        *,
        instance_types: Sequence[str] = ("m5.large", "c5.large", "m6i.large"),
        capacity_types: Sequence[str] = ("spot", "on-demand"),
        zones: Sequence[str] | None = None,
    ) -> JsonObject:
        requirements: list[dict[str, Any]] = [
            {
                "key": wellknown.LABEL_INSTANCE_TYPE,
                "operator": "In",
                "values": list(instance_types),
            },
            {
                "key": wellknown.LABEL_CAPACITY_TYPE,
                "operator": "In",
                "values": list(capacity_types),
            },
        ]
        if zones:
            requirements.append(
                {"key": wellknown.LABEL_TOPOLOGY_ZONE, "operator": "In", "values": list(zones)}
            )
        return self.server.create(
            NODECLAIMS,
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "metadata": {"name": name, "labels": {wellknown.LABEL_NODEPOOL: "general"}},
                "spec": {
                    "nodeClassRef": {
                        "group": wellknown.NODECLASS_GROUP,
                        "kind": wellknown.NODECLASS_KIND,
                        "name": "fleet",
                    },
                    "requirements": requirements,
                    "taints": [{"key": "team", "value": "a", "effect": "NoSchedule"}],
                },
            },
        )

    def claim(self, name: str) -> NodeClaim:
        return NodeClaim.model_validate(self.server.get(NODECLAIMS, name))

    def launchable(self, name: str) -> list[InstanceType]:
        raw = self.server.get(NODECLAIMS, name)
        return launchable_instance_types(self.inventory(), claim_requirements(raw))

    def create(self, name: str, plugins: Plugins | None = None) -> Any:
        plugins = plugins or self.plugins
        return plugins.create(self.claim(name), self.launchable(name), self.nodeclass)

    def machine(self, name: str) -> JsonObject:
        return self.server.get(self.capi.machines, name, NAMESPACE)

    def bootstrap_ready(self, name: str) -> None:
        """What CABPK and CAPI do: the bootstrap secret, its name on the Machine."""
        secret = f"{name}-bootstrap"
        self.server.create(
            SECRETS,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": secret, "namespace": NAMESPACE},
                "data": {
                    "value": base64.b64encode(CLOUD_INIT).decode(),
                    "format": base64.b64encode(b"cloud-config").decode(),
                },
            },
        )
        self.server.patch(
            self.capi.machines,
            name,
            {"spec": {"bootstrap": {"dataSecretName": secret}}},
            NAMESPACE,
        )


def tags_of(request: Mapping[str, Any], kind: str = "instance") -> dict[str, str]:
    for spec in request.get("TagSpecifications") or []:
        if spec["ResourceType"] == kind:
            return {t["Key"]: t["Value"] for t in spec["Tags"]}
    return {}


def ec2_client(region: str = REGION) -> Any:
    return serve_catalog_from_memory(boto3.client("ec2", region_name=region))
