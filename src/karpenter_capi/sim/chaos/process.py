"""A controller process that can die at any write, and a world that restarts it.

The kill is a ``ProcessDied`` raised from inside the controller's own client. It is a
``BaseException`` so that nothing on the way out (a reconcile's ``except Exception``, the
runtime's error accounting, a plugin's retry) mistakes it for a failed request to retry: it
unwinds the whole stepped driver, as a SIGKILL ends a real process. Whatever the controller held
in memory (informer caches, plugin caches, queued keys, in-flight intents) is dropped with the
``Operator``; the next one is built from nothing over the same API server, through the same
wiring as a scenario run (``sim.scenario.process``).

The emulated cluster (Cluster API, kubelet, scheduler, workload controllers) is rebuilt with each
process because it is stepped by the same manager, but it writes to the server directly, keeps
its state there, and is never killed: only the controller's writes are counted and cut.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.disruption.candidates import condition_true
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.resources import NODECLAIMS, PODS, Resource
from karpenter_capi.core.plugin_host import Plugins
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.audit import AuditingClient, AuditLog
from karpenter_capi.sim.scenario.process import DEFAULT_PLUGINS, start_controller
from karpenter_capi.sim.scenario.runner import apply_action, load_objects
from karpenter_capi.sim.scenario.schema import Scenario, TimelineAction
from karpenter_capi.sim.scenario.writes import WRITE_VERBS

When = Literal["before", "after"]
# A world that keeps dying is a controller that cannot make progress from the API alone (or
# a plan gone wrong); either way the run must stop and say so instead of spinning.
MAX_RESTARTS = 10_000


class ProcessDied(BaseException):
    """The controller process was killed (``str``: where)."""


@dataclass(frozen=True, order=True)
class KillPoint:
    """Kill the process at the controller's ``write``-th write of a phase (from 0): ``before``
    it reaches the API server (the request lost), or ``after`` (applied, the answer lost)."""

    write: int
    when: When = "before"

    def __str__(self) -> str:
        return f"{self.when} write #{self.write}"


class KillSwitch:
    """Counts the controller's writes across its restarts and decides where it dies.

    Writes are counted only while ``counting`` (a phase's kill window). The base switch never
    kills: it is what counts a phase's writes once. ``choose`` is the policy: ``PlannedKills``
    kills at planned write numbers; a test may override it (per-write odds, say). ``write`` and
    ``landed`` are also what non-Kubernetes writes call (a cloud API's, through its SDK's event
    hooks), so a crash between a CreateFleet and its answer is one more kill point.
    """

    def __init__(self) -> None:
        self.counting = False
        self.writes = 0
        self.total = 0  # every write, counted or not: what ``ChaosWorld.run_until_idle`` watches
        self.deaths: list[str] = []
        self.killed: list[str] = []  # the writes the deaths were at, ``patch machines/scale``
        self._landing: tuple[str, str] | None = None

    def choose(self, index: int, what: str) -> When | None:
        """Whether the process dies at write ``index`` (``what``: ``patch machines``)."""
        del index, what
        return None

    def write(self, what: str) -> None:
        """A write is about to be sent; may kill the process before it is."""
        self._landing = None
        self.total += 1
        if not self.counting:
            return
        index = self.writes
        self.writes += 1
        when = self.choose(index, what)
        if when == "after":
            self._landing = (f"after write #{index} ({what})", what)
        elif when == "before":
            self._die(f"before write #{index} ({what})", what)

    def landed(self) -> None:
        """The write sent last has been answered; may kill the process before it hears."""
        landing, self._landing = self._landing, None
        if landing is not None:
            self._die(*landing)

    def _die(self, where: str, what: str) -> None:
        self.deaths.append(where)
        self.killed.append(what)
        raise ProcessDied(where)


class PlannedKills(KillSwitch):
    """Kills at the given points of the next kill window (``arm``)."""

    def __init__(self) -> None:
        super().__init__()
        self._plan: dict[int, When] = {}

    def arm(self, points: Iterable[KillPoint]) -> None:
        """Count from 0 and kill at ``points``."""
        self._plan = {p.write: p.when for p in points}
        self.writes = 0
        self.counting = True

    def disarm(self) -> None:
        self._plan = {}
        self.counting = False

    @property
    def pending(self) -> int:
        """Planned kills not reached (the run wrote less than the plan expected)."""
        return sum(1 for index in self._plan if index >= self.writes)

    def choose(self, index: int, what: str) -> When | None:
        return self._plan.get(index)


class DyingClient(AuditingClient):
    """The controller's ``KubeClient``: every write passes the ``KillSwitch`` first (which may
    kill the process there) and again once answered (which may kill it before the controller
    hears). Requests are also recorded in ``log`` (``AuditingClient``), for the writes a phase
    made by kind."""

    def __init__(self, inner: InMemoryAPIServer, switch: KillSwitch, log: AuditLog) -> None:
        super().__init__(inner, log)
        self.switch = switch

    def _record(
        self,
        verb: str,
        resource: Resource,
        namespace: str | None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> None:
        super()._record(verb, resource, namespace, name, subresource)
        if verb in WRITE_VERBS:
            self.switch.write(
                f"{verb} {resource.plural}" + (f"/{subresource}" if subresource else "")
            )

    def _written(self) -> None:
        self.switch.landed()


class ChaosWorld:
    """An in-memory cluster loaded with ``scenario`` and a controller process over it that the
    ``switch`` may kill; ``advance`` and ``settle`` restart it (from the API alone) each time.

    ``plugin_objects`` builds the plugins of each new process (a new process loads its plugins
    anew, caches empty); without it the scenario's own (``generic_capi``, and ``capz`` over the
    simulated Azure for a scenario with ``azure:``) are loaded. ``emulation`` overrides the CAPI
    emulation's settings. ``aws_values`` are substituted into the scenario's manifests.
    """

    def __init__(
        self,
        scenario: Scenario,
        *,
        seed: int = 0,
        switch: KillSwitch | None = None,
        plugins: Sequence[str] = DEFAULT_PLUGINS,
        plugin_objects: Callable[[], Sequence[tuple[str, object]]] | None = None,
        emulation: Mapping[str, Any] | None = None,
        aws_values: Mapping[str, str] | None = None,
    ) -> None:
        random.seed(seed)
        self.scenario = scenario
        self.seed = seed
        self.switch = switch if switch is not None else PlannedKills()
        self.clock = FakeClock()
        self.server = InMemoryAPIServer(clock=self.clock, random_seed=seed)
        self.server.apply_manifests(generate_crds())
        self.server.register_cluster_api()
        load_objects(self.server, scenario, aws_values)
        self.log = AuditLog()
        self._plugins = tuple(plugins)
        self._plugin_objects = plugin_objects
        self._emulation = dict(emulation or {})
        self.restarts = 0
        self.plugins: Plugins
        self.driver: SteppedDriver
        self._start()

    def _start(self) -> None:
        """A new controller process (and the emulated cluster stepped with it)."""
        process = start_controller(
            self.scenario,
            self.server,
            self.clock,
            DyingClient(self.server, self.switch, self.log),
            seed=self.seed,
            plugins=self._plugins,
            plugin_objects=None if self._plugin_objects is None else self._plugin_objects(),
            emulation=self._emulation,
        )
        self.plugins = process.plugins
        self.driver = process.operator.stepped()

    def _restart(self) -> None:
        self.restarts += 1
        if self.restarts > MAX_RESTARTS:
            raise RuntimeError(
                f"the controller died {MAX_RESTARTS} times; last: {self.switch.deaths[-1]}"
            )
        self._start()

    def settle(self) -> None:
        """Run at the current time until nothing is left to do, surviving deaths."""
        while True:
            try:
                self.driver.run_until_quiet()
                return
            except ProcessDied:
                self._restart()

    def advance(self, seconds: float) -> None:
        """Move ``seconds`` of virtual time forward; a death restarts the controller and the
        rest of the time runs on the new one (time the dead one used stays used)."""
        target = self.clock.monotonic() + seconds
        while True:
            try:
                self.driver.run_until_quiet()
                self.driver.advance(max(0.0, target - self.clock.monotonic()))
                return
            except ProcessDied:
                self._restart()

    def restart(self) -> None:
        """Replace the controller by a new process, as a rolled-out Deployment would."""
        self._start()

    def idle(self) -> bool:
        """No NodeClaim is launching, registering or being deleted, and no pod is pending:
        what the controller still has to do is at most a periodic check."""
        return self.nodeclaims_at_rest() and all(p["spec"].get("nodeName") for p in self.live(PODS))

    def nodeclaims_at_rest(self) -> bool:
        """No NodeClaim is launching, registering or being deleted: no disruption or launch is
        under way (a pod may still be pending, which is then the controller's to explain)."""
        return not any(
            claim["metadata"].get("deletionTimestamp") or not condition_true(claim, "Ready")
            for claim in self.server.list(NODECLAIMS).items
        )

    def run_until_idle(self, *, quiet: float, limit: float, step: float = 30.0) -> float:
        """Advance in ``step``s until the cluster is ``idle`` and the controller has written
        nothing for ``quiet`` seconds, or ``limit`` seconds have passed; returns the seconds
        run. The check is between steps, so the cluster may run up to a ``step`` past idle."""
        start = self.clock.monotonic()
        last_write, writes = start, self.switch.total
        while self.clock.monotonic() - start < limit:
            self.advance(min(step, limit - (self.clock.monotonic() - start)))
            now = self.clock.monotonic()
            if self.switch.total != writes:
                last_write, writes = now, self.switch.total
            elif now - last_write >= quiet and self.idle():
                break
        return self.clock.monotonic() - start

    def apply(self, action: TimelineAction) -> None:
        """A timeline action, made by the user (never killed), then settled."""
        apply_action(self.server, self.scenario, action)
        self.settle()

    def live(self, resource: Resource, namespace: str | None = None) -> list[JsonObject]:
        """The objects of ``resource`` not being deleted."""
        return [
            o
            for o in self.server.list(resource, namespace).items
            if not o["metadata"].get("deletionTimestamp")
        ]


def pick_points(rng: random.Random, writes: int, count: int) -> list[KillPoint]:
    """``count`` distinct kill points drawn uniformly among ``writes`` writes (all of them when
    there are fewer), each before or after its write with even odds, in write order."""
    indices = rng.sample(range(writes), min(count, writes))
    return sorted(KillPoint(i, rng.choice(("before", "after"))) for i in indices)
