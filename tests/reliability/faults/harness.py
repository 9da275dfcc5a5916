"""A scenario run whose controller talks to the in-memory API over HTTP, with faults on a timer.

The controller (the real ``Operator`` and its plugins) reaches the API server only through the
official ``kubernetes`` client and the HTTP front; the emulated cluster around it (Cluster API,
kubelets, the scheduler stand-in) calls the server in process. Faults made ``over_http`` hit the
controller alone, so what a test measures is how the controller copes, not how the emulation
does. Everything runs on the stepped runtime's ``FakeClock``: the server's fault windows, the
controller's backoffs and the schedule below share that virtual time, so a 30 s storm costs no
wall time and a run is repeatable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront, ServedRequest
from karpenter_capi.sim.scenario.result import ScenarioResult
from karpenter_capi.sim.scenario.runner import run
from karpenter_capi.sim.scenario.schema import Scenario, parse_scenario

CONTROLLER_AGENT = "karpenter-capi-under-test"

# Deployments that appear after the faults have begun (at DEPLOY_AT), on an empty catalog.
BURST: dict[str, object] = {
    "name": "fault-burst",
    "description": "three Deployments on an empty catalog, deployed at 10 s",
    "infrastructure": {
        "catalog": {
            "cpus": [2, 4, 8],
            "families": {"c": 2, "m": 8},
            "archs": ["amd64"],
            "zones": ["zone-a"],
            "capacityTypes": ["on-demand"],
            "consolidationPolicy": "WhenEmpty",
            "consolidateAfter": "30s",
        }
    },
    "workloads": [
        {"name": "web", "replicas": 6, "cpu": "500m", "memory": "1Gi"},
        {"name": "api", "replicas": 3, "cpu": "1", "memory": "4Gi"},
        {"name": "batch", "replicas": 2, "cpu": "3", "memory": "12Gi"},
    ],
    "timeline": [
        {"at": "10s", "action": "deploy", "target": name} for name in ("web", "api", "batch")
    ],
}
DEPLOY_AT = 10.0
UNTIL = 90.0
INJECTED = ("TooManyRequests", "InternalError", "ServiceUnavailable", "Timeout", "Gone")
"""What failed API calls raise; a reconcile failing with anything else is a bug."""
"""Virtual seconds each run lasts: the burst is bound well within it in a fault-free run."""


def burst_scenario() -> Scenario:
    return parse_scenario(BURST, "fault-burst")


Action = Callable[["FaultRun"], None]


@dataclass
class FaultRun:
    """One run: the server, its front, what the front served, and the schedule of faults."""

    server: InMemoryAPIServer | None = None
    front: HttpFront | None = None
    client: OfficialClient | None = None
    schedule: list[tuple[float, Action]] = field(default_factory=list)
    """(virtual seconds after setup, action), run as the clock passes each time."""
    result: ScenarioResult | None = None
    down: list[tuple[float, float]] = field(default_factory=list)
    """(from, to) virtual seconds after setup while the front was closed."""
    _origin: float = 0.0
    _now: float = 0.0

    def at(self, seconds: float, action: Action) -> None:
        self.schedule.append((seconds, action))

    @property
    def api(self) -> InMemoryAPIServer:
        assert self.server is not None
        return self.server

    @property
    def http(self) -> HttpFront:
        assert self.front is not None
        return self.front

    def elapsed(self) -> float:
        """Virtual seconds since setup ended (when the schedule's clock starts)."""
        return self.api.clock.monotonic() - self._origin

    def origin(self) -> float:
        """The server-clock monotonic time the schedule counts from."""
        return self._origin

    def requests(self) -> list[ServedRequest]:
        """What the controller sent, with times relative to the schedule's origin."""
        return [
            replace(r, at=r.at - self._origin)
            for r in self.http.requests
            if r.agent == CONTROLLER_AGENT
        ]

    def created(self, plural: str) -> int:
        """Objects of ``plural`` the controller created (POSTs the server answered 201 to,
        whether or not the answer reached the controller)."""
        return sum(
            1
            for r in self.requests()
            if r.method == "POST" and r.status == 201 and r.path.rsplit("/", 1)[-1] == plural
        )

    def close_front(self) -> None:
        self.http.close()
        self.down.append((self.elapsed(), float("inf")))

    def open_front(self) -> None:
        self.http.start()
        start, _ = self.down[-1]
        self.down[-1] = (start, self.elapsed())

    # Hooks for the scenario runner.

    def _on_cluster(self, server: InMemoryAPIServer) -> None:
        self.server = server
        self.front = HttpFront(server, record_requests=True).start()

    def _controller_client(self, server: InMemoryAPIServer) -> OfficialClient:
        client = OfficialClient.from_url(self.http.url, poll_watches=True)
        client.api_client.user_agent = CONTROLLER_AGENT
        self.client = client
        return client

    def _pace(self, now: float) -> None:
        if now == 0:
            self._origin = self.api.clock.monotonic()
        self._now = now
        due = sorted((item for item in self.schedule if item[0] <= now), key=lambda i: i[0])
        for item in due:
            self.schedule.remove(item)
            item[1](self)
        self.api.faults.tick()

    def run(self, scenario: Scenario, *, until: float, seed: int = 0) -> ScenarioResult:
        try:
            self.result = run(
                scenario,
                until=until,
                seed=seed,
                on_cluster=self._on_cluster,
                controller_client=self._controller_client,
                pace=self._pace,
                pace_step=1.0,
            )
        finally:
            if self.client is not None:
                self.client.close()
            if self.front is not None:
                self.front.close()
        return self.result


def invariant_violations(fault_run: FaultRun) -> list[str]:
    """``check_invariants`` on the cluster as the run left it, one line per violation."""
    from karpenter_capi.sim.invariants import check_invariants

    return [str(v) for v in check_invariants(fault_run.api, clock=fault_run.api.clock)]


def early_retries(fault_run: FaultRun, retry_after: float) -> list[str]:
    """Requests sent sooner than ``retry_after`` seconds after the same request got a 429.

    "The same request" is the same method on the same path, a watch told apart from a list.
    """
    early: list[str] = []
    throttled: dict[tuple[str, str, bool], float] = {}
    for request in fault_run.requests():
        key = (request.method, request.path, "watch=1" in request.query)
        since = throttled.pop(key, None)
        if since is not None and request.at - since < retry_after - 1e-6:
            early.append(f"{request.method} {request.path} {request.at - since:.3f}s after a 429")
        if request.status == 429:
            throttled[key] = request.at
    return early


def assert_kept_promises(fault_run: FaultRun, reference: FaultRun) -> None:
    """Late maybe, but the same outcome as the fault-free ``reference`` and a sound cluster.

    Every pod bound; exactly the NodeClaims the reference created (a launch repeated because a
    write's answer was lost would show as one more); the same nodes; no error logged other than
    the injected API errors being retried; and no invariant violation.
    """
    result, expected = fault_run.result, reference.result
    assert result is not None
    assert expected is not None
    assert result.pods_bound == result.pods_total == expected.pods_total
    assert fault_run.created("nodeclaims") == reference.created("nodeclaims")
    assert result.nodeclaims == expected.nodeclaims
    assert result.nodes == expected.nodes
    # Failed reconciles are reported per controller and exception type ("controller x: 3x
    # TooManyRequests: ..."); the runtime's own log lines about them only repeat that.
    failures = [e for e in result.errors if e.startswith("controller ")]
    assert [e for e in failures if not any(f"x {name}:" in e for name in INJECTED)] == []
    assert invariant_violations(fault_run) == []
