"""One controller, two drivers: the Mirror toy behaves the same threaded and stepped.

Each test runs twice against the in-memory API: stepped on a ``FakeClock`` (settling means
``run_until_quiet``), and threaded on the ``SystemClock`` (settling means waiting, on a
condition the reconcile observer signals, until the expected state is visible).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from karpenter_capi.core.clock import FakeClock, SystemClock
from karpenter_capi.core.kube.resources import CONFIGMAPS, PODS
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.core.runtime.threaded import ThreadedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.core.runtime.toys import Mirror, Recorder, configmap, mirrored, pod

WAIT = 10.0


class Harness:
    """The Mirror controller over the in-memory API, under one driver."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        clock = FakeClock() if kind == "stepped" else SystemClock()
        self.api: InMemoryAPIServer = new_cluster(clock=clock)
        self.recorder = Recorder()
        self.manager = Manager(self.api, clock=clock, observer=self.recorder)
        self.mirror = Mirror(self.api, self.manager)
        self.manager.add(self.mirror)
        self.stepped: SteppedDriver | None = None
        self.threaded: ThreadedDriver | None = None
        if kind == "stepped":
            self.stepped = SteppedDriver(self.manager)
        else:
            self.threaded = ThreadedDriver(self.manager, workers=2, poll_interval=0.05)
            self.threaded.start()
            assert self.threaded.wait_for_sync(WAIT)

    def settle(self, expectation: Callable[[], bool]) -> None:
        """Let the controllers work until ``expectation`` holds (and fail if it never does)."""
        if self.stepped is not None:
            self.stepped.run_until_quiet()
            assert expectation()
        else:
            assert self.recorder.wait_until(expectation, WAIT)

    def mirrored(self, name: str) -> dict[str, Any] | None:
        return mirrored(self.api, name)

    def close(self) -> None:
        if self.threaded is not None:
            assert self.threaded.stop(WAIT)


@pytest.fixture(params=["stepped", "threaded"])
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    running = Harness(request.param)
    yield running
    running.close()


def test_mirror_copies_configmap_data_and_follows_updates(harness: Harness) -> None:
    harness.api.create(CONFIGMAPS, configmap("app", {"color": "blue"}), "default")
    harness.settle(lambda: harness.mirrored("app") == {"data": {"color": "blue"}, "pods": []})

    harness.api.patch(CONFIGMAPS, "app", {"data": {"color": "red"}}, "default")
    harness.settle(lambda: harness.mirrored("app") == {"data": {"color": "red"}, "pods": []})


def test_pod_events_are_mapped_to_the_configmap_they_name(harness: Harness) -> None:
    for name in ("a", "b"):
        harness.api.create(CONFIGMAPS, configmap(name, {}), "default")
    harness.api.create(PODS, pod("web-1", "a"), "default")
    harness.settle(lambda: (harness.mirrored("a") or {}).get("pods") == ["web-1"])

    # An update wakes the ConfigMap the old object named as well as the new one.
    harness.api.patch(
        PODS, "web-1", {"metadata": {"annotations": {"example.com/config": "b"}}}, "default"
    )
    harness.settle(
        lambda: (
            (harness.mirrored("a") or {}).get("pods") == []
            and (harness.mirrored("b") or {}).get("pods") == ["web-1"]
        )
    )

    harness.api.delete(PODS, "web-1", "default")
    harness.settle(lambda: (harness.mirrored("b") or {}).get("pods") == [])


def test_a_pod_without_a_configmap_wakes_nothing(harness: Harness) -> None:
    harness.api.create(CONFIGMAPS, configmap("a", {}), "default")
    harness.api.create(PODS, pod("loner", None), "default")
    harness.api.patch(CONFIGMAPS, "a", {"data": {"k": "v"}}, "default")
    harness.settle(lambda: (harness.mirrored("a") or {}).get("data") == {"k": "v"})
    assert set(harness.mirror.reconciled) == {"default/a"}
