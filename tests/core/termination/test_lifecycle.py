"""Node and NodeClaim end together, whichever goes first, and only after the machine is gone."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES
from karpenter_capi.core.observability.metrics import Metrics
from karpenter_capi.core.plugin_host import PluginCallError
from tests.core.termination.harness import Harness, new_harness


def _finalizers(h: Harness, resource: Any, name: str) -> list[str] | None:
    obj = h.get(resource, name)
    return None if obj is None else obj["metadata"].get("finalizers", [])


def _conditions(h: Harness, name: str) -> dict[str, str]:
    claim = h.get(NODECLAIMS, name)
    assert claim is not None
    return {c["type"]: c["status"] for c in claim.get("status", {}).get("conditions", [])}


def test_a_node_deleted_first_takes_its_nodeclaim_with_it() -> None:
    h = new_harness()
    h.add_node("node-a")
    h.add_pod("web-1", "node-a")
    h.server.delete(NODES, "node-a")

    h.node_controller.reconcile("node-a")

    claim = h.get(NODECLAIMS, "node-a-claim")
    assert claim is not None
    assert claim["metadata"].get("deletionTimestamp")
    h.run(h.gone)
    assert h.pod("web-1") is None
    assert "node-a-claim" not in h.provider.machines


def test_a_nodeclaim_deleted_first_takes_its_node_with_it() -> None:
    h = new_harness()
    h.add_node("node-a")
    h.add_pod("web-1", "node-a")
    h.server.delete(NODECLAIMS, "node-a-claim")

    h.nodeclaim_controller.reconcile("node-a-claim")

    node = h.get(NODES, "node-a")
    assert node is not None
    assert node["metadata"].get("deletionTimestamp")
    # The NodeClaim outlives its Node: it holds the deadline and is what the hook deletes.
    assert _finalizers(h, NODECLAIMS, "node-a-claim") == [wellknown.FINALIZER_TERMINATION]
    h.run(h.gone)
    assert h.pod("web-1") is None
    assert "node-a-claim" not in h.provider.machines


def test_the_delete_hook_is_called_until_the_instance_is_not_found() -> None:
    h = new_harness(polls=3)
    h.add_node("node-a")
    h.server.delete(NODES, "node-a")

    results = h.node_controller.reconcile("node-a")  # drained (empty), first hook call
    assert results.requeue_after == 5.0
    assert _conditions(h, "node-a-claim") == {"Drained": "True", "InstanceTerminating": "True"}
    for _ in range(2):
        h.clock.advance(5)
        assert h.node_controller.reconcile("node-a").requeue_after == 5.0
        # While the plugin still reports the machine, nothing is released.
        assert _finalizers(h, NODES, "node-a") == [wellknown.FINALIZER_TERMINATION]
        assert _finalizers(h, NODECLAIMS, "node-a-claim") == [wellknown.FINALIZER_TERMINATION]
    assert h.provider.delete_calls == ["node-a-claim"] * 3

    h.clock.advance(5)
    h.node_controller.reconcile("node-a")  # the fourth call raises InstanceNotFoundError
    assert h.get(NODES, "node-a") is None
    assert _finalizers(h, NODECLAIMS, "node-a-claim") == [wellknown.FINALIZER_TERMINATION]

    h.nodeclaim_controller.reconcile("node-a-claim")
    assert h.gone()
    assert h.provider.delete_calls == ["node-a-claim"] * 5


def test_a_nodeclaim_that_never_got_a_node_still_deletes_its_machine() -> None:
    h = new_harness(polls=2)
    h.add_node("node-a")
    h.server.patch(NODES, "node-a", {"metadata": {"finalizers": None}})
    h.server.delete(NODES, "node-a")
    h.server.delete(NODECLAIMS, "node-a-claim")

    h.run(h.gone)

    assert h.provider.delete_calls == ["node-a-claim"] * 3
    assert h.provider.machines == {}


def test_a_dead_node_whose_machine_is_gone_is_not_drained() -> None:
    h = new_harness()
    h.add_node("node-a", ready=False, machine=False)
    h.add_pod("web-1", "node-a", labels={"app": "web"})
    h.add_pdb("web", {"app": "web"}, min_available=1)
    h.server.delete(NODES, "node-a")

    h.run(h.gone)

    assert h.client.calls == []  # nothing to evict from a machine that no longer exists
    assert h.pod("web-1") is not None


def test_a_node_without_a_nodeclaim_is_held_and_reported() -> None:
    h = new_harness()
    h.add_node("node-a")
    h.server.patch(NODECLAIMS, "node-a-claim", {"metadata": {"finalizers": None}})
    h.server.delete(NODECLAIMS, "node-a-claim")
    h.server.delete(NODES, "node-a")

    result = h.node_controller.reconcile("node-a")

    # Letting the Node go while its machine may run would let the kubelet register it again.
    assert result.requeue_after == 60.0
    assert _finalizers(h, NODES, "node-a") == [wellknown.FINALIZER_TERMINATION]
    [event] = h.events("FailedTermination", name="node-a")
    assert "expected exactly one NodeClaim" in event["message"]


def test_dry_run_logs_what_it_would_do_and_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = new_harness(dry_run=True)
    h.add_node("node-a", termination_grace_period="1m")
    h.add_pod("web-1", "node-a", grace=10)
    h.add_pod("web-2", "node-a", annotations={wellknown.ANNOTATION_DO_NOT_DISRUPT: "true"})
    h.server.delete(NODES, "node-a")
    before = h.server.resource_version

    with caplog.at_level(logging.INFO, logger="karpenter_capi"):
        h.node_controller.reconcile("node-a")
        h.nodeclaim_controller.reconcile("node-a-claim")

    assert h.server.resource_version == before  # no write at all, Events included
    assert h.client.calls == []
    assert h.provider.delete_calls == []
    messages = [r.getMessage() for r in caplog.records]
    assert "dry run: would delete NodeClaim node-a-claim" in messages
    assert any(m.startswith("dry run: would taint karpenter.sh/disrupted") for m in messages)
    assert "dry run: would evict pod default/web-1" in messages


def _samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for sample in family.samples
    }


def test_metrics_follow_the_termination_when_a_registry_is_given() -> None:
    metrics = Metrics()
    h = new_harness(polls=1, metrics=metrics)
    h.add_node("node-a")
    h.add_pod("web-1", "node-a", labels={"app": "web"})
    h.add_pdb("web", {"app": "web"}, min_available=1)
    h.server.delete(NODES, "node-a")
    h.step()
    h.set_pdb("web", min_available=0)
    h.clock.advance(1)

    h.run(h.gone)

    samples = _samples(metrics)
    evictions = "karpenter_nodes_eviction_requests_total"
    assert samples[(evictions, (("code", "429"),))] == 1
    assert samples[(evictions, (("code", "200"),))] == 1
    assert samples[("karpenter_pods_drained_total", (("reason", "Forceful Termination"),))] == 1
    assert samples[("karpenter_nodes_drained_total", (("nodepool", "general"),))] == 1
    assert (
        samples[("karpenter_nodes_terminated_total", (("nodepool", "general"), ("zone", "")))] == 1
    )
    terminated = [
        value
        for (name, labels), value in samples.items()
        if name == "karpenter_nodeclaims_terminated_total"
        and ("capacity_type", "on-demand") in labels
        and ("nodepool", "general") in labels
    ]
    assert terminated == [1]


def test_a_failing_delete_hook_is_retried_and_holds_both_objects() -> None:
    h = new_harness()
    h.add_node("node-a")
    h.provider.fail_with = RuntimeError("cloud API down")
    h.server.delete(NODES, "node-a")

    with pytest.raises(PluginCallError):  # the runtime retries it with backoff
        h.node_controller.reconcile("node-a")

    assert _finalizers(h, NODES, "node-a") == [wellknown.FINALIZER_TERMINATION]
    [event] = h.events("FailedTermination", name="node-a-claim")
    assert "cloud API down" in event["message"]

    h.provider.fail_with = None
    h.run(h.gone)
    assert h.provider.machines == {}
