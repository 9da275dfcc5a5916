"""capa describes AWSMachineTemplates for generic_capi: shape, zones and prices from AWS.

EC2's catalog comes from moto, prices from botocore Stubbers (see ``tests.support.aws``); nothing
reaches the network.
"""

from __future__ import annotations

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.instancetype import Offering
from karpenter_capi.core.observability.metrics import Metrics
from karpenter_capi.core.values.resources import ResourceList
from karpenter_capi.plugins.capa.catalog import instance_type_info
from karpenter_capi.plugins.capa.eks import eks_overhead
from karpenter_capi.plugins.capa.pricing import parse_products, pricing_region
from karpenter_capi.plugins.capa.region import CONTROL_PLANE_GROUP
from karpenter_capi.sim.apiserver.capi_crds import crd
from tests.plugins.capa.builders import (
    INFRA,
    PRICE,
    P,
    Stack,
    aws_template,
    cluster,
    machine_deployment,
    only,
)
from tests.support.aws import StubbedAws


def test_an_m5_large_machine_deployment_resolves_to_its_aws_shape_zone_and_price(
    aws: StubbedAws,
) -> None:
    aws.queue_prices()
    stack = Stack(aws)
    stack.add(
        *cluster(),
        aws_template("m5-large", "m5.large"),
        aws_template("m5-large-spot", "m5.large", spot=True),
        machine_deployment("workers-a", "m5-large"),
        machine_deployment("workers-a-spot", "m5-large-spot"),
    )
    inventory = stack.inventory()
    assert inventory.problems == []
    it = only(inventory.instance_types, "m5.large")
    assert it.capacity.to_dict() == {"cpu": "2", "memory": "8Gi", "pods": "29"}
    assert it.requirements[wellknown.LABEL_ARCH] == frozenset({"amd64"})
    assert it.requirements[wellknown.LABEL_OS] == frozenset({"linux"})
    assert it.source == "AWS"
    assert it.offerings == (
        Offering(zone="us-east-1a", capacity_type="on-demand", price=0.096),
        Offering(zone="us-east-1a", capacity_type="spot", price=0.0365),
    )
    assert [o.price_source for o in it.offerings] == ["AWS", "AWS"]
    # Prices no longer need estimating; the Pricing endpoint of us-east-1 was asked.
    assert not [n for n in inventory.notices if n.reason == "PriceEstimated"]
    assert aws.pricing_regions == ["us-east-1"]


def test_annotations_override_the_aws_description(aws: StubbedAws) -> None:
    aws.queue_prices()
    stack = Stack(aws)
    stack.add(
        *cluster(),
        aws_template("m5-large", "m5.large"),
        machine_deployment(
            "negotiated",
            "m5-large",
            annotations={
                PRICE: "0.05",
                P + "memory": "7Gi",
                P + "labels": "kubernetes.io/arch=amd64,team=ml",
            },
        ),
    )
    it = only(stack.inventory().instance_types, "m5.large")
    assert it.capacity.to_dict() == {"cpu": "2", "memory": "7Gi", "pods": "29"}
    assert it.requirements["team"] == frozenset({"ml"})
    assert it.source == "annotation+AWS"
    [offering] = it.offerings
    assert (offering.price, offering.price_source) == (0.05, "annotation")


def test_a_failure_domain_where_aws_does_not_sell_the_type_is_unavailable(
    aws: StubbedAws,
) -> None:
    aws.queue_prices()
    stack = Stack(aws)
    # m5.large is not offered in us-east-1e (moto, like AWS).
    stack.add(
        *cluster(),
        aws_template("m5-large", "m5.large"),
        machine_deployment("workers-e", "m5-large", zone="us-east-1e"),
    )
    inventory = stack.inventory()
    [offering] = only(inventory.instance_types, "m5.large").offerings
    assert not offering.available
    [notice] = [n for n in inventory.notices if n.reason == "OfferingNotAvailable"]
    assert "not offered as on-demand in zone us-east-1e" in notice.message


def test_a_failing_pricing_api_keeps_the_last_good_prices(aws: StubbedAws) -> None:
    aws.queue_prices()
    stack = Stack(aws, options={"capa": {"price-refresh-interval": "3600"}})
    stack.add(*cluster(), aws_template("m5-large", "m5.large"), machine_deployment("w", "m5-large"))
    assert only(stack.inventory().instance_types, "m5.large").offerings[0].price == 0.096
    aws.queue_pricing_failure()
    stack.clock.advance(3600)
    [offering] = only(stack.inventory().instance_types, "m5.large").offerings
    assert (offering.price, offering.price_source) == (0.096, "AWS")
    aws.pricing_stub.assert_no_pending_responses()


def test_without_any_price_the_shape_still_comes_from_aws_and_the_price_is_estimated(
    aws: StubbedAws,
) -> None:
    aws.queue_pricing_failure()
    stack = Stack(aws, options={"capa": {"price-store": "none"}})
    stack.add(*cluster(), aws_template("m5-large", "m5.large"), machine_deployment("w", "m5-large"))
    inventory = stack.inventory()
    it = only(inventory.instance_types, "m5.large")
    assert it.source == "AWS"
    assert it.offerings[0].price_source == "estimate"
    [notice] = [n for n in inventory.notices if n.reason == "PriceEstimated"]
    assert "AWS has no price for it yet" in notice.message


def test_description_errors_are_notices_or_problems_never_crashes(aws: StubbedAws) -> None:
    aws.queue_prices()
    stack = Stack(aws)
    # (A template without instanceType cannot be stored: CAPA's CRD requires it and serves no
    # open v1beta1 any more; tests/sim/apiserver/test_capa_schemas.py shows the refusal.)
    stack.add(
        *cluster(region=None),
        aws_template("unknown", "m5.enormous"),
        aws_template("m5-large", "m5.large"),
        machine_deployment("unknown", "unknown"),
        machine_deployment(
            "no-region", "m5-large", annotations={P + "cpu": "2", P + "memory": "8Gi"}
        ),
    )
    inventory = stack.inventory()
    problems = {p.name: p for p in inventory.problems}
    assert problems["unknown"].reason == "MachineTemplateNotDescribed"
    # No region anywhere; the annotations still describe the node, so it is usable, with a note.
    [notice] = [
        n
        for n in inventory.notices
        if n.name == "no-region" and n.reason == "MachineTemplateNotDescribed"
    ]
    assert "capa.region" in notice.message
    assert not problems.get("no-region")


def test_an_unknown_instance_type_is_named(aws: StubbedAws) -> None:
    aws.queue_prices()
    stack = Stack(aws)
    stack.add(*cluster(), aws_template("bad", "m5.enormous"), machine_deployment("bad", "bad"))
    [problem] = stack.inventory().problems
    assert "m5.enormous is not sold in us-east-1" in problem.message


def test_region_option_and_max_pods_option(aws: StubbedAws) -> None:
    aws.queue_prices()
    stack = Stack(aws, options={"capa": {"region": "us-east-1", "max-pods": "110"}})
    stack.add(
        *cluster(region=None),
        aws_template("m5-large", "m5.large"),
        machine_deployment("w", "m5-large"),
    )
    it = only(stack.inventory().instance_types, "m5.large")
    assert it.capacity.to_dict()["pods"] == "110"
    assert it.offerings[0].price == 0.096


def test_cloud_calls_are_timed_and_the_price_age_is_exported(aws: StubbedAws) -> None:
    aws.queue_prices()
    metrics = Metrics()
    stack = Stack(aws, metrics=metrics)
    stack.add(*cluster(), aws_template("m5-large", "m5.large"), machine_deployment("w", "m5-large"))
    stack.inventory()
    stack.clock.advance(120)
    stack.inventory()
    text = metrics.render().decode()
    for api in ("DescribeInstanceTypes", "DescribeInstanceTypeOfferings", "GetProducts"):
        assert f'method="{api}",provider="capa"' in text
    assert 'karpenter_capi_pricing_age_seconds{plugin="capa",region="us-east-1"} 120.0' in text


def test_accelerators_and_architectures_from_describe_instance_types() -> None:
    gpu = instance_type_info(
        {
            "InstanceType": "g5.xlarge",
            "VCpuInfo": {"DefaultVCpus": 4},
            "MemoryInfo": {"SizeInMiB": 16384},
            "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
            "GpuInfo": {"Gpus": [{"Name": "A10G", "Manufacturer": "NVIDIA", "Count": 1}]},
            "NetworkInfo": {"MaximumNetworkInterfaces": 4, "Ipv4AddressesPerInterface": 15},
        }
    )
    assert gpu is not None
    assert gpu.capacity().to_dict() == {
        "cpu": "4",
        "memory": "16Gi",
        "pods": "58",
        "nvidia.com/gpu": "1",
    }
    trainium = instance_type_info(
        {
            "InstanceType": "trn1.2xlarge",
            "VCpuInfo": {"DefaultVCpus": 8},
            "MemoryInfo": {"SizeInMiB": 32768},
            "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
            "NeuronInfo": {"NeuronDevices": [{"Count": 1, "Name": "Trainium"}]},
        }
    )
    assert trainium is not None
    assert trainium.accelerators == {"aws.amazon.com/neuron": 1}
    assert trainium.max_pods() == 110  # no network data
    graviton = instance_type_info(
        {
            "InstanceType": "m7g.large",
            "VCpuInfo": {"DefaultVCpus": 2},
            "MemoryInfo": {"SizeInMiB": 8192},
            "ProcessorInfo": {"SupportedArchitectures": ["arm64"]},
            "GpuInfo": {"Gpus": [{"Manufacturer": "AMD", "Count": 2}]},
        }
    )
    assert graviton is not None
    assert (graviton.arch, dict(graviton.accelerators)) == ("arm64", {"amd.com/gpu": 2})
    mac = {
        "InstanceType": "mac2.metal",
        "VCpuInfo": {"DefaultVCpus": 12},
        "MemoryInfo": {"SizeInMiB": 16384},
        "ProcessorInfo": {"SupportedArchitectures": ["arm64_mac"]},
    }
    assert instance_type_info(mac) is None


def test_pricing_endpoint_regions_and_product_parsing() -> None:
    assert pricing_region("us-west-2") == "us-east-1"
    assert pricing_region("ap-northeast-1") == "ap-south-1"
    assert pricing_region("eu-west-1") == "eu-central-1"
    assert pricing_region("me-south-1") == "eu-central-1"
    assert pricing_region("cn-north-1") == "cn-northwest-1"
    dual = (
        '{"product": {"attributes": {"instanceType": "m5.large"}}, "terms": {"OnDemand": '
        '{"A": {"priceDimensions": {"B": {"pricePerUnit": {"USD": "0.0000000000"}}, '
        '"C": {"pricePerUnit": {"USD": "0.0960000000"}}}}}}}'
    )
    assert parse_products([dual, '{"product": {}}']) == {"m5.large": 0.096}


def test_an_eks_cluster_takes_its_region_from_the_managed_control_plane(aws: StubbedAws) -> None:
    aws.queue_prices()
    stack = Stack(aws)
    stack.server.apply_manifests(
        [
            crd(INFRA, "AWSManagedCluster", "awsmanagedclusters", ("v1beta2",)),
            crd(
                CONTROL_PLANE_GROUP,
                "AWSManagedControlPlane",
                "awsmanagedcontrolplanes",
                ("v1beta2",),
            ),
        ]
    )
    stack.add(
        {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": "prod", "namespace": "default"},
            "spec": {
                "infrastructureRef": {
                    "apiGroup": INFRA,
                    "kind": "AWSManagedCluster",
                    "name": "prod",
                },
                "controlPlaneRef": {
                    "apiGroup": CONTROL_PLANE_GROUP,
                    "kind": "AWSManagedControlPlane",
                    "name": "prod-cp",
                },
            },
        },
        {
            "apiVersion": f"{INFRA}/v1beta2",
            "kind": "AWSManagedCluster",
            "metadata": {"name": "prod", "namespace": "default"},
            "spec": {},
        },
        {
            "apiVersion": f"{CONTROL_PLANE_GROUP}/v1beta2",
            "kind": "AWSManagedControlPlane",
            "metadata": {"name": "prod-cp", "namespace": "default"},
            "spec": {"region": "us-east-1", "eksClusterName": "prod"},
        },
        aws_template("m5-large", "m5.large"),
        machine_deployment("w", "m5-large"),
    )
    instance_type = only(stack.inventory().instance_types, "m5.large")
    [offering] = instance_type.offerings
    assert (offering.zone, offering.price) == ("us-east-1a", 0.096)
    # An EKS node keeps what EKS's node image reserves: 6% + 1% of the two cores, 255Mi + 11Mi
    # for each of the 29 pods the VPC CNI allows, and the eviction threshold.
    overhead = instance_type.overhead
    assert overhead.source == "EKS"
    assert overhead.kube_reserved.to_dict() == {"cpu": "70m", "memory": "574Mi"}
    assert overhead.eviction_threshold.to_dict() == {"memory": "100Mi"}
    assert instance_type.allocatable.milli("cpu") == 1930


def test_a_self_managed_cluster_on_aws_gets_no_eks_reservation(aws: StubbedAws) -> None:
    aws.queue_prices()
    stack = Stack(aws)
    stack.add(*cluster(), aws_template("m5-large", "m5.large"), machine_deployment("w", "m5-large"))
    instance_type = only(stack.inventory().instance_types, "m5.large")
    assert instance_type.overhead.source == "kubeadm default"
    assert instance_type.overhead.kube_reserved.to_dict() == {}
    assert instance_type.allocatable.milli("cpu") == 2000
    assert instance_type.allocatable.value("memory") == (8192 - 100) * 1024**2


def test_the_eks_formula_grows_with_the_node() -> None:
    capacity = ResourceList.parse(
        {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    )
    overhead = eks_overhead(capacity)
    # 60 + 10 + 2 x 5 + 12 x 2.5 = 110m; 255Mi + 11Mi x 110 pods; 1Gi of disk.
    assert overhead.kube_reserved.to_dict() == {
        "cpu": "110m",
        "memory": "1465Mi",
        "ephemeral-storage": "1Gi",
    }
    assert overhead.eviction_threshold.to_dict() == {"memory": "100Mi", "ephemeral-storage": "10Gi"}
