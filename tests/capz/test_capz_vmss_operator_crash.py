"""The whole controller killed at random writes of the shipped ``azure-vmss`` scenario, and
restarted from what the API holds: no NodeClaim launched twice, no replica or pool Machine
leaked, every pod bound once things settle.

The plugin-level crash test (``test_capz_pools_crash``) calls the hooks by hand; this one runs
the real ``Operator`` (provisioning, lifecycle, consolidation, termination) on the stepped
runtime, with the CAPI emulation (stock CAPZ) and the simulator's Azure, as
``karpenter-capi simulate azure-vmss`` does. The controller's client, once armed, dies at its
k-th write, before the write reaches the API or after it (the answer lost). ``ProcessDied`` is a
``BaseException`` so that no ``except Exception`` in the runtime or the plugin layer mistakes it
for a failed reconcile to retry: it unwinds out of the driver, and the test starts a new
``Operator`` (new plugins, empty caches) over the same API server. The emulated cluster is
rebuilt with it; it keeps no state outside the API either.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from typing import Any

import pytest

from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube import DEPLOYMENTS, MACHINE_POOLS, MACHINES, NODECLAIMS, PODS
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.plugins import PluginEnvironment, Plugins
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.plugins.generic_capi.binding import ANNOTATION_NODECLAIM
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.azure import scenario_plugins
from karpenter_capi.sim.capi import add_capi_emulation
from karpenter_capi.sim.scenario.runner import deployment
from karpenter_capi.sim.scenario.schema import Scenario, load_scenario
from karpenter_capi.sim.scheduler import SimScheduler
from karpenter_capi.sim.workloads import add_workload_emulation

NAMESPACE = "default"
WRITES = ("create", "update", "patch", "delete", "evict")
# The writes of the native path: pools (KubeadmConfig, AzureMachinePool, MachinePool), their
# scale, and the pool Machines (binding, delete-machine, deletion).
CAPI_PATH = frozenset({"kubeadmconfigs", "azuremachinepools", "machinepools", "machines"})


class ProcessDied(BaseException):
    """The controller process was killed."""


class DyingClient:
    """The controller's view of the API server; once armed, its k-th write kills the process,
    before the write reaches the server or after (the answer lost)."""

    def __init__(self, inner: InMemoryAPIServer) -> None:
        self._inner = inner
        self._countdown: int | None = None
        self._after = False
        self._only: frozenset[str] | None = None

    def arm(self, writes: int, *, after: bool, only: frozenset[str] | None = None) -> None:
        """Die at write ``writes`` (0 = the next one), counting writes to ``only``'s resources
        alone when given."""
        self._countdown, self._after, self._only = writes, after, only

    def disarm(self) -> None:
        self._countdown = None

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if name not in WRITES:
            return target

        def write(*args: Any, **kwargs: Any) -> Any:
            resource = getattr(args[0], "plural", "pods") if args else "pods"
            counted = self._only is None or resource in self._only
            if self._countdown is not None and counted:
                if self._countdown == 0:
                    self._countdown = None
                    subresource = kwargs.get("subresource")
                    where = f"{name} {resource}" + (f"/{subresource}" if subresource else "")
                    if self._after:
                        target(*args, **kwargs)
                    raise ProcessDied(where)
                self._countdown -= 1
            return target(*args, **kwargs)

        return write


class World:
    def __init__(self, scenario: Scenario, seed: int) -> None:
        assert scenario.azure is not None
        self.scenario = scenario
        self.seed = seed
        self.clock = FakeClock()
        self.server = InMemoryAPIServer(clock=self.clock, random_seed=seed)
        self.server.apply_manifests(generate_crds())
        self.server.register_cluster_api()
        self.server.apply_manifests([dict(o) for o in scenario.infrastructure.manifests or []])
        self.server.apply_manifests([deployment(w) for w in scenario.workloads])
        self.unavailable = frozenset(scenario.azure.unavailable_sizes)
        self.deaths: list[str] = []
        self.client, self.driver = self._start()

    def _start(self) -> tuple[DyingClient, SteppedDriver]:
        """A new controller process (and the emulated cluster around it)."""
        client = DyingClient(self.server)
        environment = PluginEnvironment(
            workload=client,  # type: ignore[arg-type]
            management=client,  # type: ignore[arg-type]
            clock=self.clock,
            logger=logging.getLogger("karpenter_capi.plugins"),
        )
        plugins = Plugins.from_objects(scenario_plugins(["generic_capi"]), environment)
        operator = Operator(
            client,  # type: ignore[arg-type]
            client,  # type: ignore[arg-type]
            plugins,
            self.clock,
            OperatorOptions(leader_elect=False, metrics_port=None),
        )
        # As the runner does: what is added below is the cluster, which never dies.
        operator.manager.client = operator.manager.management = self.server
        add_capi_emulation(operator.manager, nodes=True, azure_unavailable_sizes=self.unavailable)
        add_workload_emulation(operator.manager)
        operator.manager.add(
            SimScheduler(self.server, operator.manager, self.clock, seed=self.seed)
        )
        return client, operator.stepped()

    def run(self, seconds: float) -> None:
        """Advance, restarting the controller (from the API alone) whenever it dies."""
        target = self.clock.monotonic() + seconds
        while True:
            try:
                self.driver.run_until_quiet()
                self.driver.advance(max(0.0, target - self.clock.monotonic()))
                return
            except ProcessDied as died:
                self.deaths.append(str(died))
                self.client, self.driver = self._start()

    def live(self, resource: Any, namespace: str | None = None) -> list[dict[str, Any]]:
        return [
            o
            for o in self.server.list(resource, namespace).items
            if not o["metadata"].get("deletionTimestamp")
        ]


@pytest.mark.parametrize("seed", range(8))
def test_killing_the_controller_at_any_write_never_launches_twice_or_leaks(seed: int) -> None:
    rng = random.Random(seed)
    world = World(load_scenario("azure-vmss"), seed)
    # 5 s ticks through launch (0-2 min), the batch scale-down at 5 m, and consolidation.
    for tick in range(120):
        if tick == 60:
            world.server.patch(DEPLOYMENTS, "batch", {"spec": {"replicas": 0}}, NAMESPACE)
        if rng.random() < 0.5:
            only = CAPI_PATH if rng.random() < 0.7 else None
            world.client.arm(rng.randrange(3), after=rng.random() < 0.5, only=only)
        world.run(5)
    world.client.disarm()
    world.run(600)
    # The run killed the controller on the native path, not only on its bookkeeping.
    assert any(death.split()[1].split("/")[0] in CAPI_PATH for death in world.deaths)

    pods = world.live(PODS, NAMESPACE)
    assert len(pods) == 2  # the web pods
    assert all(p["spec"].get("nodeName") for p in pods)
    claims = {c["metadata"]["name"]: c for c in world.live(NODECLAIMS)}
    assert claims
    assert all(c["status"].get("providerID") for c in claims.values())
    machines = world.live(MACHINES, NAMESPACE)
    owners = Counter(
        (m["metadata"].get("annotations") or {}).get(ANNOTATION_NODECLAIM) for m in machines
    )
    # One Machine per live NodeClaim, none bound to a NodeClaim that went, none unbound.
    assert owners == Counter(list(claims))
    by_provider = {m["spec"].get("providerID") for m in machines}
    assert by_provider == {c["status"]["providerID"] for c in claims.values()}
    # No pool asks for a VM nobody needs.
    assert sum(p["spec"]["replicas"] for p in world.live(MACHINE_POOLS, NAMESPACE)) == len(claims)
    # Never launched twice: across the run, each NodeClaim was bound to one Machine at most.
    history = world.server.watch(MACHINES, NAMESPACE, resource_version="1", timeout_seconds=0)
    bound: dict[str, set[str]] = {}
    for event in history:
        meta = event.object["metadata"]
        claim = (meta.get("annotations") or {}).get(ANNOTATION_NODECLAIM)
        if claim:
            bound.setdefault(claim, set()).add(meta["name"])
    assert bound
    assert all(len(names) == 1 for names in bound.values()), bound
