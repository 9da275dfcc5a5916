"""A pod counted on a NodeClaim's registered Node stays planned there while it still fits.

Each round plans every pending pod again, and a pod's plan is what its nomination says
(``status.nominatedNodeName``, KEP-5278): moving it to another node clears the nomination and
writes another, a pod event for everyone watching, and kube-scheduler may already be trying the
old one. A pod counted on an in-flight NodeClaim goes back to it first in the next round; one
counted on the claim's Node once it registered went back in size order with the new pods, and a
bigger one arriving took its room (about a third of the nomination writes of a 1,000-pod
scale-up were such moves).
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.kube.resources import PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.demo import mark_unschedulable
from tests.support.demo_cluster import demo_provisioner
from tests.support.joining import join_node


def _pending(server: InMemoryAPIServer, name: str, cpu: str, memory: str) -> None:
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [
                {"name": "main", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            ]
        },
    }
    server.create(PODS, pod, "default")
    mark_unschedulable(server)


def test_a_pod_counted_on_a_registered_node_is_not_displaced_by_a_bigger_one() -> None:
    server, provisioner = demo_provisioner()
    first = provisioner.reconcile()
    # The claim of the eight web pods (4 CPU of requests) becomes a Node with 4 CPU to spare.
    claim = next(d for d in first.launched if len(d.pods) == 8).nodeclaim
    node = join_node(server, claim, allocatable={"cpu": "8", "memory": "32Gi", "pods": "110"})
    _pending(server, "late-small", "500m", "1Gi")
    provisioner.reconcile()
    plan = provisioner.planned()
    assert plan is not None
    assert plan["default/late-small"] == node
    # A bigger pod that fits in the Node's spare room only without the small one: planned
    # first by size, it would take the room and move the small one's plan (and nomination).
    _pending(server, "late-big", "3800m", "4Gi")
    provisioner.reconcile()
    plan = provisioner.planned()
    assert plan is not None
    assert plan["default/late-small"] == node
    assert plan["default/late-big"] != node
    # The web pods the claim was launched for stay too.
    assert all(
        plan[key] == node for key in next(d.pods for d in first.launched if d.nodeclaim == claim)
    )
