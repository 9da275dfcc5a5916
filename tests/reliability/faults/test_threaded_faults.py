"""The threaded operator over HTTP on real time: dropped watches, a restart, and ``/readyz``.

Watches only exist as long-lived streams in the threaded runtime (the stepped one polls), so
this is where "watches dropped every few seconds" and a restart cutting open streams are
exercised, with the real threads, sockets and probe endpoint. Wall time is precious, so the
scenario is scaled down: drops every 2 s, an outage of 1.5 s instead of 20 s, and a readiness
threshold of 0.5 s instead of 30 s. Every wave of pods must get exactly one NodeClaim per pod
(each pod needs most of a "large" instance), however many times the watches were cut.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import SystemClock
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES, NODECLAIMS, NODEPOOLS, PODS
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.invariants import check_invariants
from tests.support.provider import FakeProvider

UNREADY_AFTER = 0.5
DOWN_FOR = 1.5  # the 20 s, scaled down with everything else


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``condition`` in real time (real threads are racing); returns the seconds taken."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)
    return time.monotonic() - start


def _probe(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _pending(api: InMemoryAPIServer, name: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "5"}}}]},
    }
    api.create(PODS, pod, "default")
    status = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    }
    api.patch(PODS, name, {"status": status}, "default", subresource="status")


def _pool(api: InMemoryAPIServer) -> None:
    api.create(
        CLUSTER_API_NODE_CLASSES,
        {
            "apiVersion": wellknown.NODECLASS_API_VERSION,
            "kind": wellknown.NODECLASS_KIND,
            "metadata": {"name": "default"},
            "spec": {},
        },
    )
    ref = {"group": wellknown.NODECLASS_GROUP, "kind": wellknown.NODECLASS_KIND, "name": "default"}
    api.create(
        NODEPOOLS,
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "general"},
            "spec": {"template": {"spec": {"nodeClassRef": ref, "requirements": []}}},
        },
    )


class Running:
    def __init__(self) -> None:
        self.clock = SystemClock()
        self.api = new_cluster(clock=self.clock)
        _pool(self.api)
        self.front = HttpFront(self.api, record_requests=True).start()
        self.client = OfficialClient.from_url(self.front.url)
        provider = FakeProvider(self.clock)
        options = OperatorOptions(
            leader_elect=False,
            metrics_host="127.0.0.1",
            metrics_port=0,
            batch_idle=0.1,
            batch_max=1.0,
            workers=2,
            unready_after=UNREADY_AFTER,
        )
        self.operator = Operator(
            self.client, self.client, provider.plugins(self.client), self.clock, options
        )
        self.stop = threading.Event()
        self.started = threading.Event()
        self.thread = threading.Thread(
            target=self.operator.run,
            args=(self.stop,),
            kwargs={"on_started": self.started.set},
            name="operator",
            daemon=True,
        )

    @property
    def probe_url(self) -> str:
        assert self.operator.server is not None
        return self.operator.server.url

    def claims(self) -> int:
        return len(self.api.list(NODECLAIMS).items)

    def created_claims(self) -> int:
        return sum(
            1
            for r in self.front.requests
            if r.method == "POST" and r.status == 201 and r.path.endswith("/nodeclaims")
        )

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        self.client.close()
        self.front.close()


@pytest.fixture
def running() -> Iterator[Running]:
    running = Running()
    running.thread.start()
    assert running.started.wait(10)
    try:
        yield running
    finally:
        running.close()


def threads_of(*prefixes: str) -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith(prefixes))


def _controller_threads() -> list[str]:
    # Informer timer threads come and go with each watch; these live as long as the driver.
    return [n for n in threads_of("informer-", "worker-", "periodic-") if not n.endswith("-timer")]


def test_dropped_watches_and_a_restart_lose_nothing_and_readyz_tells_the_truth(
    running: Running,
) -> None:
    api, front = running.api, running.front
    _wait_for(lambda: _probe(running.probe_url)[0] == 200, 10, "/readyz to turn ready")
    threads = _controller_threads()
    assert threads

    for i in range(3):
        _pending(api, f"wave1-{i}")
    _wait_for(lambda: running.claims() == 3, 15, "one NodeClaim per pod of wave 1")

    # Watches cut every 2 s while a second wave arrives: resumed, nothing missed, and no
    # reason to turn unready (a watch that lived a second is a healthy one).
    api.faults.drop_watches_every(2.0, duration=5.0)
    for i in range(3):
        _pending(api, f"wave2-{i}")
    probes: list[int] = []

    def dropped_enough() -> bool:
        probes.append(_probe(running.probe_url)[0])
        return api.faults.injected["watch_drop"] >= 2 * len(running.operator.manager.informers)

    _wait_for(dropped_enough, 10, "two rounds of dropped watches")
    _wait_for(lambda: running.claims() == 6, 15, "one NodeClaim per pod of wave 2")
    assert set(probes) == {200}

    # The API server goes away: /readyz turns 503 and says why; back: ready again.
    front.close()
    went_down = time.monotonic()
    unready_after = _wait_for(
        lambda: _probe(running.probe_url)[0] == 503, 10, "/readyz to report the outage"
    )
    status, body = _probe(running.probe_url)
    assert status == 503
    assert "cannot follow the API server" in body
    assert "workload/" in body  # names a cache, and its last error
    for i in range(3):
        _pending(api, f"wave3-{i}")  # arrive while the controller cannot see them
    time.sleep(max(0.0, DOWN_FOR - (time.monotonic() - went_down)))
    front.start()
    came_back = time.monotonic()
    ready_again = _wait_for(lambda: _probe(running.probe_url)[0] == 200, 40, "/readyz to recover")
    provisioned = _wait_for(lambda: running.claims() == 9, 40, "NodeClaims for wave 3")

    print(
        f"\nthreaded faults: {api.faults.injected['watch_drop']} watches dropped; /readyz 503 "
        f"{unready_after:.2f}s after the API went down, 200 again {ready_again:.2f}s after it "
        f"came back; wave 3 provisioned {time.monotonic() - came_back:.2f}s after the return "
        f"(waited {provisioned:.2f}s)"
    )
    assert unready_after >= UNREADY_AFTER - 0.05
    assert running.claims() == 9
    assert running.created_claims() == 9
    assert front.restarts == 1
    assert _controller_threads() == threads  # no controller thread died
    assert check_invariants(api, clock=running.clock) == []
