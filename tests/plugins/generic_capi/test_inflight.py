"""Which NodeClaim a Machine's event wakes: one per new free Machine, oldest first; a bound one
only when its Machine has news; nobody this process is not waiting for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.plugins.generic_capi.binding import (
    ANNOTATION_NODECLAIM,
    ClaimFacts,
    MachineFacts,
    machine_facts,
)
from karpenter_capi.plugins.generic_capi.inflight import WAKE_PENDING, LaunchesInFlight

MD = "MachineDeployment/default/md-a"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _claim(name: str, second: int) -> ClaimFacts:
    return ClaimFacts(
        name=name,
        uid=f"uid-{name}",
        created=T0 + timedelta(seconds=second),
        deleting=False,
        labels={},
        annotations={},
        provider_id="",
    )


def _machine(name: str, second: int, claim: str = "", provider_id: str = "") -> MachineFacts:
    raw: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "default",
            "creationTimestamp": (T0 + timedelta(seconds=second)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "labels": {"cluster.x-k8s.io/deployment-name": "md-a"},
            "annotations": {ANNOTATION_NODECLAIM: claim} if claim else {},
        },
        "spec": {"providerID": provider_id} if provider_id else {},
    }
    return machine_facts(raw)


def test_each_new_free_machine_wakes_the_next_oldest_nodeclaim_not_newer_than_it() -> None:
    clock = FakeClock()
    inflight = LaunchesInFlight(clock.monotonic)
    for name, second in (("nc-late", 20), ("nc-b", 2), ("nc-a", 1)):
        inflight.intend(_claim(name, second), MD)

    first = inflight.to_wake(_machine("m-1", 10))
    again = inflight.to_wake(_machine("m-1", 10))  # an update of the same Machine
    second = inflight.to_wake(_machine("m-2", 10))
    third = inflight.to_wake(_machine("m-3", 10))  # nc-late is newer than this Machine

    assert (first, again, second, third) == (["nc-a"], ["nc-a"], ["nc-b"], [])


def test_a_wake_is_spent_by_the_nodeclaims_next_call_or_after_a_while() -> None:
    clock = FakeClock()
    inflight = LaunchesInFlight(clock.monotonic)
    inflight.intend(_claim("nc-a", 1), MD)
    inflight.intend(_claim("nc-b", 2), MD)
    assert inflight.to_wake(_machine("m-1", 10)) == ["nc-a"]

    inflight.ran("nc-a")  # nc-a's create ran and did not take m-1: m-1 may wake again
    assert inflight.to_wake(_machine("m-1", 10)) == ["nc-a"]
    clock.advance(WAKE_PENDING + 1)  # nc-a never came back (it went): the next one
    assert inflight.to_wake(_machine("m-2", 10)) == ["nc-a"]
    assert inflight.to_wake(_machine("m-1", 10)) == ["nc-b"]


def test_a_bound_machine_wakes_its_nodeclaim_only_with_news_and_only_while_it_waits() -> None:
    inflight = LaunchesInFlight(FakeClock().monotonic)
    inflight.intend(_claim("nc-a", 1), MD)
    inflight.bound("nc-a")

    assert inflight.to_wake(_machine("m-1", 10, claim="nc-a")) == []
    assert inflight.to_wake(_machine("m-1", 10, claim="nc-a", provider_id="sim://m-1")) == ["nc-a"]
    inflight.done("nc-a")
    assert inflight.to_wake(_machine("m-1", 10, claim="nc-a", provider_id="sim://m-1")) == []
    assert inflight.to_wake(_machine("m-2", 10)) == []  # nobody waits on md-a any more
