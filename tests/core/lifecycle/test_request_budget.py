"""The lifecycle's API writes, counted on the in-memory API server: which ones a NodeClaim
costs from creation to Ready, and that a reconcile which changes nothing sends none.

Every request costs the controller's one interpreter CPU (at 100 clusters a scale-up wave is
tens of thousands of them), so a write that changes nothing is a cost with no effect.
"""

from __future__ import annotations

from karpenter_capi.core.api import wellknown
from tests.core.lifecycle.harness import Env, condition, writes_since


def test_a_nodeclaim_costs_these_writes_from_creation_to_ready(env: Env) -> None:
    env.nodeclaim("nc")
    controller = env.lifecycle()
    before = env.api.requests.by_resource()
    env.reconcile(controller, "nc")
    # The finalizer first, in its own write (nothing is launched for a NodeClaim that could
    # vanish without termination), then what the launch recorded: metadata and status.
    assert writes_since(env, before) == {"patch nodeclaims": 2, "patch nodeclaims/status": 1}

    env.node("node-1", env.get("nc")["status"]["providerID"], ready=True)
    before = env.api.requests.by_resource()
    env.reconcile(controller, "nc")
    assert condition(env.get("nc"), "Ready")["status"] == "True"
    # Registration's sync of the Node, initialization's label (a Node the kubelet made Ready
    # and nothing taints: both in this reconcile), one status write for both, and the
    # NodePool's NodeRegistrationHealthy, set by its first registration (as upstream's).
    assert writes_since(env, before) == {
        "patch nodes": 2,
        "patch nodeclaims/status": 1,
        "patch nodepools/status": 1,
    }


def test_a_reconcile_that_changes_nothing_writes_nothing(env: Env) -> None:
    env.nodeclaim("nc")
    controller = env.lifecycle()
    env.reconcile(controller, "nc")
    # Launched, its Node not there yet: asked again, nothing has changed.
    before = env.api.requests.by_resource()
    env.reconcile(controller, "nc")
    assert writes_since(env, before) == {}

    env.node("node-1", env.get("nc")["status"]["providerID"], ready=True)
    env.reconcile(controller, "nc")
    assert env.get_node("node-1")["metadata"]["labels"][wellknown.LABEL_INITIALIZED] == "true"
    before = env.api.requests.by_resource()
    for _ in range(3):
        env.reconcile(controller, "nc")
    assert writes_since(env, before) == {}
