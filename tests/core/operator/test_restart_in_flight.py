"""A controller restarted while its NodeClaims launch launches nothing more for the same pods.

The pods a round launched each NodeClaim for are what sends them back to it in the next round;
a new process must find them on the NodeClaims, not in the memory of the process that died, or
it packs the pending pods afresh onto the in-flight capacity and buys again what first-fit
cannot place (issue 25: +49 NodeClaims over 13 kills of a 1,000-pod scale-up).
"""

from __future__ import annotations

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.instancetype import InstanceType, Offering, freeze_requirements
from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES, NODECLAIMS, NODEPOOLS
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.core.values.resources import ResourceList
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.audit import AuditLog
from karpenter_capi.sim.chaos.process import DyingClient, KillSwitch, ProcessDied, When
from karpenter_capi.sim.cluster import new_cluster
from tests.support import operator_world as world
from tests.support.provider import FakeProvider

# One 10-CPU type. Two waves of pods, 5+3+2 and then 4+3+3, fill one NodeClaim each; solved
# together over the two launching claims, biggest first, they go 5+4 and 3+3+3, and the 2 is
# left over.
TEN = InstanceType(
    name="ten",
    capacity=ResourceList.parse({"cpu": "10", "memory": "40Gi", "pods": "110"}),
    offerings=(Offering("zone-a", "on-demand", 0.50),),
    requirements=freeze_requirements({wellknown.LABEL_ARCH: ["amd64"]}),
)
WAVES = ({"a": "5", "c": "3", "f": "2"}, {"b": "4", "d": "3", "e": "3"})


def _two_waves_launched() -> tuple[InMemoryAPIServer, FakeClock, FakeProvider, SteppedDriver]:
    """Both waves pending, one NodeClaim launched for each, none of them ever coming up."""
    clock = FakeClock()
    api = new_cluster(clock=clock)
    provider = FakeProvider(clock, instance_types=[TEN], bind_after_polls=10_000)
    api.create(CLUSTER_API_NODE_CLASSES, world.nodeclass())
    api.create(NODEPOOLS, world.nodepool())
    driver = world.operator(api, clock, provider).stepped()
    for wave in WAVES:
        for name, cpu in wave.items():
            world.pending_pod(api, name, cpu=cpu)
        driver.advance(15)
    return api, clock, provider, driver


def _claims(api: InMemoryAPIServer) -> dict[str, str]:
    """NodeClaim name -> the pods it says it was launched for."""
    return {
        c["metadata"]["name"]: c["metadata"]["annotations"][wellknown.ANNOTATION_NOMINATED_PODS]
        for c in api.list(NODECLAIMS).items
    }


def test_pods_a_claim_was_launched_for_keep_its_room_from_later_pods() -> None:
    api, _, _, driver = _two_waves_launched()
    driver.advance(60)
    assert sorted(_claims(api).values()) == [
        "default/a,default/c,default/f",
        "default/b,default/d,default/e",
    ]


def test_a_restart_mid_launch_creates_no_nodeclaim_for_pods_already_launched_for() -> None:
    api, clock, provider, _ = _two_waves_launched()
    launched = _claims(api)
    assert len(launched) == 2

    # The process dies; a new one starts with nothing in memory, over the same API.
    driver = world.operator(api, clock, provider).stepped()
    driver.advance(60)

    now = _claims(api)
    assert now == launched, f"launched again after the restart: {sorted(set(now) - set(launched))}"


# A catalog of three families (2, 4 and 8 GiB per CPU) in 2, 4 and 8 CPUs, and 40 pods of the
# simulated scale-up's three shapes, in an order whose plan a restart used to split badly.
CATALOG = [
    InstanceType(
        name=f"{family}{cpus}",
        capacity=ResourceList.parse(
            {"cpu": str(cpus), "memory": f"{cpus * per_cpu}Gi", "pods": "110"}
        ),
        offerings=(Offering("zone-a", "on-demand", round(cpus * price, 4)),),
        requirements=freeze_requirements({wellknown.LABEL_ARCH: ["amd64"]}),
    )
    for family, per_cpu, price in (("c", 2, 0.034), ("s", 4, 0.042), ("m", 8, 0.05))
    for cpus in (2, 4, 8)
]
SHAPES = {"a": ("500m", "1Gi"), "b": ("1", "4Gi"), "c": ("3", "12Gi")}
MIX = "aaabaccbbcacaccabcbccbcbcbaabbbbbcacaaaa"


class _DieAfterCreate(KillSwitch):
    """Kills the process once the ``n``-th NodeClaim create has reached the API (its answer
    lost), as a SIGKILL in the middle of a round's creation loop would."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.counting = True
        self._left = n

    def choose(self, index: int, what: str) -> When | None:
        del index
        if what == "create nodeclaims":
            self._left -= 1
            if self._left == 0:
                return "after"
        return None


def _plan_of(api: InMemoryAPIServer) -> list[str]:
    """Each NodeClaim's pods (names unknown in advance, so only the grouping is compared)."""
    return sorted(
        c["metadata"]["annotations"][wellknown.ANNOTATION_NOMINATED_PODS]
        for c in api.list(NODECLAIMS).items
    )


def _scale_up(kill_after: int | None, restarted_for: float = 60) -> InMemoryAPIServer:
    """The 40 pods pending on an empty cluster, a minute of provisioning; the process killed
    after its ``kill_after``-th NodeClaim create and a new one started over the same API, run
    for ``restarted_for`` seconds (0: only what it does the moment it starts)."""
    clock = FakeClock()
    api = new_cluster(clock=clock)
    provider = FakeProvider(clock, instance_types=CATALOG, bind_after_polls=10_000)
    api.create(CLUSTER_API_NODE_CLASSES, world.nodeclass())
    api.create(NODEPOOLS, world.nodepool())
    for number, shape in enumerate(MIX):
        world.pending_pod(api, f"pod-{number:02d}", *SHAPES[shape])
    switch = KillSwitch() if kill_after is None else _DieAfterCreate(kill_after)

    def process() -> SteppedDriver:
        client = DyingClient(api, switch, AuditLog())
        options = OperatorOptions(leader_elect=False, metrics_port=None)
        return Operator(client, api, provider.plugins(api), clock, options).stepped()

    try:
        process().advance(60)
    except ProcessDied:
        restarted = process()
        if restarted_for:
            restarted.advance(restarted_for)
        else:
            restarted.run_until_quiet()
    return api


def test_a_restart_inside_the_creation_loop_finishes_the_plan_it_interrupted() -> None:
    uninterrupted = _plan_of(_scale_up(None))
    assert len(uninterrupted) > 3
    for kill_after in range(1, len(uninterrupted)):
        restarted = _plan_of(_scale_up(kill_after))
        assert restarted == uninterrupted, (
            f"killed after NodeClaim {kill_after} of {len(uninterrupted)}: "
            f"{len(restarted)} NodeClaims instead of {len(uninterrupted)}"
        )


def test_the_restarted_process_finishes_the_plan_the_moment_it_starts() -> None:
    """Not a batch window later: each second between the plan's first nodes and the others
    lets kube-scheduler fill the first with pods planned for the others."""
    uninterrupted = _plan_of(_scale_up(None))
    assert _plan_of(_scale_up(2, restarted_for=0)) == uninterrupted
