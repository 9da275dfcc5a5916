"""Every write a round of NodeClaims costs from creation to initialized: the lifecycle's, and
the NodePool counter's as it reacts to their events, compared with upstream Karpenter's.

Upstream's ``nodepool/counter`` (``controller.go: Reconcile``) does not watch NodeClaims or
Nodes: it reconciles a NodePool when it is created and then every 5 s, so a scale-up round
costs the NodePool one status write per 5 s however many NodeClaims launch and register in it.
Ours reacts to their events, and wrote the NodePool's status once per NodeClaim of a round:
each write costs the client, the API server and a watch event to every watcher of NodePools.
It now writes at most once per ``WRITE_INTERVAL`` per NodePool, the first change at once, the
changes that follow within the interval together at its end.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.kube.resources import NODECLAIMS, NODEPOOLS, NODES
from karpenter_capi.core.lifecycle import NodePoolCounterController
from karpenter_capi.core.lifecycle.counter import WRITE_INTERVAL
from karpenter_capi.core.runtime.controller import Result
from tests.core.lifecycle.harness import Env, condition, writes_since


def _count(env: Env, counter: NodePoolCounterController) -> Result:
    """The counter's reconcile of ``general`` that a NodeClaim or Node event asks for."""
    env.caches.sync()
    result = counter.reconcile("general")
    env.caches.sync()
    return result


def test_a_round_of_nodeclaims_costs_these_writes_from_creation_to_initialized(env: Env) -> None:
    names = [f"general-{i}" for i in range(4)]
    for name in names:
        env.nodeclaim(name)
    lifecycle, counter = env.lifecycle(), NodePoolCounterController(env.ctx)
    before = env.api.requests.by_resource()
    # Each launch is a NodeClaim event, and each event a reconcile of the counter.
    for name in names:
        env.reconcile(lifecycle, name)
        _count(env, counter)
    # Each Node joins Ready: registration and initialization in one reconcile.
    for i, name in enumerate(names):
        env.node(f"node-{i}", env.get(name)["status"]["providerID"], ready=True)
        env.reconcile(lifecycle, name)
        assert condition(env.get(name), "Ready")["status"] == "True"
        _count(env, counter)
    # The changes after the first write waited out the interval; at its end, one write.
    env.clock.advance(WRITE_INTERVAL)
    assert _count(env, counter).requeue_after is None

    per_nodeclaim = {
        # The finalizer in its own write, before anything is launched; then the launch's
        # labels and annotations (upstream: the same two, ``lifecycle/controller.go: Reconcile``).
        "patch nodeclaims": 2 * len(names),
        # The launch's status, then registration's and initialization's in one write.
        "patch nodeclaims/status": 2 * len(names),
        # Registration's sync and initialization's label (upstream: ``registration.go:
        # Reconcile`` and ``initialization.go: Reconcile``, one Node patch each).
        "patch nodes": 2 * len(names),
    }
    # NodeRegistrationHealthy once (``registration.go: updateNodePoolRegistrationHealth``), and
    # the counter twice: the first launch at once, everything after at the interval's end.
    kubelets = {"create nodes": len(names)}
    assert writes_since(env, before) == {
        **per_nodeclaim,
        **kubelets,
        "patch nodepools/status": 1 + 2,
    }
    status = env.api.get(NODEPOOLS, "general")["status"]
    assert status["nodes"] == len(names)


def test_a_round_registering_together_sets_the_nodepool_healthy_once(env: Env) -> None:
    """Upstream patches ``NodeRegistrationHealthy`` only when ``SetTrue`` changes it
    (``registration.go: updateNodePoolRegistrationHealth``). NodeClaims that register before
    the NodePool's cache shows the first one's write read it unset: each wrote it again, over
    a stale resourceVersion, and failed its reconcile with a ``409``."""
    names = [f"general-{i}" for i in range(3)]
    for name in names:
        env.nodeclaim(name)
    lifecycle = env.lifecycle()
    for i, name in enumerate(names):
        env.reconcile(lifecycle, name)
        env.node(f"node-{i}", env.get(name)["status"]["providerID"], ready=True)
    env.caches.sync()
    before = env.api.requests.by_resource()
    for name in names:
        # The NodeClaims and Nodes are seen at once, the NodePool's own write not yet (on
        # main, the second reconcile raised ``Conflict``).
        env.caches.sync_only(NODECLAIMS, NODES)
        lifecycle.reconcile(name)
        assert condition(env.get(name), "Ready")["status"] == "True"
    assert writes_since(env, before)["patch nodepools/status"] == 1
    pool = env.api.get(NODEPOOLS, "general")
    assert condition(pool, "NodeRegistrationHealthy")["status"] == "True"


def test_a_reconcile_from_a_copy_older_than_our_own_write_writes_nothing(env: Env) -> None:
    """A wake-up (a Machine's event, a Node's) can come before the NodeClaim's cache shows the
    controller's last write. Reconciling from that copy wrote the same again over a stale
    resourceVersion: the finalizer or the launch's fields, and a ``409`` (upstream sleeps 1 s
    after each write to read its own: ``nodeclaim/lifecycle/controller.go: Reconcile``)."""
    env.nodeclaim("nc")
    lifecycle = env.lifecycle()
    env.caches.sync()
    lifecycle.reconcile("nc")  # the finalizer and the launch; the cache does not show them
    before = env.api.requests.by_resource()
    assert lifecycle.reconcile("nc").requeue_after is None  # on main: Conflict
    assert writes_since(env, before) == {}
    # The write's watch event brings the NodeClaim back, from the copy that shows it.
    env.node("node-1", env.get("nc")["status"]["providerID"], ready=True)
    env.reconcile(lifecycle, "nc")
    assert condition(env.get("nc"), "Ready")["status"] == "True"


def test_a_write_the_server_kept_nothing_of_does_not_hold_the_nodeclaim_back(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that changes nothing the server keeps (a field its schema prunes) leaves the
    resourceVersion as it was and sends no watch event: the next reconcile must not wait for
    one."""
    env.nodeclaim("nc")
    lifecycle = env.lifecycle()
    env.reconcile(lifecycle, "nc")
    real = env.api.patch

    def pruned(resource: Any, name: str, body: Any, *args: Any, **kwargs: Any) -> Any:
        if resource == NODECLAIMS and kwargs.get("subresource") == "status":
            return env.api.get(NODECLAIMS, name)  # kept nothing: the same version
        return real(resource, name, body, *args, **kwargs)

    monkeypatch.setattr(env.api, "patch", pruned)
    env.node("node-1", env.get("nc")["status"]["providerID"], ready=True)
    env.reconcile(lifecycle, "nc")  # registration's status write is "pruned"
    monkeypatch.setattr(env.api, "patch", real)
    env.reconcile(lifecycle, "nc")  # the same copy: reconciled, not skipped
    assert condition(env.get("nc"), "Ready")["status"] == "True"
