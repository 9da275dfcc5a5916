"""An emulated AWS for scenarios with an ``infrastructure.aws`` section (``aws-fleet``).

The ``capa`` plugin's ``CAPAFleet`` mode talks to EC2 itself, so a scenario of it needs an EC2
that launches, describes and terminates instances: moto's (a development dependency, so a user
without it is told how to get it instead of seeing an import error). moto has no Pricing API and
one constant spot price, so the scenario's price book is served from botocore ``before-call``
handlers (a handler that returns a response stands in for the HTTP call), and so are the
capacity errors the scenario injects: a ``CreateFleet`` whose cheapest override is a listed
offering answers with that offering in ``Errors[]`` and no instance, as EC2 does when the pool
is short. Everything else (the VPC, subnets, security group, AMI, fleets, instances) is moto's.

The plugin and the CAPA emulation get separate EC2 clients over the same moto backend, so the
figures (fleet calls, instances launched) count the plugin's calls alone. Credentials are fake
and set only while the block runs; nothing leaves the process.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Final

from karpenter_capi.sim.scenario.aws_launch import LaunchTemplateEffects

if TYPE_CHECKING:
    from karpenter_capi.sim.scenario.schema import AwsEnvironment

MOTO_MISSING: Final = (
    "this scenario emulates AWS with moto, which is not installed; "
    "install it with: pip install 'karpenter-capi[sim]' (part of 'karpenter-capi[all]')"
)
_FAKE_ENVIRONMENT: Final = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}


_EC2_WRITES: Final = ("Create", "Delete", "Modify", "Run", "Terminate", "Associate", "Attach")


class AwsUnavailableError(RuntimeError):
    """The scenario needs moto (or boto3), which is not installed."""


def price_list_entry(instance_type: str, price: float, region: str) -> str:
    """One ``GetProducts`` ``PriceList`` item, in AWS's layout (the fields the plugin reads)."""
    sku = f"SIM{instance_type.replace('.', '').upper()}"
    return json.dumps(
        {
            "product": {
                "productFamily": "Compute Instance",
                "attributes": {
                    "instanceType": instance_type,
                    "regionCode": region,
                    "operatingSystem": "Linux",
                    "preInstalledSw": "NA",
                    "tenancy": "Shared",
                    "capacitystatus": "Used",
                    "marketoption": "OnDemand",
                },
                "sku": sku,
            },
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    f"{sku}.TERM": {
                        "priceDimensions": {
                            f"{sku}.TERM.DIM": {
                                "unit": "Hrs",
                                "pricePerUnit": {"USD": f"{price:.10f}"},
                            }
                        },
                        "sku": sku,
                    }
                }
            },
        }
    )


def _answer(parsed: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    return SimpleNamespace(status_code=200, headers={}), parsed


# moto's instance-type catalog is static data, but each DescribeInstanceTypes serializes all of
# its ~900 types to XML and parses them back: seconds per call, paid by every plugin instance a
# test or scenario builds. Identical requests in one region get the first answer again.
_CATALOG_OPERATIONS: Final = ("DescribeInstanceTypes", "DescribeInstanceTypeOfferings")
_catalog_answers: dict[tuple[str, str, str], dict[str, Any]] = {}
_CACHE_KEY: Final = "sim_catalog_cache_key"


def amazon_linux_ami(ec2: Any) -> str:
    """An Amazon Linux 2 AMI of moto's (filtered: describing all of its 1,300 public images costs
    seconds)."""
    images = ec2.describe_images(
        Owners=["amazon"],
        Filters=[
            {"Name": "name", "Values": ["amzn2-ami-hvm-*"]},
            {"Name": "architecture", "Values": ["x86_64"]},
        ],
    )["Images"]
    return str(images[0]["ImageId"])


def serve_catalog_from_memory(client: Any) -> Any:
    """Answer ``client``'s repeated catalog calls (``_CATALOG_OPERATIONS``) from memory; returns
    it. Only the first call of each (region, operation, request) reaches moto."""
    region = client.meta.region_name
    events = client.meta.events
    for operation in _CATALOG_OPERATIONS:

        def before(
            params: Mapping[str, Any], context: dict[str, Any], _op: str = operation, **_: Any
        ) -> tuple[Any, dict[str, Any]] | None:
            key = (region, _op, json.dumps(params.get("body"), sort_keys=True, default=str))
            known = _catalog_answers.get(key)
            if known is None:
                context[_CACHE_KEY] = key
                return None
            return _answer(copy.deepcopy(known))

        def after(parsed: dict[str, Any], context: Mapping[str, Any], **_: Any) -> None:
            key = context.get(_CACHE_KEY)
            if key is not None and "Error" not in parsed:
                _catalog_answers[key] = copy.deepcopy(parsed)

        # Last, so a test's own before-call handler (an injected error) still answers first.
        events.register_last(f"before-call.ec2.{operation}", before)
        events.register(f"after-call.ec2.{operation}", after)
    return client


@dataclass
class FleetFigures:
    """What the plugin asked of EC2 Fleet during the run."""

    calls: int = 0
    refused: int = 0
    """Calls answered with injected capacity errors and no instance."""
    instances: set[str] = field(default_factory=set)
    ec2_writes: dict[str, int] = field(default_factory=dict)
    """EC2 calls of the plugin that change something, by operation."""


class SimAws:
    """``AwsClients`` for the plugin, an EC2 client for the CAPA emulation, and the figures.

    Create inside ``moto.mock_aws()`` (``emulated_aws`` does).
    """

    def __init__(self, environment: AwsEnvironment) -> None:
        import boto3

        self.environment = environment
        region = environment.region
        self.region = region
        self._ec2 = serve_catalog_from_memory(boto3.client("ec2", region_name=region))
        self._pricing = boto3.client("pricing", region_name="us-east-1")
        self._secrets = boto3.client("secretsmanager", region_name=region)
        self.emulation_ec2 = serve_catalog_from_memory(boto3.client("ec2", region_name=region))
        self.fleet = FleetFigures()
        self._request: dict[str, Any] = {}
        self._refusals = {
            (e.instance_type, e.zone, e.capacity_type): e.times for e in environment.capacity_errors
        }
        self._codes = {
            (e.instance_type, e.zone, e.capacity_type): e.code for e in environment.capacity_errors
        }
        events = self._ec2.meta.events
        events.register("before-call.ec2.DescribeSpotPriceHistory", self._spot_history)
        events.register("provide-client-params.ec2.CreateFleet", self._fleet_params)
        events.register("before-call.ec2.CreateFleet", self._create_fleet)
        events.register("after-call.ec2.CreateFleet", self._fleet_returned)
        events.register("provide-client-params.ec2", self._count_write)
        LaunchTemplateEffects(boto3.client("ec2", region_name=region)).attach(self._ec2)
        self._pricing.meta.events.register("before-call.pricing.GetProducts", self._products)
        self.values = self._network()
        self.queue_url: str | None = None
        if environment.interruption_queue is not None:
            self.queue_url = self.sqs(region).create_queue(
                QueueName=environment.interruption_queue
            )["QueueUrl"]

    def ec2(self, region: str) -> Any:
        return self._ec2

    def pricing(self, region: str) -> Any:
        return self._pricing

    def sqs(self, region: str) -> Any:
        """moto's SQS: where a scenario's EventBridge events arrive (``interruptionQueue``)."""
        import boto3

        return boto3.client("sqs", region_name=region)

    def secretsmanager(self, region: str) -> Any:
        return self._secrets

    def send_spot_warning(self, instance_id: str, zone: str, sent: datetime) -> None:
        """EventBridge's "EC2 Spot Instance Interruption Warning" for ``instance_id`` on the
        interruption queue, as the rule of Karpenter's CloudFormation template delivers it."""
        if self.queue_url is None:
            raise ValueError("the scenario has no infrastructure.aws.interruptionQueue")
        event = {
            "version": "0",
            "id": f"sim-spot-{instance_id}",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2",
            "account": "123456789012",
            "time": sent.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": self.region,
            "resources": [f"arn:aws:ec2:{zone}:instance/{instance_id}"],
            "detail": {"instance-id": instance_id, "instance-action": "terminate"},
        }
        self.sqs(self.region).send_message(QueueUrl=self.queue_url, MessageBody=json.dumps(event))

    def queue_depth(self) -> int:
        """Messages on the interruption queue, received or not (0: every one deleted)."""
        if self.queue_url is None:
            return 0
        attributes = self.sqs(self.region).get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return sum(int(value) for value in attributes.values())

    def _network(self) -> dict[str, str]:
        """A VPC with one private subnet per zone, a node security group and an AMI."""
        ec2 = self.emulation_ec2
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        values = {"aws.vpc": vpc, "aws.region": self.region}
        self.subnets: dict[str, str] = {}
        for index, zone in enumerate(self.environment.zones):
            subnet = ec2.create_subnet(
                VpcId=vpc, CidrBlock=f"10.0.{index * 16}.0/20", AvailabilityZone=zone
            )["Subnet"]["SubnetId"]
            self.subnets[zone] = subnet
            values[f"aws.subnet.{zone}"] = subnet
        values["aws.securityGroup.node"] = ec2.create_security_group(
            GroupName="nodes", Description="nodes", VpcId=vpc
        )["GroupId"]
        values["aws.ami"] = amazon_linux_ami(ec2)
        return values

    # -- botocore handlers -----------------------------------------------------------------------

    def _products(self, **_: Any) -> Any:
        prices = self.environment.on_demand_prices
        return _answer(
            {
                "FormatVersion": "aws_v1",
                "PriceList": [
                    price_list_entry(name, price, self.region) for name, price in prices.items()
                ],
            }
        )

    def _spot_history(self, **_: Any) -> Any:
        stamp = datetime(2026, 1, 1, tzinfo=UTC)
        history = [
            {
                "AvailabilityZone": zone,
                "InstanceType": instance_type,
                "ProductDescription": "Linux/UNIX",
                "SpotPrice": f"{price:.6f}",
                "Timestamp": stamp,
            }
            for instance_type, zones in self.environment.spot_prices.items()
            for zone, price in zones.items()
        ]
        return _answer({"SpotPriceHistory": history, "NextToken": ""})

    def _fleet_params(self, params: Mapping[str, Any], **_: Any) -> None:
        # before-call sees the serialized request; the parameters are seen here, just before.
        self._request = dict(params)

    def _create_fleet(self, **_: Any) -> Any:
        self.fleet.calls += 1
        params = self._request
        capacity_type = params["TargetCapacitySpecification"]["DefaultTargetCapacityType"]
        overrides = params["LaunchTemplateConfigs"][0]["Overrides"]
        zones = {subnet: zone for zone, subnet in self.subnets.items()}
        if not overrides:
            return None
        first = overrides[0]
        offering = (first["InstanceType"], zones.get(first["SubnetId"], ""), capacity_type)
        if self._refusals.get(offering, 0) <= 0:
            return None
        self._refusals[offering] -= 1
        self.fleet.refused += 1
        error = {
            "LaunchTemplateAndOverrides": {"Overrides": dict(first)},
            "Lifecycle": capacity_type,
            "ErrorCode": self._codes[offering],
            "ErrorMessage": f"There is no {capacity_type} capacity for {offering[0]} "
            f"in {offering[1]}",
        }
        return _answer({"FleetId": f"fleet-refused-{self.fleet.calls}", "Errors": [error]})

    def _count_write(self, model: Any, **_: Any) -> None:
        if model.name.startswith(_EC2_WRITES):
            self.fleet.ec2_writes[model.name] = self.fleet.ec2_writes.get(model.name, 0) + 1

    def _fleet_returned(self, parsed: Mapping[str, Any], **_: Any) -> None:
        for launched in parsed.get("Instances") or []:
            self.fleet.instances.update(launched.get("InstanceIds") or [])

    # -- figures ---------------------------------------------------------------------------------

    def instances(self) -> list[dict[str, Any]]:
        """Every instance moto knows, whatever its state."""
        found = self.emulation_ec2.describe_instances()
        return [i for r in found["Reservations"] for i in r["Instances"]]

    def figures(self, kube_writes: int) -> dict[str, Any]:
        """Fleet calls and Kubernetes writes per launched node, and what EC2 holds at the end."""
        launched = len(self.fleet.instances)
        everything = self.instances()
        live = [i for i in everything if i["State"]["Name"] in ("pending", "running")]
        by_capa = [
            i
            for i in everything
            if not any(t["Key"] == "karpenter.sh/nodeclaim" for t in i.get("Tags") or [])
        ]
        return {
            "fleet_calls": self.fleet.calls,
            "fleet_capacity_errors": self.fleet.refused,
            "nodes_launched": launched,
            "fleet_calls_per_node": round(self.fleet.calls / launched, 3) if launched else 0.0,
            "ec2_writes": dict(sorted(self.fleet.ec2_writes.items())),
            "ec2_writes_per_node": (
                round(sum(self.fleet.ec2_writes.values()) / launched, 3) if launched else 0.0
            ),
            "kube_writes": kube_writes,
            "kube_writes_per_node": round(kube_writes / launched, 3) if launched else 0.0,
            "instances_live": len(live),
            "instances_terminated": sum(
                1 for i in everything if i["State"]["Name"] == "terminated"
            ),
            "instances_launched_by_capa": len(by_capa),
            "instances": sorted(
                (
                    {
                        "id": i["InstanceId"],
                        "instance_type": i["InstanceType"],
                        "zone": i["Placement"]["AvailabilityZone"],
                        "capacity_type": "spot"
                        if i.get("InstanceLifecycle") == "spot"
                        else "on-demand",
                        "state": i["State"]["Name"],
                    }
                    for i in everything
                ),
                key=lambda row: (row["state"], row["instance_type"], row["zone"], row["id"]),
            ),
        }


def substitute(value: Any, values: Mapping[str, str]) -> Any:
    """``value`` with every ``${name}`` in its strings replaced from ``values``."""
    if isinstance(value, str):
        for name, replacement in values.items():
            value = value.replace("${" + name + "}", replacement)
        return value
    if isinstance(value, Mapping):
        return {k: substitute(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, values) for v in value]
    return value


@contextmanager
def emulated_aws(environment: AwsEnvironment) -> Iterator[SimAws]:
    """moto's EC2 and the scenario's prices for the duration of the block."""
    try:
        import boto3  # noqa: F401
        from moto import mock_aws
    except ImportError as exc:
        raise AwsUnavailableError(f"{MOTO_MISSING} ({exc})") from None
    saved = {name: os.environ.get(name) for name in _FAKE_ENVIRONMENT}
    os.environ.update(_FAKE_ENVIRONMENT)
    try:
        with mock_aws():
            yield SimAws(environment)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
