"""The invariant checker on a cluster the real controller settled, then broken one way at a time.

Each test starts from the end of a short scenario run (three pods on one launched node, every
controller of the operator, the emulated Cluster API and the scheduler stand-in), so the sound
case is a real settled cluster, not a hand-built one; then it does what a defect would leave
behind (a NodeClaim gone without its Machine, a second claim on one instance, ...) directly in
the API, and checks that the checker names that invariant, the object and the cause, and
nothing else.
"""

from __future__ import annotations

import copy
import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from karpenter_capi.cli import main
from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import (
    MACHINE_DEPLOYMENTS,
    MACHINES,
    NODECLAIMS,
    NODES,
    PODS,
)
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.invariants import (
    DOUBLE_CLAIM,
    LEAKED_MACHINE,
    REPLICAS_MISMATCH,
    SCHEDULABLE_PENDING_POD,
    STALE_DISRUPTED_TAINT,
    STUCK_NODECLAIM,
    UNCLAIMED_NODE,
    InvariantError,
    Violation,
    assert_invariants,
    check_invariants,
)
from karpenter_capi.sim.scenario.runner import run
from karpenter_capi.sim.scenario.schema import parse_scenario

TINY: dict[str, Any] = {
    "name": "tiny",
    "description": "three pods on one launched node",
    "infrastructure": {
        "catalog": {
            "cpus": [2],
            "families": {"c": 2},
            "archs": ["amd64"],
            "zones": ["zone-a"],
            "capacityTypes": ["on-demand"],
        }
    },
    "workloads": [{"name": "web", "replicas": 3, "cpu": "500m", "memory": "1Gi"}],
}


@dataclass
class Settled:
    server: InMemoryAPIServer
    clock: FakeClock

    def one(self, resource: Any) -> dict[str, Any]:
        items = list(self.server.list(resource).items)
        assert len(items) == 1, [o["metadata"]["name"] for o in items]
        return items[0]

    def check(self, **kwargs: Any) -> list[Violation]:
        return check_invariants(self.server, clock=self.clock, **kwargs)


@pytest.fixture
def settled() -> Settled:
    servers: list[InMemoryAPIServer] = []
    result = run(parse_scenario(TINY), until=90, on_cluster=servers.append)
    assert result.pods_bound == 3
    assert result.nodes == 1
    clock = servers[0].clock
    assert isinstance(clock, FakeClock)
    return Settled(servers[0], clock)


def _kinds(violations: list[Violation]) -> set[str]:
    return {v.invariant for v in violations}


def test_a_cluster_the_controller_settled_breaks_no_invariant(settled: Settled) -> None:
    assert settled.check() == []


def test_a_nodeclaim_gone_without_its_machine_is_a_leaked_machine(settled: Settled) -> None:
    claim = settled.one(NODECLAIMS)
    name = claim["metadata"]["name"]
    settled.server.patch(NODECLAIMS, name, {"metadata": {"finalizers": None}})
    settled.server.delete(NODECLAIMS, name)
    machine = settled.one(MACHINES)

    violations = settled.check()

    # The Node goes with its owner, the NodeClaim (garbage collection); the Machine stays.
    assert _kinds(violations) == {LEAKED_MACHINE}
    leak = next(v for v in violations if v.invariant == LEAKED_MACHINE)
    assert leak.subject == f"Machine default/{machine['metadata']['name']}"
    assert f"bound to NodeClaim {name}, which does not exist" in leak.detail


def test_a_nodeclaim_being_deleted_still_holds_its_machine(settled: Settled) -> None:
    # Termination deletes the Machine last; a drain held by a PDB can keep it for hours.
    name = settled.one(NODECLAIMS)["metadata"]["name"]
    settled.server.patch(NODECLAIMS, name, {"metadata": {"finalizers": ["example.com/hold"]}})
    settled.server.delete(NODECLAIMS, name)

    assert LEAKED_MACHINE not in _kinds(settled.check())


def test_two_nodeclaims_with_one_provider_id_are_a_double_claim(settled: Settled) -> None:
    claim = settled.one(NODECLAIMS)
    twin = copy.deepcopy(claim)
    twin["metadata"] = {"name": "twin", "labels": claim["metadata"].get("labels", {})}
    twin.pop("status", None)
    settled.server.create(NODECLAIMS, twin)
    status = {"providerID": claim["status"]["providerID"]}
    settled.server.patch(NODECLAIMS, "twin", {"status": status}, subresource="status")

    violations = settled.check(settled=False)

    assert [v.invariant for v in violations] == [DOUBLE_CLAIM]
    assert violations[0].subject == f"provider ID {claim['status']['providerID']}"
    assert f"{claim['metadata']['name']}, twin" in violations[0].detail


def test_one_nodeclaim_bound_to_two_machines_was_launched_twice(settled: Settled) -> None:
    machine = settled.one(MACHINES)
    twin = copy.deepcopy(machine)
    twin["metadata"] = {
        "name": "twin",
        "namespace": "default",
        "annotations": machine["metadata"]["annotations"],
        "labels": machine["metadata"].get("labels", {}),
    }
    twin["spec"].pop("providerID", None)
    twin.pop("status", None)
    settled.server.create(MACHINES, twin, "default")
    claim = settled.one(NODECLAIMS)["metadata"]["name"]

    violations = settled.check(settled=False)

    assert [(v.invariant, v.subject) for v in violations] == [(DOUBLE_CLAIM, f"NodeClaim {claim}")]
    assert "launched twice" in violations[0].detail
    assert "Machine default/twin" in violations[0].detail


def test_a_nodeclaim_never_ready_is_stuck_once_the_registration_ttl_passes(
    settled: Settled,
) -> None:
    claim = settled.one(NODECLAIMS)
    lost = copy.deepcopy(claim)
    lost["metadata"] = {"name": "lost", "labels": claim["metadata"].get("labels", {})}
    lost.pop("status", None)
    settled.server.create(NODECLAIMS, lost)

    settled.clock.advance(899)
    assert STUCK_NODECLAIM not in _kinds(settled.check(settled=False))
    settled.clock.advance(2)
    violations = settled.check(settled=False)

    assert [(v.invariant, v.subject) for v in violations] == [(STUCK_NODECLAIM, "NodeClaim lost")]
    assert "not Ready after 901s (registration TTL 900s)" in violations[0].detail


def test_replicas_that_no_machine_answers_are_a_mismatch(settled: Settled) -> None:
    deployment = settled.one(MACHINE_DEPLOYMENTS)
    name = deployment["metadata"]["name"]
    settled.server.patch(MACHINE_DEPLOYMENTS, name, {"spec": {"replicas": 2}}, "default")

    violations = settled.check()

    assert [(v.invariant, v.subject) for v in violations] == [
        (REPLICAS_MISMATCH, f"MachineDeployment default/{name}")
    ]
    assert violations[0].detail == "spec.replicas is 2 but 1 live Machine(s) belong to it"


def test_a_node_of_a_nodepool_with_no_nodeclaim_is_unclaimed(settled: Settled) -> None:
    settled.server.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "stray", "labels": {wellknown.LABEL_NODEPOOL: "default"}},
            "spec": {"providerID": "sim://stray"},
        },
    )

    violations = settled.check()

    assert [(v.invariant, v.subject) for v in violations] == [(UNCLAIMED_NODE, "Node stray")]
    assert "no NodeClaim holds provider ID sim://stray" in violations[0].detail


def _pod(name: str, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [
                {"name": "main", "image": "app", "resources": {"requests": {"cpu": cpu}}}
            ]
        },
    }


def test_a_pending_pod_that_fits_an_existing_node_is_reported(settled: Settled) -> None:
    settled.server.create(PODS, _pod("small", "100m"), "default")
    node = settled.one(NODES)["metadata"]["name"]

    violations = settled.check()

    assert [(v.invariant, v.subject) for v in violations] == [
        (SCHEDULABLE_PENDING_POD, "Pod default/small")
    ]
    assert node in violations[0].detail


def test_a_pending_pod_only_a_new_node_could_hold_needs_the_plugins_to_be_seen(
    settled: Settled,
) -> None:
    settled.server.create(PODS, _pod("big", "1200m"), "default")
    # What kube-scheduler says of a pod no node has room for; Karpenter acts on it.
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    settled.server.patch(
        PODS, "big", {"status": {"conditions": [unschedulable]}}, "default", subresource="status"
    )
    assert settled.check() == []  # no existing node has room: kube-scheduler cannot help

    environment = PluginEnvironment(
        workload=settled.server,
        management=settled.server,
        clock=settled.clock,
        logger=logging.getLogger("karpenter_capi.plugins"),
    )
    plugins = Plugins.load(["generic_capi"], environment)
    violations = settled.check(plugins=plugins)

    assert [(v.invariant, v.subject) for v in violations] == [
        (SCHEDULABLE_PENDING_POD, "Pod default/big")
    ]
    assert "could hold it on a new c-2x-amd64" in violations[0].detail


def test_a_disrupted_taint_no_deletion_explains_is_stale(settled: Settled) -> None:
    node = settled.one(NODES)
    taint = {"key": wellknown.TAINT_DISRUPTED_KEY, "effect": wellknown.TAINT_DISRUPTED_EFFECT}
    taints = [*(node["spec"].get("taints") or []), taint]
    settled.server.patch(NODES, node["metadata"]["name"], {"spec": {"taints": taints}})

    assert settled.check(settled=False) == []  # a command may hold it right now
    violations = settled.check()

    assert [(v.invariant, v.subject) for v in violations] == [
        (STALE_DISRUPTED_TAINT, f"Node {node['metadata']['name']}")
    ]


def test_assert_invariants_lists_every_violation(settled: Settled) -> None:
    settled.server.create(PODS, _pod("small", "100m"), "default")
    name = settled.one(MACHINE_DEPLOYMENTS)["metadata"]["name"]
    settled.server.patch(MACHINE_DEPLOYMENTS, name, {"spec": {"replicas": 3}}, "default")

    with pytest.raises(InvariantError) as raised:
        assert_invariants(settled.server, clock=settled.clock)

    message = str(raised.value)
    assert message.startswith("2 invariant violation(s):")
    assert f"replicas-mismatch: MachineDeployment default/{name}" in message
    assert "schedulable-pending-pod: Pod default/small" in message


def test_simulate_check_reports_that_the_invariants_hold(tmp_path: Path) -> None:
    import yaml

    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    out = io.StringIO()

    status = main(["simulate", str(path), "--until", "90s", "--check"], out)

    assert status == 0
    assert "invariants: all hold" in out.getvalue()


def _free_replica(settled: Settled) -> str:
    """A second Machine of the launched node's MachineSet that no NodeClaim claims."""
    machine = copy.deepcopy(settled.one(MACHINES))
    meta = machine["metadata"]
    meta["name"] = "spare"
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        meta.pop(key, None)
    meta["annotations"] = {}
    meta["labels"] = {
        k: v for k, v in meta["labels"].items() if k != wellknown.LABEL_KARPENTER_MEMBER
    }
    machine["spec"].pop("providerID", None)
    machine.pop("status", None)
    settled.server.create(MACHINES, machine, meta["namespace"])
    return f"Machine {meta['namespace']}/spare"


def test_a_replica_no_nodeclaim_claims_is_a_leaked_machine(settled: Settled) -> None:
    subject = _free_replica(settled)

    leaks = [v for v in settled.check() if v.invariant == LEAKED_MACHINE]

    assert [v.subject for v in leaks] == [subject]
    assert "no NodeClaim: it is a replica of MachineDeployment" in leaks[0].detail


def test_the_min_size_keeps_free_replicas_beside_the_claimed_ones(settled: Settled) -> None:
    subject = _free_replica(settled)
    (deployment,) = [
        d
        for d in settled.server.list(MACHINE_DEPLOYMENTS).items
        if d["metadata"].get("labels", {}).get(wellknown.LABEL_KARPENTER_MEMBER) is not None
        and d["spec"].get("replicas")
    ]
    meta = deployment["metadata"]
    for minimum, leaked in (("1", [subject]), ("2", [])):
        annotations = {wellknown.ANNOTATION_AUTOSCALER_MIN_SIZE: minimum}
        settled.server.patch(
            MACHINE_DEPLOYMENTS,
            meta["name"],
            {"metadata": {"annotations": annotations}},
            meta["namespace"],
        )
        leaks = [v.subject for v in settled.check() if v.invariant == LEAKED_MACHINE]
        assert leaks == leaked, minimum
