"""The whole operator killed between writes of CAPAFleet launches and deletes, under the stepped
runtime, and restarted from API state alone: no instance leaks, none is launched twice for one
NodeClaim, no Machine is left without an instance.

The world is the shipped ``aws-fleet`` scenario's (moto's EC2 behind the capa plugin, stock CAPA
and the kubeadm bootstrap step emulated, the scheduler and workload stand-ins). A seeded reaper
decides before every write the controller makes, to Kubernetes (create, update, patch, delete,
before the write or after it with the answer lost) or to EC2 (launch template writes,
CreateFleet, TerminateInstances, and right after CreateFleet returned), whether the process dies
there; a dead operator is replaced by a new one with nothing in memory (plugin caches, intents,
informers). The emulated cluster around it never dies. Pods come, shrink (consolidation
replaces a node) and go (empty nodes are deleted); then the reaper stops and the cluster
settles. ``sim.chaos`` is the harness (the dying client, the world that restarts the
operator); the reaper is this test's kill policy.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from karpenter_capi.core.kube.resources import DEPLOYMENTS, NODECLAIMS, PODS
from karpenter_capi.plugins.capa.adopt import aws_machines
from karpenter_capi.plugins.capa.plugin import CapaPlugin
from karpenter_capi.plugins.generic_capi.plugin import GenericCapiPlugin
from karpenter_capi.sim.capi.objects import capi_resources
from karpenter_capi.sim.chaos import ChaosWorld, KillSwitch, When
from karpenter_capi.sim.scenario.aws import SimAws, emulated_aws
from karpenter_capi.sim.scenario.schema import load_scenario

pytest.importorskip("moto")

AWS_MACHINES = aws_machines("infrastructure.cluster.x-k8s.io/v1beta2")
_, _, MACHINES, _ = capi_resources("v1beta2")
_EC2_WRITES = (
    "CreateFleet",
    "CreateLaunchTemplate",
    "CreateLaunchTemplateVersion",
    "DeleteLaunchTemplateVersions",
    "TerminateInstances",
)


class Reaper(KillSwitch):
    """Decides, write by write, whether the operator dies there (seeded, at most ``limit``):
    before a write or after it (the answer lost). EC2 writes (CamelCase operations) are few,
    one Fleet call a node, and get a higher rate."""

    def __init__(self, seed: int, rate: float, ec2_rate: float, limit: int) -> None:
        super().__init__()
        self.counting = True
        self.rand = random.Random(seed)
        self.rate = rate
        self.ec2_rate = ec2_rate
        self.limit = limit

    def choose(self, index: int, what: str) -> When | None:
        if len(self.deaths) >= self.limit:
            return None
        rate = self.ec2_rate if what[:1].isupper() else self.rate
        if self.rand.random() < rate:
            return "before"
        if self.rand.random() < rate:
            return "after"
        return None


_CATALOG_READS = ("DescribeInstanceTypes", "DescribeInstanceTypeOfferings")


def memoize_catalog(client: Any) -> None:
    """Answer EC2's catalog reads from the first answer: the catalog is the same for every
    process, and moto takes seconds to page through it, which a restart would pay each time."""
    answers: dict[str, Any] = {}

    def key_of(params: Any) -> str:
        body = params.get("body") if isinstance(params, dict) else None
        return repr(sorted(body.items()) if isinstance(body, dict) else body)

    def before(params: Any, context: dict[str, Any], **_: Any) -> Any:
        key = key_of(params)
        context["catalog-key"] = key
        return answers.get(key)

    def after(parsed: Any, context: dict[str, Any], http_response: Any, **_: Any) -> None:
        key = context.get("catalog-key")
        if key is not None and key not in answers:
            answers[key] = (http_response, parsed)

    for operation in _CATALOG_READS:
        client.meta.events.register(f"before-call.ec2.{operation}", before)
        client.meta.events.register(f"after-call.ec2.{operation}", after)


class World(ChaosWorld):
    """The aws-fleet scenario's cluster, with its Deployments at 0 until ``scale``d; EC2's
    writes pass the reaper too (before the call, and after it returned)."""

    def __init__(self, aws: SimAws, reaper: Reaper) -> None:
        scenario = load_scenario("aws-fleet")
        idle = [w.model_copy(update={"replicas": 0}) for w in scenario.workloads]
        super().__init__(
            scenario.model_copy(update={"workloads": idle, "timeline": []}),
            switch=reaper,
            plugin_objects=lambda: [
                ("generic_capi", GenericCapiPlugin),
                ("capa", CapaPlugin(aws, background_refresh=False)),
            ],
            emulation={"kubeadm_bootstrap": True, "aws_ec2": aws.emulation_ec2},
            aws_values=aws.values,
        )
        memoize_catalog(aws.ec2(aws.region))
        events = aws.ec2(aws.region).meta.events
        for operation in _EC2_WRITES:
            events.register(f"before-call.ec2.{operation}", self._ec2_write(operation))
            events.register(f"after-call.ec2.{operation}", self._ec2_landed)

    def _ec2_write(self, operation: str) -> Any:
        def handler(**_: Any) -> None:
            self.switch.write(operation)

        return handler

    def _ec2_landed(self, **_: Any) -> None:
        self.switch.landed()

    def scale(self, name: str, replicas: int) -> None:
        self.server.patch(DEPLOYMENTS, name, {"spec": {"replicas": replicas}}, "default")
        self.settle()


@pytest.fixture
def aws() -> Iterator[SimAws]:
    environment = load_scenario("aws-fleet").infrastructure.aws
    assert environment is not None
    with emulated_aws(environment) as doubles:
        yield doubles


def _tags(instance: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags") or []}


@pytest.mark.parametrize("seed", range(2))
def test_killed_between_writes_the_operator_launches_once_and_leaks_nothing(
    aws: SimAws, seed: int
) -> None:
    reaper = Reaper(seed, rate=0.04, ec2_rate=0.3, limit=30)
    world = World(aws, reaper)
    world.scale("batch", 4)
    world.scale("api", 5)
    world.advance(120)
    world.scale("api", 1)  # consolidation replaces the api node
    world.advance(180)
    world.scale("batch", 0)  # empty spot nodes are deleted
    world.advance(120)
    reaper.counting = False
    assert world.restarts == len(reaper.deaths) > 0
    world.advance(600)  # settle: registration timeouts, garbage collection, consolidation

    server = world.server
    instances = aws.instances()
    live = {i["InstanceId"]: i for i in instances if i["State"]["Name"] in ("pending", "running")}
    # None launched twice for one NodeClaim (whatever the kills), and none by CAPA itself.
    per_claim = Counter(_tags(i).get("karpenter.sh/nodeclaim") for i in instances)
    assert None not in per_claim
    assert max(per_claim.values()) == 1, per_claim
    # No instance leaked: every live one is a live NodeClaim's, named by its Machine's
    # AWSMachine; and no Machine is left without an instance.
    claims = {c["metadata"]["name"]: c for c in server.list(NODECLAIMS).items}
    machines = server.list(MACHINES, "capi").items
    awsms = {a["metadata"]["name"]: a for a in server.list(AWS_MACHINES, "capi").items}
    named = {awsms[m["spec"]["infrastructureRef"]["name"]]["spec"]["instanceID"] for m in machines}
    assert named == set(live)
    assert {_tags(i)["karpenter.sh/nodeclaim"] for i in live.values()} == set(claims)
    for claim in claims.values():
        instance_id = claim["status"]["providerID"].rpartition("/")[2]
        assert instance_id in live
    # And the workload runs: the one api pod is bound, on an on-demand node.
    pods = [p for p in server.list(PODS, "default").items if p["spec"].get("nodeName")]
    assert [p["metadata"]["labels"]["app"] for p in pods] == ["api"]
    assert len(live) == 1
