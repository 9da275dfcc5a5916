"""In the simulator, capa's AWS prices pick the cheaper of two AWSMachineTemplates.

Two MachineDeployments, backed by AWSMachineTemplates for ``m6g.large`` (Graviton, 2 vCPU /
8 GiB, $0.077/h) and ``c5.large`` (2 vCPU / 4 GiB, $0.085/h), carry no price annotation. The
shape-based estimate would pick the smaller c5.large; AWS's prices (moto's EC2 catalog, the
Pricing API and spot history from botocore Stubbers) make m6g.large the cheaper, and that is
the one scaled. The scale-from-zero shape annotations stay, because the simulated kubelet sizes
its Nodes from them; prices come only from AWS.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from karpenter_capi.core.kube.resources import MACHINE_DEPLOYMENTS, NODECLAIMS
from karpenter_capi.plugins.capa.plugin import CapaPlugin
from karpenter_capi.plugins.generic_capi.plugin import GenericCapiPlugin
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.scenario.runner import run
from karpenter_capi.sim.scenario.schema import parse_scenario_text
from tests.support.aws import StubbedAws, fake_credentials, stubbed_aws

_MD = """\
  - apiVersion: cluster.x-k8s.io/v1beta2
    kind: MachineDeployment
    metadata:
      name: {name}
      namespace: default
      labels: {{node.cluster.x-k8s.io/karpenter-member: '', pool: aws}}
      annotations:
        capacity.cluster-autoscaler.kubernetes.io/cpu: '2'
        capacity.cluster-autoscaler.kubernetes.io/memory: {memory}
        capacity.cluster-autoscaler.kubernetes.io/labels: kubernetes.io/arch={arch}
        cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size: '10'
    spec:
      clusterName: aws
      replicas: 0
      template:
        spec:
          clusterName: aws
          version: v1.31.0
          failureDomain: us-east-1a
          bootstrap:
            configRef: {{apiGroup: bootstrap.cluster.x-k8s.io, kind: KubeadmConfig, name: w}}
          infrastructureRef:
            apiGroup: infrastructure.cluster.x-k8s.io
            kind: AWSMachineTemplate
            name: {name}
  - apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
    kind: AWSMachineTemplate
    metadata: {{name: {name}, namespace: default}}
    spec:
      template:
        spec: {{instanceType: {instance_type}, iamInstanceProfile: nodes}}
"""

SCENARIO = (
    """\
name: aws-cheapest
description: Two AWS MachineDeployments without price annotations; AWS prices decide.
infrastructure:
  manifests:
  - apiVersion: cluster.x-k8s.io/v1beta2
    kind: Cluster
    metadata: {name: aws, namespace: default}
    spec:
      infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: AWSCluster, name: aws}
  - apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
    kind: AWSCluster
    metadata: {name: aws, namespace: default}
    spec: {region: us-east-1}
"""
    + _MD.format(name="graviton", memory="8Gi", arch="arm64", instance_type="m6g.large")
    + _MD.format(name="compute", memory="4Gi", arch="amd64", instance_type="c5.large")
    + """\
  - apiVersion: karpenter.cluster.x-k8s.io/v1alpha1
    kind: ClusterAPINodeClass
    metadata: {name: aws}
    spec:
      scalableResourceSelector:
        matchLabels: {pool: aws}
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: aws}
    spec:
      template:
        spec:
          nodeClassRef: {group: karpenter.cluster.x-k8s.io, kind: ClusterAPINodeClass, name: aws}
          requirements:
          - {key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}
          expireAfter: Never
      disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: Never}
workloads:
- {name: web, replicas: 2, cpu: 500m, memory: 1Gi}
"""
)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubbedAws]:
    fake_credentials(monkeypatch)
    with stubbed_aws() as doubles:
        yield doubles


def test_the_cheaper_aws_machine_deployment_is_scaled_and_pods_bind(aws: StubbedAws) -> None:
    aws.queue_prices()
    servers: list[InMemoryAPIServer] = []
    result = run(
        parse_scenario_text(SCENARIO, "aws-cheapest.yaml"),
        until=300,
        plugins=("generic_capi", "capa"),
        plugin_objects=[
            ("generic_capi", GenericCapiPlugin),
            ("capa", CapaPlugin(aws, background_refresh=False)),
        ],
        on_cluster=servers.append,
    )
    assert result.errors == []
    assert result.pods_bound == result.pods_total == 2
    [server] = servers
    replicas = {
        md["metadata"]["name"]: md["spec"].get("replicas")
        for md in server.list(MACHINE_DEPLOYMENTS, "default").items
    }
    assert replicas == {"graviton": 1, "compute": 0}
    [claim] = server.list(NODECLAIMS).items
    assert claim["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "m6g.large"
    # Priced as capa priced it (no annotation to fall back on): the cheaper type's AWS price.
    assert result.cost_per_hour == pytest.approx(0.077)
    assert [(row.instance_type, row.price_per_hour) for row in result.capacity] == [
        ("m6g.large", pytest.approx(0.077))
    ]
    aws.pricing_stub.assert_no_pending_responses()


def test_without_capa_the_shape_estimate_would_have_picked_the_other_one() -> None:
    servers: list[InMemoryAPIServer] = []
    result = run(
        parse_scenario_text(SCENARIO, "aws-cheapest.yaml"),
        until=300,
        plugins=("generic_capi",),
        on_cluster=servers.append,
    )
    assert result.pods_bound == 2
    replicas = {
        md["metadata"]["name"]: md["spec"].get("replicas")
        for md in servers[0].list(MACHINE_DEPLOYMENTS, "default").items
    }
    assert replicas == {"graviton": 0, "compute": 1}
    # Priced by generic_capi's shape-based estimate, the price the solver chose by.
    assert result.cost_per_hour > 0
