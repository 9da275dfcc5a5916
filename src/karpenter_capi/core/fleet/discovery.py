"""Which Cluster API Clusters the fleet is asked to serve, and their kubeconfig Secrets.

Two informers per namespace served (one across all namespaces by default) in the management
cluster: Clusters, narrowed by ``--fleet-cluster-selector``, and the Secrets Cluster API labels
with their Cluster (``cluster.x-k8s.io/cluster-name``), so the controller caches kubeconfigs and
not every Secret of the management cluster. The fleet reads the caches on every sync: a Cluster
that appears, disappears, pauses or has its Secret rotated is seen within one watch event.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.fleet.kubeconfigs import secret_name
from karpenter_capi.core.fleet.scoped import CLUSTER_NAME_LABEL
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.informer import Informer
from karpenter_capi.core.kube.resources import CLUSTERS, SECRETS


def cluster_key(namespace: str, name: str) -> str:
    """How the fleet names a Cluster everywhere (Leases, metrics, logs): ``namespace/name``."""
    return f"{namespace}/{name}"


@dataclass(frozen=True)
class ObservedCluster:
    """One selected Cluster as the caches hold it now."""

    namespace: str
    name: str
    obj: JsonObject = field(repr=False)
    secret: JsonObject | None = field(repr=False)

    @property
    def key(self) -> str:
        return cluster_key(self.namespace, self.name)

    @property
    def paused(self) -> bool:
        """``spec.paused`` (Cluster API's word for "controllers keep off this Cluster")."""
        return bool((self.obj.get("spec") or {}).get("paused"))


class Discovery:
    """The informers behind the fleet's view of the management cluster."""

    def __init__(
        self,
        management: KubeClient,
        clock: Clock,
        *,
        namespaces: Sequence[str] = (),
        cluster_selector: str | None = None,
    ) -> None:
        scopes: Sequence[str | None] = list(dict.fromkeys(namespaces)) or [None]
        self._clusters: list[Informer[JsonObject]] = []
        self._secrets: list[Informer[JsonObject]] = []
        for namespace in scopes:
            where = namespace or "all"
            self._clusters.append(
                Informer(
                    management,
                    CLUSTERS,
                    clock=clock,
                    namespace=namespace,
                    label_selector=cluster_selector or None,
                    name=f"fleet/{where}/clusters",
                )
            )
            self._secrets.append(
                Informer(
                    management,
                    SECRETS,
                    clock=clock,
                    namespace=namespace,
                    label_selector=CLUSTER_NAME_LABEL,
                    name=f"fleet/{where}/kubeconfig-secrets",
                )
            )

    @property
    def informers(self) -> list[Informer[JsonObject]]:
        return [*self._clusters, *self._secrets]

    def has_synced(self) -> bool:
        return all(informer.has_synced() for informer in self.informers)

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` on every event of either kind (the threaded fleet syncs early)."""
        for informer in self.informers:
            informer.add_handler(
                on_add=lambda _obj: callback(),
                on_update=lambda _old, _new: callback(),
                on_delete=lambda _obj: callback(),
            )

    def clusters(self) -> dict[str, ObservedCluster]:
        """Every selected Cluster, by ``namespace/name``, with its kubeconfig Secret if seen."""
        secrets: dict[str, JsonObject] = {}
        for informer in self._secrets:
            for stored in informer.store.list():
                meta = stored.get("metadata") or {}
                secrets[cluster_key(str(meta.get("namespace")), str(meta.get("name")))] = stored
        found: dict[str, ObservedCluster] = {}
        for informer in self._clusters:
            for obj in informer.store.list():
                meta = obj.get("metadata") or {}
                namespace, name = str(meta.get("namespace")), str(meta.get("name"))
                secret = secrets.get(cluster_key(namespace, secret_name(name)))
                found[cluster_key(namespace, name)] = ObservedCluster(namespace, name, obj, secret)
        return dict(sorted(found.items()))

    # Driving: stepped (virtual time) or threaded.

    def step(self) -> bool:
        progressed = False
        for informer in self.informers:
            while informer.step():
                progressed = True
        return progressed

    def next_wakeup_time(self) -> float | None:
        times = [informer.next_wakeup_time for informer in self.informers]
        known = [time for time in times if time is not None]
        return min(known) if known else None

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        threads = [
            threading.Thread(
                target=informer.run, args=(stop,), name=f"informer-{informer.name}", daemon=True
            )
            for informer in self.informers
        ]
        for thread in threads:
            thread.start()
        return threads


__all__ = ["Discovery", "ObservedCluster", "cluster_key"]
