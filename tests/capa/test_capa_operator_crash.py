"""The whole operator killed between writes of CAPAFleet launches and deletes, under the stepped
runtime, and restarted from API state alone: no instance leaks, none is launched twice for one
NodeClaim, no Machine is left without an instance.

The world is the shipped ``aws-fleet`` scenario's (moto's EC2 behind the capa plugin, stock CAPA
and the kubeadm bootstrap step emulated, the scheduler and workload stand-ins). A seeded reaper
decides before every write the controller makes, to Kubernetes (create, update, patch, delete,
before the write or after it with the answer lost) or to EC2 (launch template writes,
CreateFleet, TerminateInstances, and right after CreateFleet returned), whether the process dies
there; a dead operator is replaced by a new one with nothing in memory (plugin caches, intents,
informers). The emulated cluster around it never dies. Pods come, shrink (consolidation replaces
a node) and go (empty nodes are deleted); then the reaper stops and the cluster settles.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import DEPLOYMENTS, NODECLAIMS, PODS
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.plugins import PluginEnvironment, Plugins
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.plugins.capa.adopt import aws_machines
from karpenter_capi.plugins.capa.plugin import CapaPlugin
from karpenter_capi.plugins.generic_capi.plugin import GenericCapiPlugin
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.capi import add_capi_emulation
from karpenter_capi.sim.capi.objects import capi_resources
from karpenter_capi.sim.scenario.aws import SimAws, emulated_aws, substitute
from karpenter_capi.sim.scenario.runner import deployment
from karpenter_capi.sim.scenario.schema import load_scenario
from karpenter_capi.sim.scheduler import SimScheduler
from karpenter_capi.sim.workloads import add_workload_emulation

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


class Killed(BaseException):
    """The operator process died (a BaseException: no controller's error handling sees it)."""


class Reaper:
    """Decides, write by write, whether the operator dies there (seeded, at most ``limit``)."""

    def __init__(self, seed: int, rate: float, ec2_rate: float, limit: int) -> None:
        self.rand = random.Random(seed)
        self.rate = rate
        self.ec2_rate = ec2_rate
        self.limit = limit
        self.kills: Counter[str] = Counter()
        self.armed = True

    def step(self, what: str, *, ec2: bool = False) -> bool:
        """True: die (the caller raises ``Killed`` where the process would stop). EC2 writes
        are few (one Fleet call a node) and get a higher rate."""
        if not self.armed or sum(self.kills.values()) >= self.limit:
            return False
        if self.rand.random() < (self.ec2_rate if ec2 else self.rate):
            self.kills[what] += 1
            return True
        return False


class DyingClient:
    """The operator's client: before or after (answer lost) a write, the process may die."""

    def __init__(self, inner: InMemoryAPIServer, reaper: Reaper) -> None:
        self._inner = inner
        self._reaper = reaper

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if name not in ("create", "update", "patch", "delete", "evict"):
            return target

        def write(*args: Any, **kwargs: Any) -> Any:
            if self._reaper.step(f"before {name}"):
                raise Killed(name)
            result = target(*args, **kwargs)
            if self._reaper.step(f"after {name}"):
                raise Killed(name)
            return result

        return write


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


class World:
    def __init__(self, aws: SimAws, reaper: Reaper) -> None:
        self.aws = aws
        self.reaper = reaper
        self.clock = FakeClock()
        self.server = InMemoryAPIServer(clock=self.clock, random_seed=0)
        self.server.apply_manifests(generate_crds())
        self.server.register_cluster_api()
        scenario = load_scenario("aws-fleet")
        manifests = scenario.infrastructure.manifests or []
        self.server.apply_manifests([substitute(dict(m), aws.values) for m in manifests])
        self.workloads = {w.name: w for w in scenario.workloads}
        memoize_catalog(aws.ec2(aws.region))
        events = aws.ec2(aws.region).meta.events
        for operation in _EC2_WRITES:
            events.register(f"before-call.ec2.{operation}", self._ec2_write(operation))
        events.register("after-call.ec2.CreateFleet", self._ec2_write("after CreateFleet"))
        self.restarts = 0
        self.driver = self._start()

    def _ec2_write(self, what: str) -> Any:
        def handler(**_: Any) -> None:
            if self.reaper.step(what, ec2=True):
                raise Killed(what)

        return handler

    def _start(self) -> SteppedDriver:
        """A new operator process over the same API and EC2, nothing in memory."""
        client: Any = DyingClient(self.server, self.reaper)
        environment = PluginEnvironment(
            workload=client,
            management=client,
            clock=self.clock,
            logger=logging.getLogger("karpenter_capi.plugins"),
        )
        plugins = Plugins.from_objects(
            [
                ("generic_capi", GenericCapiPlugin),
                ("capa", CapaPlugin(self.aws, background_refresh=False)),
            ],
            environment,
        )
        operator = Operator(
            client, client, plugins, self.clock, OperatorOptions(leader_elect=False)
        )
        # The emulated cluster around the operator writes to the API itself: it never dies.
        operator.manager.client = operator.manager.management = self.server
        add_capi_emulation(
            operator.manager,
            nodes=True,
            kubeadm_bootstrap=True,
            aws_ec2=self.aws.emulation_ec2,
        )
        add_workload_emulation(operator.manager)
        operator.manager.add(SimScheduler(self.server, operator.manager, self.clock))
        return operator.stepped()

    def _survive(self, action: Any) -> None:
        for _ in range(50):
            try:
                action()
                return
            except Killed:
                self.restarts += 1
                self.driver = self._start()
        raise AssertionError("the operator kept dying")

    def settle(self) -> None:
        self._survive(self.driver.run_until_quiet)

    def advance(self, seconds: float, step: float = 5) -> None:
        target = self.clock.monotonic() + seconds
        while self.clock.monotonic() < target:
            self._survive(lambda: self.driver.advance(step))

    def scale(self, name: str, replicas: int) -> None:
        workload = self.workloads[name]
        try:
            self.server.patch(
                DEPLOYMENTS, name, {"spec": {"replicas": replicas}}, workload.namespace
            )
        except Exception:
            self.server.apply_manifests([deployment(workload, replicas)])
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
    reaper.armed = False
    assert world.restarts == sum(reaper.kills.values()) > 0
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
