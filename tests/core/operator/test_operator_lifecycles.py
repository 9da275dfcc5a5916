"""Whole-operator scenarios: a NodeClaim's life from launch to termination, as a user sees it.

Every controller runs (provisioning, NodeClaim lifecycle, garbage collection, Node and NodeClaim
termination) under the stepped driver, on a fake clock, against the in-memory API and the fake
provider plugin. The tests play the parts the operator does not: a kubelet that registers its
Node, pods bound to nodes (the in-memory API has no scheduler), an application owner's
PodDisruptionBudget, and a kubelet that takes its time to stop a pod.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock, format_timestamp
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    EVENTS,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    POD_DISRUPTION_BUDGETS,
    PODS,
    Resource,
)
from karpenter_capi.core.operator import Operator
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.support import operator_world
from tests.support.provider import INSTANCE_ANNOTATION, FakeProvider

JsonObject = dict[str, Any]

NAMESPACE = "default"
UNREGISTERED = {
    "key": wellknown.TAINT_UNREGISTERED_KEY,
    "effect": wellknown.TAINT_UNREGISTERED_EFFECT,
}
DISRUPTED = {"key": wellknown.TAINT_DISRUPTED_KEY, "effect": wellknown.TAINT_DISRUPTED_EFFECT}
FINALIZER = wellknown.FINALIZER_TERMINATION
# Holds a pod in Terminating, as a kubelet does while the pod's containers shut down.
SHUTTING_DOWN = "example.com/shutting-down"


@dataclass
class World:
    """The operator and everything around it: API, clock, provider, stepped driver."""

    clock: FakeClock
    api: InMemoryAPIServer
    provider: FakeProvider
    operator: Operator
    driver: SteppedDriver
    start: datetime = field(init=False)

    def __post_init__(self) -> None:
        self.start = self.clock.now()

    # --- time -------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return (self.clock.now() - self.start).total_seconds()

    def advance_to(self, seconds: float) -> None:
        """Run the operator until ``seconds`` after the world started."""
        self.driver.advance(seconds - self.elapsed())

    def at(self, seconds: float) -> str:
        """The API timestamp ``seconds`` after the world started."""
        return format_timestamp(self.start + timedelta(seconds=seconds))

    # --- what the tests play ----------------------------------------------------------------

    def nodeclaim(self, name: str, *, termination_grace_period: str | None = None) -> None:
        """A NodeClaim as the provisioner writes it (a user could write the same)."""
        pool = self.api.get(NODEPOOLS, "general")
        spec: JsonObject = {
            "nodeClassRef": operator_world.NODECLASS_REF,
            "requirements": [
                {"key": wellknown.LABEL_NODEPOOL, "operator": "In", "values": ["general"]},
                {"key": wellknown.LABEL_INSTANCE_TYPE, "operator": "In", "values": ["small"]},
                {"key": wellknown.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            ],
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
        }
        if termination_grace_period is not None:
            spec["terminationGracePeriod"] = termination_grace_period
        self.api.create(
            NODECLAIMS,
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "metadata": {
                    "name": name,
                    "labels": {wellknown.LABEL_NODEPOOL: "general"},
                    "ownerReferences": [
                        {
                            "apiVersion": "karpenter.sh/v1",
                            "kind": "NodePool",
                            "name": "general",
                            "uid": pool["metadata"]["uid"],
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": spec,
            },
        )

    def kubelet_joins(self, claim_name: str, *, ready: bool = True) -> str:
        """What a kubelet does: register a Node with the machine's provider ID, tainted
        ``karpenter.sh/unregistered:NoExecute`` by its bootstrap configuration."""
        claim = self.api.get(NODECLAIMS, claim_name)
        name = f"node-{claim_name}"
        self.api.create(
            NODES,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {wellknown.LABEL_HOSTNAME: name}},
                "spec": {"providerID": claim["status"]["providerID"], "taints": [UNREGISTERED]},
                "status": {
                    "allocatable": {"cpu": "1930m", "memory": "3Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                },
            },
        )
        return name

    def running_node(self, claim_name: str, *, termination_grace_period: str | None = None) -> str:
        """A NodeClaim launched, its Node registered and initialized; the Node's name."""
        self.nodeclaim(claim_name, termination_grace_period=termination_grace_period)
        self.driver.advance(10)
        node = self.kubelet_joins(claim_name)
        self.driver.advance(1)
        assert condition(self.get(NODECLAIMS, claim_name), "Initialized")["status"] == "True"
        return node

    def pod(
        self,
        name: str,
        node: str,
        *,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        grace: int | None = None,
        finalizers: list[str] | None = None,
    ) -> None:
        """A running pod bound to ``node`` (the in-memory API has no scheduler)."""
        metadata: JsonObject = {"name": name, "labels": labels or {"app": name}}
        if annotations:
            metadata["annotations"] = annotations
        if finalizers:
            metadata["finalizers"] = finalizers
        spec: JsonObject = {"nodeName": node, "containers": [{"name": "app", "image": "app"}]}
        if grace is not None:
            spec["terminationGracePeriodSeconds"] = grace
        self.api.create(
            PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}, NAMESPACE
        )
        self.api.patch(
            PODS,
            name,
            {
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}],
                }
            },
            NAMESPACE,
            subresource="status",
        )

    def pdb(self, name: str, selector: dict[str, str], min_available: int) -> None:
        self.api.create(
            POD_DISRUPTION_BUDGETS,
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name},
                "spec": {"minAvailable": min_available, "selector": {"matchLabels": selector}},
            },
            NAMESPACE,
        )

    def finish_pod(self, name: str) -> None:
        """The kubelet has stopped the pod's containers: it lets the pod go."""
        self.api.patch(PODS, name, {"metadata": {"finalizers": None}}, NAMESPACE)

    # --- what a user looks at ---------------------------------------------------------------

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> JsonObject:
        return self.api.get(resource, name, namespace)

    def find(
        self, resource: Resource, name: str, namespace: str | None = None
    ) -> JsonObject | None:
        try:
            return self.api.get(resource, name, namespace)
        except NotFound:
            return None

    def events(self, reason: str, *, name: str | None = None) -> list[JsonObject]:
        return [
            e
            for e in self.api.list(EVENTS).items
            if e.get("reason") == reason and (name is None or e["involvedObject"]["name"] == name)
        ]

    def nothing_left(self) -> bool:
        return not (
            self.api.list(NODES).items or self.api.list(NODECLAIMS).items or self.provider.instances
        )


def condition(obj: JsonObject, kind: str) -> JsonObject:
    for found in (obj.get("status") or {}).get("conditions") or []:
        if found["type"] == kind:
            return dict(found)
    raise AssertionError(f"no {kind} condition in {obj.get('status')}")


def new_world(*, nodepool_template: JsonObject | None = None, **provider_options: Any) -> World:
    clock = FakeClock()
    api = new_cluster(clock=clock)
    provider = FakeProvider(clock, **{"bind_after_polls": 1, **provider_options})
    api.create(CLUSTER_API_NODE_CLASSES, operator_world.nodeclass())
    api.create(
        NODEPOOLS,
        operator_world.nodepool(
            template=nodepool_template,
            # These stories are about lifecycle and termination: consolidation, which would
            # rightly remove their idle nodes, is covered in tests/core/disruption.
            disruption={"consolidateAfter": "Never"},
        ),
    )
    operator = operator_world.operator(api, clock, provider)
    return World(clock, api, provider, operator, operator.stepped())


# --- 1. launch, registration, initialization --------------------------------------------------


def test_a_pending_pod_gets_a_node_that_is_launched_registered_and_initialized() -> None:
    dedicated = {"key": "example.com/dedicated", "value": "web", "effect": "NoSchedule"}
    agent = {"key": "example.com/agent-not-ready", "effect": "NoSchedule"}
    world = new_world(
        nodepool_template={
            "metadata": {"labels": {"example.com/team": "web"}},
            "spec": {"taints": [dedicated], "startupTaints": [agent]},
        }
    )
    world.api.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": NAMESPACE},
            "spec": {
                "containers": [{"name": "app", "resources": {"requests": {"cpu": "500m"}}}],
                "tolerations": [{"key": "example.com/dedicated", "value": "web"}],
            },
        },
        NAMESPACE,
    )
    world.api.patch(
        PODS,
        "web-0",
        {
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ],
            }
        },
        NAMESPACE,
        subresource="status",
    )

    world.driver.advance(15)  # the batching window, then the launch polls

    (claim,) = world.api.list(NODECLAIMS).items
    name = claim["metadata"]["name"]
    assert FINALIZER in claim["metadata"]["finalizers"]
    assert condition(claim, "Launched")["status"] == "True"
    assert condition(claim, "Registered")["reason"] == "NodeNotFound"
    (instance,) = world.provider.instances.values()
    assert claim["status"]["providerID"] == instance.provider_id
    assert claim["metadata"]["labels"][wellknown.LABEL_INSTANCE_TYPE] == instance.instance_type

    node_name = world.kubelet_joins(name)
    world.driver.advance(1)

    node = world.get(NODES, node_name)
    labels = node["metadata"]["labels"]
    assert labels["example.com/team"] == "web"
    assert labels[wellknown.LABEL_NODEPOOL] == "general"
    assert labels[wellknown.LABEL_REGISTERED] == "true"
    assert wellknown.LABEL_INITIALIZED not in labels  # the agent has not removed its taint
    assert UNREGISTERED not in node["spec"]["taints"]
    assert dedicated in node["spec"]["taints"]
    assert agent in node["spec"]["taints"]
    assert node["metadata"]["annotations"][INSTANCE_ANNOTATION] == instance.name
    assert FINALIZER in node["metadata"]["finalizers"]
    assert node["metadata"]["ownerReferences"][0]["name"] == name
    claim = world.get(NODECLAIMS, name)
    assert claim["status"]["nodeName"] == node_name
    assert condition(claim, "Registered")["status"] == "True"
    assert condition(claim, "Initialized")["reason"] == "StartupTaintsExist"
    assert condition(claim, "Ready")["status"] == "Unknown"

    # The node's agent is up: it removes its startup taint.
    world.api.patch(NODES, node_name, {"spec": {"taints": [dedicated]}})
    world.driver.advance(1)

    node = world.get(NODES, node_name)
    assert node["metadata"]["labels"][wellknown.LABEL_INITIALIZED] == "true"
    assert node["spec"]["taints"] == [dedicated]  # the startup taint does not come back
    claim = world.get(NODECLAIMS, name)
    for kind in ("Launched", "Registered", "Initialized", "Ready"):
        assert condition(claim, kind)["status"] == "True", kind
    health = condition(world.get(NODEPOOLS, "general"), "NodeRegistrationHealthy")
    assert health["status"] == "True"
    assert not world.events("UnregisteredTaintMissing")
    assert len(world.api.list(NODECLAIMS).items) == 1  # and nothing more was launched


# --- 2. liveness --------------------------------------------------------------------------------


def test_nodeclaims_that_never_launch_or_never_register_are_given_up_and_the_nodepool_says_so() -> (
    None
):
    world = new_world()
    world.nodeclaim("no-node")  # its machine binds at the first poll, but no kubelet ever joins
    world.driver.advance(6)
    launched_at = condition(world.get(NODECLAIMS, "no-node"), "Launched")["lastTransitionTime"]
    assert launched_at == world.at(5)
    world.provider.bind_after_polls = 1_000_000  # from now on, machines never get an ID
    world.nodeclaim("no-machine")
    created = world.elapsed()

    world.advance_to(created + 5 * 60 - 1)
    assert world.find(NODECLAIMS, "no-machine") is not None
    assert not world.events("LaunchTimeout")

    world.advance_to(created + 5 * 60 + 10)  # give termination a delete poll or two
    assert world.find(NODECLAIMS, "no-machine") is None
    (timeout,) = world.events("LaunchTimeout", name="no-machine")
    assert timeout["type"] == "Warning"
    assert "not launched within 5m0s" in timeout["message"]
    health = condition(world.get(NODEPOOLS, "general"), "NodeRegistrationHealthy")
    assert (health["status"], health["reason"]) == ("False", "LaunchTimeout")
    (unhealthy,) = world.events("NodeRegistrationUnhealthy", name="general")
    assert unhealthy["type"] == "Warning"
    # The machine it had asked for is given back.
    assert [i.nodeclaim_name for i in world.provider.instances.values()] == ["no-node"]

    world.advance_to(5 + 15 * 60 - 1)
    assert world.find(NODECLAIMS, "no-node") is not None

    world.advance_to(5 + 15 * 60 + 10)
    assert world.find(NODECLAIMS, "no-node") is None
    (timeout,) = world.events("RegistrationTimeout", name="no-node")
    assert timeout["type"] == "Warning"
    assert "within 15m0s of launch" in timeout["message"]
    health = condition(world.get(NODEPOOLS, "general"), "NodeRegistrationHealthy")
    assert (health["status"], health["reason"]) == ("False", "RegistrationFailed")
    assert world.nothing_left()

    # The next NodeClaim of the pool that registers makes it healthy again.
    world.provider.bind_after_polls = 1
    world.running_node("recovered")
    health = condition(world.get(NODEPOOLS, "general"), "NodeRegistrationHealthy")
    assert health["status"] == "True"


# --- 3. garbage collection ----------------------------------------------------------------------


def test_a_leaked_machine_and_a_nodeclaim_whose_machine_vanished_are_cleaned_up() -> None:
    world = new_world()
    node_name = world.running_node("kept")
    claim = world.get(NODECLAIMS, "kept")
    # A machine nobody launched through a NodeClaim (a crash between create and the status
    # write, a NodeClaim force-deleted...), whose kubelet joined anyway.
    leak = world.provider.add_instance()
    assert leak.provider_id is not None
    world.api.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "leaked"},
            "spec": {"providerID": leak.provider_id, "taints": [UNREGISTERED]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        },
    )
    assert world.elapsed() < 2 * 60

    # The collector runs every 2 minutes from the start: at 2 min it sees the machine for the
    # first time, and deletes it when it sees it again after its 30 s grace period.
    world.advance_to(2 * 60 + 29)
    assert leak.name in world.provider.instances
    assert leak.state == "running"
    assert world.find(NODES, "leaked") is not None

    world.advance_to(2 * 60 + 30)
    assert leak.state == "deleting"
    assert world.find(NODES, "leaked") is None  # so that its pods move sooner

    world.advance_to(4 * 60 + 30)  # the delete hook is called until the machine is gone
    assert leak.name not in world.provider.instances
    # The machine of a NodeClaim is never mistaken for a leak.
    assert [i.nodeclaim_name for i in world.provider.instances.values()] == ["kept"]
    assert world.find(NODECLAIMS, "kept") is not None

    # The machine behind "kept" disappears behind the operator's back; its kubelet stops.
    world.provider.vanish(claim["status"]["providerID"])
    world.api.patch(
        NODES,
        node_name,
        {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}},
        subresource="status",
    )
    world.driver.advance(2 * 60 + 10)

    assert world.find(NODECLAIMS, "kept") is None
    assert world.find(NODES, node_name) is None
    (collected,) = world.events("InstanceGarbageCollected", name="kept")
    assert collected["type"] == "Warning"
    assert world.nothing_left()


# --- 4. a PodDisruptionBudget holds the drain -----------------------------------------------------


def test_a_pdb_holds_the_drain_until_it_is_relaxed_then_the_pod_is_evicted_and_the_node_goes() -> (
    None
):
    world = new_world()
    node_name = world.running_node("web")
    world.pod("web-1", node_name, labels={"app": "web"})
    world.pdb("web", {"app": "web"}, min_available=1)

    world.api.delete(NODECLAIMS, "web")
    world.driver.advance(20)

    node = world.get(NODES, node_name)
    assert DISRUPTED in node["spec"]["taints"]  # cordoned: nothing new lands on it
    assert node["metadata"]["deletionTimestamp"] == world.at(11)  # deleted with its NodeClaim
    assert FINALIZER in node["metadata"]["finalizers"]
    (refused,) = world.events("FailedDraining", name=node_name)
    assert refused["type"] == "Warning"
    assert "evicting pod default/web-1: violates a PDB" in refused["message"]
    assert (
        "The disruption budget web needs 1 healthy pods and has 1 currently" in (refused["message"])
    )
    assert world.find(PODS, "web-1", NAMESPACE) is not None
    claim = world.get(NODECLAIMS, "web")
    assert FINALIZER in claim["metadata"]["finalizers"]
    assert (condition(claim, "Drained")["status"], condition(claim, "Drained")["reason"]) == (
        "Unknown",
        "Draining",
    )
    assert world.provider.count("delete") == 0  # the machine runs until the node is drained
    assert not world.events("Evicted")

    world.api.patch(POD_DISRUPTION_BUDGETS, "web", {"spec": {"minAvailable": 0}}, NAMESPACE)
    world.driver.advance(60)

    assert world.find(PODS, "web-1", NAMESPACE) is None
    (evicted,) = world.events("Evicted", name="web-1")
    assert evicted["type"] == "Normal"
    assert world.nothing_left()


# --- 5. do-not-disrupt holds the drain until the deadline ---------------------------------------


def test_a_do_not_disrupt_pod_blocks_the_drain_until_the_termination_deadline() -> None:
    world = new_world()
    node_name = world.running_node("batch", termination_grace_period="5m")
    world.pod("job", node_name, annotations={wellknown.ANNOTATION_DO_NOT_DISRUPT: "true"})
    world.pod("web", node_name)

    deleted = world.elapsed()
    world.api.delete(NODECLAIMS, "batch")
    deadline = deleted + 5 * 60
    world.driver.advance(1)

    claim = world.get(NODECLAIMS, "batch")
    stamp = claim["metadata"]["annotations"][wellknown.ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP]
    assert stamp == world.at(deadline)
    for name in ("batch", node_name):
        (expiring,) = world.events("TerminationGracePeriodExpiring", name=name)
        assert expiring["message"] == f"All pods will be deleted by {world.at(deadline)}"
    assert world.find(PODS, "web", NAMESPACE) is None  # an ordinary pod is evicted at once
    (blocked,) = world.events("FailedDraining", name=node_name)
    assert f"{wellknown.ANNOTATION_DO_NOT_DISRUPT} and blocks the drain" in blocked["message"]

    world.advance_to(deadline - 30 - 1)  # the pod's default 30 s grace period, minus a second
    job = world.find(PODS, "job", NAMESPACE)
    assert job is not None
    assert not job["metadata"].get("deletionTimestamp")
    node = world.get(NODES, node_name)
    assert FINALIZER in node["metadata"]["finalizers"]
    assert world.provider.count("delete") == 0

    world.advance_to(deadline - 30)  # deleted so that its 30 s end by the deadline
    assert world.find(PODS, "job", NAMESPACE) is None
    (disrupted,) = world.events("Disrupted", name="job")
    assert "granted 30 seconds of grace-period" in disrupted["message"]
    assert "bypasses the PDB of the pod and the do-not-disrupt annotation" in (disrupted["message"])
    assert not world.events("Evicted", name="job")

    world.driver.advance(30)
    assert world.nothing_left()


# --- 6. the deadline forces pods out early enough ------------------------------------------------


def test_pods_are_deleted_early_enough_for_their_own_grace_period_to_end_by_the_deadline() -> None:
    world = new_world()
    node_name = world.running_node("app", termination_grace_period="5m")
    # A budget neither pod may leave through: only the deadline can remove them. The kubelet
    # keeps each one Terminating for as long as its grace period while its containers stop.
    world.pdb("held", {"app": "held"}, min_available=2)
    world.pod("slow", node_name, labels={"app": "held"}, grace=900, finalizers=[SHUTTING_DOWN])
    world.pod("medium", node_name, labels={"app": "held"}, grace=117, finalizers=[SHUTTING_DOWN])

    deleted = world.elapsed()
    world.api.delete(NODECLAIMS, "app")
    deadline = deleted + 5 * 60
    world.driver.advance(1)

    # 900 s cannot fit in the 300 s left: deleted at once, with all the time there is.
    slow = world.get(PODS, "slow", NAMESPACE)
    assert slow["metadata"]["deletionTimestamp"]
    assert slow["metadata"]["deletionGracePeriodSeconds"] == 300
    (disrupted,) = world.events("Disrupted", name="slow")
    assert "granted 300 seconds of grace-period of its 900" in disrupted["message"]
    medium = world.get(PODS, "medium", NAMESPACE)
    assert not medium["metadata"].get("deletionTimestamp")

    world.advance_to(deadline - 117 - 1)
    assert not world.get(PODS, "medium", NAMESPACE)["metadata"].get("deletionTimestamp")
    world.advance_to(deadline - 117)
    # 117 s fit: deleted exactly 117 s before the deadline, with its full grace period.
    medium = world.get(PODS, "medium", NAMESPACE)
    assert medium["metadata"]["deletionTimestamp"]
    assert medium["metadata"]["deletionGracePeriodSeconds"] == 117
    assert not world.events("Evicted")

    world.finish_pod("slow")
    world.finish_pod("medium")
    world.driver.advance(60)
    assert world.nothing_left()


# --- 7. whichever goes first --------------------------------------------------------------------


@pytest.mark.parametrize("first", ["node", "nodeclaim"])
def test_deleting_the_node_or_the_nodeclaim_first_removes_node_nodeclaim_and_machine(
    first: str,
) -> None:
    world = new_world(delete_calls_to_finish=2)
    node_name = world.running_node("web")
    world.pod("web-1", node_name)
    (machine,) = world.provider.instances.values()

    if first == "node":
        world.api.delete(NODES, node_name)
    else:
        world.api.delete(NODECLAIMS, "web")
    world.driver.advance(1)

    # The other half follows; the machine is being deleted; both wait for it, finalizers on.
    node = world.get(NODES, node_name)
    claim = world.get(NODECLAIMS, "web")
    for obj in (node, claim):
        assert obj["metadata"]["deletionTimestamp"]
        assert obj["metadata"]["finalizers"] == [FINALIZER]
    assert world.find(PODS, "web-1", NAMESPACE) is None
    assert condition(claim, "Drained")["status"] == "True"
    assert condition(claim, "InstanceTerminating")["status"] == "True"
    assert machine.state == "deleting"

    world.driver.advance(30)

    assert world.nothing_left()
    assert world.events("Evicted", name="web-1")
    assert not world.events("FailedTermination")


# --- product bugs ---------------------------------------------------------------------------------


def test_a_node_waits_for_a_pod_still_within_its_grace_period() -> None:
    world = new_world()
    node_name = world.running_node("web")
    world.pod("slow", node_name, grace=120, finalizers=[SHUTTING_DOWN])

    deleted = world.elapsed()
    world.api.delete(NODES, node_name)
    world.advance_to(deleted + 119)  # the kubelet is still stopping the pod, as it may

    assert world.find(NODES, node_name) is not None
    assert world.provider.instances
    assert world.get(PODS, "slow", NAMESPACE)["metadata"]["deletionGracePeriodSeconds"] == 120

    world.finish_pod("slow")
    world.driver.advance(30)
    assert world.nothing_left()
