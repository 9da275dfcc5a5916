"""A NodeClaim whose Node has joined but is not registered yet still counts for its pods.

Registration patches the Node (the NodeClaim's labels, the ``karpenter.sh/unregistered`` taint
removed) and then writes ``status.nodeName`` on the NodeClaim. The controller's caches follow
the two through separate watches, so a round can see the NodeClaim naming its Node while the
Node is still as the kubelet made it: tainted ``karpenter.sh/unregistered:NoExecute``, without
the NodePool's labels. Upstream's cluster state takes such a node's labels and taints from its
NodeClaim (``StateNode.Labels``, ``StateNode.Taints``). Judged by the Node alone, the pods
launched for it fitted nowhere and the round launched a second NodeClaim for them, which stayed
empty once the first Node came up (issue 28's fleet benchmark: one extra empty NodeClaim in a
healthy cluster, ``c-16``, in a storm phase on a loaded machine).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.demo import DEMO_SCENARIO, mark_unschedulable
from karpenter_capi.sim.manifests import load_manifest_files
from tests.core.provisioning.test_provisioner import _provisioner
from tests.support.joining import join_node


@pytest.mark.parametrize("registered", [False, True])
def test_a_node_seen_before_its_registration_keeps_the_room_of_its_claim(
    registered: bool,
) -> None:
    clock = FakeClock()
    server = new_cluster(clock=clock)
    server.apply_manifests(load_manifest_files([Path(DEMO_SCENARIO)]))
    mark_unschedulable(server)
    provisioner = _provisioner(server, clock)
    first = provisioner.reconcile()
    assert first.launched
    for decision in first.launched:
        join_node(server, decision.nodeclaim, stage="registered" if registered else "kubelet")
    second = provisioner.reconcile()
    assert not second.launched, "the pods still fit where they were launched for"
    planned = provisioner.planned() or {}
    for decision in first.launched:
        node_name = f"node-{decision.nodeclaim}"
        assert {planned[key] for key in decision.pods} == {node_name}
