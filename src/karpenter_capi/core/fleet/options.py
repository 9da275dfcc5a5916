"""What ``karpenter-capi run --fleet`` is asked (``FleetOptions``) and who says which clusters
this replica serves (``Coordinator``; ``ServeEverything`` for a lone replica).

Why a module of its own: ``fleet.py`` runs the fleet; its options and the coordinator's
interface are what callers (``cli/run.py``, the simulator, the benchmarks) build it from, and
they import nothing of the fleet's machinery.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from karpenter_capi.core.runtime.gate import RunGate
from karpenter_capi.core.runtime.pool import DEFAULT_POOL_WORKERS, DEFAULT_URGENT_WORKERS


@dataclass(frozen=True)
class FleetOptions:
    """``karpenter-capi run --fleet``'s own flags."""

    cluster_selector: str | None = None
    namespaces: tuple[str, ...] = ()
    """Namespaces of the management cluster whose Clusters are served; empty: all."""
    shards: bool = True
    """Share the clusters among replicas through Leases; off: this replica serves them all."""
    identity: str | None = None
    lease_namespace: str = "kube-system"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    pool_workers: int = DEFAULT_POOL_WORKERS
    """Threads shared by every served cluster's controllers (``core.runtime.pool``), fair
    across clusters; 0: each cluster's drivers start their own (threaded only)."""
    decision_workers: int = DEFAULT_URGENT_WORKERS
    """More pool threads that run provisioning decisions alone (``WorkerPool``'s
    ``urgent_workers``), so a closed batch window never waits for a shared worker."""
    gate: RunGate | None = None
    """The pool's gate (``core.runtime.gate``): how many shared workers run Python at once;
    the clients handed to the fleet must enter it around their waits (``run --fleet`` does)."""
    plugins: tuple[str, ...] = ("generic_capi",)
    plugin_options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


class Coordinator(Protocol):
    """``core.fleet.sharding.ShardCoordinator``'s interface."""

    def step(self, clusters: Collection[str]) -> frozenset[str]: ...

    def holds(self, cluster: str) -> bool: ...

    def release_all(self) -> None: ...

    def next_expiry(self) -> float | None: ...


class ServeEverything:
    """The coordinator of a lone replica (``--no-fleet-shards``): every cluster, always held."""

    def step(self, clusters: Collection[str]) -> frozenset[str]:
        return frozenset(clusters)

    def holds(self, cluster: str) -> bool:
        return True

    def release_all(self) -> None:
        return None

    def next_expiry(self) -> float | None:
        return None


__all__ = ["Coordinator", "FleetOptions", "ServeEverything"]
