"""The event recorder: repeats fold into one Event, and what it remembers stays bounded."""

from __future__ import annotations

from datetime import timedelta

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.events import WARNING, EventRecorder
from karpenter_capi.core.kube.resources import EVENTS
from karpenter_capi.sim.apiserver import InMemoryAPIServer


def _pod(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
    }


def test_a_repeat_within_the_window_bumps_the_count_of_one_event() -> None:
    clock = FakeClock()
    api = InMemoryAPIServer(clock=clock)
    recorder = EventRecorder(api, clock)
    for _ in range(3):
        recorder.record(_pod("web-1"), WARNING, "FailedScheduling", "no node fits")
        clock.advance(60)
    [event] = api.list(EVENTS, "default").items
    assert event["count"] == 3


def test_what_the_recorder_remembers_is_bounded_by_its_window_not_by_every_object_ever_seen() -> (
    None
):
    # A day of churn: a thousand pods come, are told something once, and go.
    clock = FakeClock()
    api = InMemoryAPIServer(clock=clock)
    recorder = EventRecorder(api, clock)
    for n in range(1000):
        recorder.record(_pod(f"web-{n}"), WARNING, "Nominated", f"on nodeclaim-{n}")
        clock.advance(30)
    # One event every 30 s; entries older than 15 min are forgotten at least every 15 min:
    # at most two windows' worth (60 events) remain, not a thousand.
    assert len(recorder._recent) <= 60
    # Forgetting does not break folding for an object still being told the same thing.
    for _ in range(3):
        recorder.record(_pod("web-999"), WARNING, "Nominated", "on nodeclaim-999")
    events = [
        e for e in api.list(EVENTS, "default").items if e["involvedObject"]["name"] == "web-999"
    ]
    assert [e["count"] for e in events] == [4]


def test_a_deduplicated_event_is_not_written_again_within_its_window_after_a_sweep() -> None:
    clock = FakeClock()
    api = InMemoryAPIServer(clock=clock)
    recorder = EventRecorder(api, clock)
    window = timedelta(minutes=30)  # longer than the repeat window: the sweep must keep it
    recorder.record(_pod("node-a"), WARNING, "Unconsolidatable", "pdb", dedupe=window)
    for n in range(40):  # other events, past several sweeps
        clock.advance(40)
        recorder.record(_pod(f"other-{n}"), WARNING, "X", "y")
    recorder.record(_pod("node-a"), WARNING, "Unconsolidatable", "pdb", dedupe=window)
    said = [e for e in api.list(EVENTS, "default").items if e["reason"] == "Unconsolidatable"]
    assert [e["count"] for e in said] == [1]


def test_a_correlated_event_bumps_the_one_another_recorder_wrote_however_old() -> None:
    """A second replica (a fresh recorder) saying what the first said: the Event there gets
    count 2 and the new lastTimestamp; a different message, or the same one from another
    component, is an Event of its own."""
    clock = FakeClock()
    api = InMemoryAPIServer(clock=clock)
    cluster = {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": "alpha", "namespace": "default", "uid": "uid-alpha"},
    }
    EventRecorder(api, clock).record(cluster, WARNING, "KubeconfigInvalid", "not base64")
    EventRecorder(api, clock, component="other").record(
        cluster, WARNING, "KubeconfigInvalid", "not base64"
    )
    clock.advance(3600)  # past the repeat window: it is still the same news
    taker = EventRecorder(api, clock)
    taker.record(cluster, WARNING, "KubeconfigInvalid", "not base64", correlate=True)
    taker.record(cluster, WARNING, "KubeconfigInvalid", "not base64", correlate=True)
    taker.record(cluster, WARNING, "KubeconfigInvalid", "no server", correlate=True)
    events = sorted(
        (e["source"]["component"], e["message"], e["count"], e["lastTimestamp"])
        for e in api.list(EVENTS, "default").items
    )
    later = events[0][3]
    assert events == [
        ("karpenter", "no server", 1, later),
        ("karpenter", "not base64", 3, later),
        ("other", "not base64", 1, events[2][3]),
    ]
    assert events[2][3] < later
