"""Garbage collection: leaked instances and NodeClaims whose instance vanished."""

from __future__ import annotations

import logging

import pytest

from karpenter_capi.core.errors import ProviderError
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.resources import NODECLAIMS
from karpenter_capi.core.lifecycle import orphan_nodeclaim
from karpenter_capi.core.lifecycle.garbagecollection import ORPHAN_INSTANCE_ANNOTATION
from tests.core.lifecycle.harness import Env, new_env


def launched(env: Env, name: str) -> str:
    env.nodeclaim(name)
    env.reconcile(env.lifecycle(), name)
    return str(env.get(name)["status"]["providerID"])


def test_a_leaked_instance_is_deleted_after_the_grace_period() -> None:
    env = new_env(delete_calls_to_finish=2)
    leak = env.provider.add_instance()
    assert leak.provider_id is not None
    env.node("leaked-node", leak.provider_id)
    collector = env.gc()

    result = env.run_gc(collector)
    assert env.provider.count("delete") == 0, "a first sighting is not enough"
    assert result.requeue_after == pytest.approx(30)

    env.clock.advance(29)
    env.run_gc(collector)
    assert env.provider.count("delete") == 0

    env.clock.advance(1)
    result = env.run_gc(collector)
    assert env.provider.count("delete") == 1
    assert leak.state == "deleting"
    with pytest.raises(NotFound):
        env.get_node("leaked-node")  # its Node goes too, so its pods move sooner
    assert result.requeue_after == pytest.approx(120)

    # The delete hook is called on every pass until the provider says the machine is gone.
    for _ in range(2):
        env.clock.advance(120)
        env.run_gc(collector)
    assert env.provider.instances == {}
    assert ("Delete", "all", "nodeclaim.garbagecollection") in env.metrics.named(
        "cloudprovider_call"
    )


def test_claimed_instances_are_never_collected(env: Env) -> None:
    launched(env, "by-provider-id")
    pending = env.provider.add_instance(nodeclaim_name="by-name", bound=False)
    env.nodeclaim("by-name")
    collector = env.gc(orphan_grace=0)

    for _ in range(3):
        env.run_gc(collector)
        env.clock.advance(120)

    assert env.provider.count("delete") == 0
    assert pending.name in env.provider.instances


def test_an_instance_claimed_again_within_the_grace_period_is_kept(env: Env) -> None:
    orphan = env.provider.add_instance(nodeclaim_name="late", bound=False)
    collector = env.gc()
    env.run_gc(collector)
    env.nodeclaim("late")
    env.clock.advance(30)

    env.run_gc(collector)

    assert env.provider.count("delete") == 0
    assert orphan.name in env.provider.instances


def test_a_nodeclaim_whose_instance_vanished_is_deleted(env: Env) -> None:
    provider_id = launched(env, "nc")
    env.provider.vanish(provider_id)

    env.run_gc(env.gc())

    assert env.get("nc")["metadata"].get("deletionTimestamp")
    (event,) = env.events("InstanceGarbageCollected")
    assert provider_id in event["message"]
    assert env.metrics.named("nodeclaim_disrupted") == [
        ("garbage_collected", "general", "on-demand")
    ]


def test_a_nodeclaim_is_kept_while_its_node_is_ready_whatever_the_provider_says(
    env: Env,
) -> None:
    provider_id = launched(env, "nc")
    env.node("node-1", provider_id, ready=True)
    env.provider.vanish(provider_id)

    env.run_gc(env.gc())

    assert not env.get("nc")["metadata"].get("deletionTimestamp")


def test_a_provider_id_no_plugin_recognises_is_not_taken_for_a_vanished_machine(
    env: Env,
) -> None:
    launched(env, "nc")
    env.api.patch(
        NODECLAIMS, "nc", {"status": {"providerID": "aws:///zone-a/i-0abc"}}, subresource="status"
    )

    env.run_gc(env.gc())

    assert not env.get("nc")["metadata"].get("deletionTimestamp")


def test_a_nodeclaim_still_launching_is_not_collected(env: Env) -> None:
    env.nodeclaim("nc")  # never launched: liveness, not GC, decides its fate

    env.run_gc(env.gc())

    assert not env.get("nc")["metadata"].get("deletionTimestamp")


def test_dry_run_collects_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="test.lifecycle")
    env = new_env(dry_run=True)
    env.provider.add_instance()
    collector = env.gc(orphan_grace=0)

    env.run_gc(collector)

    assert env.provider.count("delete") == 0
    assert "would delete orphaned instance fake://" in caplog.text


def test_the_orphan_handed_to_the_delete_hook_names_the_instance(env: Env) -> None:
    instance = env.provider.add_instance(instance_type="large").view()

    claim = orphan_nodeclaim(instance)

    assert claim.name == instance.name
    assert claim.status.provider_id == instance.provider_id
    assert claim.metadata.annotations[ORPHAN_INSTANCE_ANNOTATION] == instance.name
    assert claim.metadata.labels["node.kubernetes.io/instance-type"] == "large"


def test_a_listing_that_keeps_failing_is_one_warning_until_it_changes_or_works(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """An outage of the provider is one line, not one a round; news again after it ends."""
    collector = env.gc()
    env.provider.list_error = ProviderError("management cluster unreachable")

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]

    with caplog.at_level(logging.DEBUG):
        for _ in range(5):
            env.run_gc(collector)
            env.clock.advance(120)
        assert len(warnings()) == 1, warnings()
        assert (
            "cannot list instances or NodeClaims: management cluster unreachable" in (warnings()[0])
        )
        assert not any(r.exc_info for r in caplog.records)

        env.provider.list_error = ProviderError("access denied")
        env.run_gc(collector)
        assert len(warnings()) == 2

        env.provider.list_error = None
        env.run_gc(collector)
        env.provider.list_error = ProviderError("access denied")
        env.run_gc(collector)
        assert len(warnings()) == 3, "a failure after a success is news again"
