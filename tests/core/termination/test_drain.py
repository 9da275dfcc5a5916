"""Draining a deleted node: PDBs, eviction order, do-not-disrupt and the termination deadline."""

from __future__ import annotations

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES, PODS
from tests.core.termination.harness import NAMESPACE, new_harness

DISRUPTED = {"key": wellknown.TAINT_DISRUPTED_KEY, "effect": wellknown.TAINT_DISRUPTED_EFFECT}


def _condition(obj: dict, condition_type: str) -> dict | None:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == condition_type), None)


def test_a_pdb_holds_the_drain_with_backoff_until_it_is_relaxed() -> None:
    h = new_harness()
    h.add_node("node-a")
    h.add_pod("web-1", "node-a", labels={"app": "web"})
    h.add_pdb("web", {"app": "web"}, min_available=1)
    h.server.delete(NODES, "node-a")

    delays = []
    for _ in range(4):
        results = h.step()
        delays.append(min(r.requeue_after for r in results if r.requeue_after is not None))
        h.clock.advance(delays[-1])

    node = h.get(NODES, "node-a")
    assert node is not None
    assert DISRUPTED in node["spec"]["taints"]
    assert h.pod("web-1") is not None
    # Refused evictions are retried per pod with a doubling backoff, not in a hot loop.
    assert [c.at for c in h.client.evictions(code=429)] == [0.0, 1.0, 3.0, 7.0]
    assert delays == [1.0, 2.0, 4.0, 8.0]
    [failed] = h.events("FailedDraining", name="node-a")
    assert failed["type"] == "Warning"
    assert "default/web-1" in failed["message"]
    assert "The disruption budget web needs 1 healthy pods and has 1 currently" in failed["message"]
    claim = h.get(NODECLAIMS, "node-a-claim")
    assert claim is not None
    assert _condition(claim, "Drained")["status"] == "Unknown"
    assert wellknown.FINALIZER_TERMINATION in node["metadata"]["finalizers"]

    h.set_pdb("web", min_available=0)
    h.run(h.gone)

    assert h.pod("web-1") is None
    assert [c.at for c in h.client.evictions(code=200)] == [15.0]  # the next retry after 7s+8s
    assert h.events("Evicted", name="web-1")[0]["type"] == "Normal"
    assert h.client.deletes() == []  # evicted, never force-deleted: there is no deadline


def test_pods_are_evicted_in_tiers_daemonsets_and_critical_pods_last() -> None:
    h = new_harness()
    h.add_node("node-a")
    hold = ["example.com/hold"]  # keeps an evicted pod terminating until the test lets it go
    h.add_pod(
        "critical-daemon",
        "node-a",
        owner_kind="DaemonSet",
        priority_class="system-node-critical",
        finalizers=hold,
    )
    h.add_pod("critical", "node-a", priority_class="system-cluster-critical", finalizers=hold)
    h.add_pod("daemon", "node-a", owner_kind="DaemonSet", finalizers=hold)
    h.add_pod("app-1", "node-a", owner_kind="ReplicaSet", finalizers=hold)
    h.add_pod("app-2", "node-a", finalizers=hold)
    h.server.delete(NODES, "node-a")

    def evicted() -> list[str]:
        return [c.pod.removeprefix(f"{NAMESPACE}/") for c in h.client.evictions(code=200)]

    def release(*names: str) -> None:
        for name in names:
            h.server.patch(PODS, name, {"metadata": {"finalizers": None}}, NAMESPACE)

    h.step()
    assert sorted(evicted()) == ["app-1", "app-2"]
    h.step()  # the first tier is still terminating: the next one waits
    assert sorted(evicted()) == ["app-1", "app-2"]
    release("app-1")
    h.step()  # one pod of the tier is not enough
    assert sorted(evicted()) == ["app-1", "app-2"]
    release("app-2")
    h.step()
    assert evicted()[2:] == ["daemon"]
    release("daemon")
    h.step()
    assert evicted()[3:] == ["critical"]
    release("critical")
    h.step()
    assert evicted()[4:] == ["critical-daemon"]
    release("critical-daemon")
    h.run(h.gone)
    assert len(evicted()) == 5


def test_pods_that_need_no_eviction_neither_block_nor_get_evicted() -> None:
    h = new_harness()
    h.add_node("node-a")
    tolerate = [{"key": wellknown.TAINT_DISRUPTED_KEY, "operator": "Exists"}]
    h.add_pod("tolerates", "node-a", tolerations=tolerate)
    h.add_pod(
        "static", "node-a", owner_kind="Node", annotations={"kubernetes.io/config.mirror": "abc"}
    )
    h.add_pod("finished", "node-a", phase="Succeeded")
    h.add_pod("failed", "node-a", phase="Failed")
    h.server.delete(NODES, "node-a")

    h.run(h.gone)

    assert h.client.calls == []
    for name in ("tolerates", "static", "finished", "failed"):
        assert h.pod(name) is not None


def test_do_not_disrupt_blocks_the_drain_until_the_deadline_then_the_pod_is_deleted() -> None:
    h = new_harness()
    h.add_node("node-a", termination_grace_period="1h")
    h.add_pod(
        "precious", "node-a", grace=30, annotations={wellknown.ANNOTATION_DO_NOT_DISRUPT: "true"}
    )
    h.add_pod("ordinary", "node-a")
    h.server.delete(NODECLAIMS, "node-a-claim")

    h.step()
    claim = h.get(NODECLAIMS, "node-a-claim")
    assert claim is not None
    annotations = claim["metadata"]["annotations"]
    assert annotations[wellknown.ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP] == h.at(3600)
    for name in ("node-a", "node-a-claim"):
        [expiring] = h.events("TerminationGracePeriodExpiring", name=name)
        assert expiring["message"] == f"All pods will be deleted by {h.at(3600)}"

    h.run(lambda: h.elapsed() >= 1800)
    node = h.get(NODES, "node-a")
    assert node is not None
    assert wellknown.FINALIZER_TERMINATION in node["metadata"]["finalizers"]
    assert h.pod("precious") is not None
    assert h.provider.delete_calls == []

    h.run(lambda: h.pod("precious") is None)
    assert h.elapsed() == 3570.0

    # The ordinary pod went at once; the annotated one was never evicted, only deleted at
    # deadline - its terminationGracePeriodSeconds, with that grace period.
    assert [(c.pod, c.at) for c in h.client.evictions()] == [("default/ordinary", 0.0)]
    [delete] = h.client.deletes()
    assert (delete.pod, delete.at, delete.grace) == ("default/precious", 3570.0, 30)
    blocked = h.events("FailedDraining", name="node-a")
    assert blocked
    assert wellknown.ANNOTATION_DO_NOT_DISRUPT in blocked[0]["message"]
    [disrupted] = h.events("Disrupted", name="precious")
    assert "bypasses the PDB of the pod and the do-not-disrupt annotation" in disrupted["message"]

    h.run(h.gone)


def test_the_deadline_deletes_each_pod_early_enough_for_its_own_grace_period() -> None:
    h = new_harness()
    h.add_node("node-a", termination_grace_period="10m")
    # Both pods are held by a PDB, so only the deadline can remove them.
    h.add_pod("slow", "node-a", labels={"app": "held"}, grace=900)
    h.add_pod("medium", "node-a", labels={"app": "held"}, grace=117)
    h.add_pdb("held", {"app": "held"}, min_available=2)
    h.server.delete(NODECLAIMS, "node-a-claim")

    h.run(h.gone)

    deletes = {c.pod: (c.at, c.grace) for c in h.client.deletes()}
    # 900s do not fit in the 600s left: deleted at once, with all the time there is.
    assert deletes["default/slow"] == (0.0, 600)
    # 117s fit: deleted exactly 117s before the deadline, with its full grace period.
    assert deletes["default/medium"] == (483.0, 117)
    assert not h.client.evictions(code=200)


def test_a_pod_stuck_terminating_stops_blocking_a_minute_after_its_deletion_time() -> None:
    h = new_harness()
    h.add_node("node-a")
    h.add_pod("stuck", "node-a", finalizers=["example.com/never-removed"])
    h.server.delete(NODES, "node-a")

    h.run(lambda: h.get(NODES, "node-a") is None)

    # Evicted at once; its kubelet never finishes it: the pod's deletion time is the end of
    # its grace period (30 s, the default), and the node waits a minute past that only.
    assert [(c.pod, c.at) for c in h.client.evictions()] == [("default/stuck", 0.0)]
    assert h.elapsed() == 90.0
    stuck = h.pod("stuck")
    assert stuck is not None
    assert stuck["metadata"]["deletionTimestamp"] == h.at(30)
