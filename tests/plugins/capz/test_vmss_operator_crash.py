"""The whole controller killed at random writes of the shipped ``azure-vmss`` scenario, and
restarted from what the API holds (the ``sim.chaos`` harness): no NodeClaim launched twice, no
replica or pool Machine leaked, every pod bound once things settle.

The plugin-level crash test (``test_pools_crash``) calls the hooks by hand; this one runs
the real ``Operator`` (provisioning, lifecycle, consolidation, termination) on the stepped
runtime, with the CAPI emulation (stock CAPZ) and the simulator's Azure, as
``karpenter-capi simulate azure-vmss`` does. Every few ticks the kill switch is armed to kill
the controller at one of its next writes (mostly on the native path), before the write reaches
the API or after it (the answer lost); ``ChaosWorld`` then starts a new ``Operator`` (new
plugins, empty caches) over the same API server. The emulated cluster is rebuilt with it; it
keeps no state outside the API either.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from karpenter_capi.core.kube import DEPLOYMENTS, MACHINE_POOLS, MACHINES, NODECLAIMS, PODS
from karpenter_capi.plugins.generic_capi.binding import ANNOTATION_NODECLAIM
from karpenter_capi.sim.chaos import ChaosWorld, KillSwitch, When
from karpenter_capi.sim.scenario.schema import load_scenario

NAMESPACE = "default"
# The writes of the native path: pools (KubeadmConfig, AzureMachinePool, MachinePool), their
# scale, and the pool Machines (binding, delete-machine, deletion).
CAPI_PATH = frozenset({"kubeadmconfigs", "azuremachinepools", "machinepools", "machines"})


def _resource(write: str) -> str:
    """``machinepools`` of ``patch machinepools/scale``."""
    return write.split()[1].split("/", maxsplit=1)[0]


class ArmedKills(KillSwitch):
    """Once armed, the controller dies at its ``writes``-th write from now (0 = the next one),
    before the write reaches the server or after (the answer lost), counting writes to
    ``only``'s resources alone when given."""

    def __init__(self) -> None:
        super().__init__()
        self.counting = True
        self._countdown: int | None = None
        self._after = False
        self._only: frozenset[str] | None = None

    def arm(self, writes: int, *, after: bool, only: frozenset[str] | None = None) -> None:
        self._countdown, self._after, self._only = writes, after, only

    def disarm(self) -> None:
        self._countdown = None

    def choose(self, index: int, what: str) -> When | None:
        if self._countdown is None or (self._only and _resource(what) not in self._only):
            return None
        if self._countdown > 0:
            self._countdown -= 1
            return None
        self._countdown = None
        return "after" if self._after else "before"


@pytest.mark.parametrize("seed", range(8))
def test_killing_the_controller_at_any_write_never_launches_twice_or_leaks(seed: int) -> None:
    rng = random.Random(seed)
    kills = ArmedKills()
    world = ChaosWorld(load_scenario("azure-vmss"), seed=seed, switch=kills)
    # 5 s ticks through launch (0-2 min), the batch scale-down at 5 m, and consolidation.
    for tick in range(120):
        if tick == 60:
            world.server.patch(DEPLOYMENTS, "batch", {"spec": {"replicas": 0}}, NAMESPACE)
        if rng.random() < 0.5:
            only = CAPI_PATH if rng.random() < 0.7 else None
            kills.arm(rng.randrange(3), after=rng.random() < 0.5, only=only)
        world.advance(5)
    kills.disarm()
    world.advance(600)
    # The run killed the controller on the native path, not only on its bookkeeping.
    assert any(_resource(write) in CAPI_PATH for write in kills.killed)

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
