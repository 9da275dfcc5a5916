"""What a cycle reads of every pod to sort the cluster's pods out, once per stored pod object.

Each cycle walks every pod of the cluster (``SimScheduler._bound_and_pending``): bound or
pending, finished, deleting, its scheduler, its queue order; and a burst runs a cycle per few
pods. Stored objects are never changed in place (a write stores a new one), so what was read of
an object holds for it; kube-scheduler likewise reads a pod when its informer delivers it
(``pkg/scheduler/eventhandlers.go``), not at every attempt. Each walk keeps only the objects it
met, so a pod's old versions are dropped at the next.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from karpenter_capi.core.kube.cache import object_key
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.sim.scheduler.facts import metadata

__all__ = ["SCHEDULER_NAME", "PodView", "PodViews", "queue_order"]

SCHEDULER_NAME: Final = "default-scheduler"


def queue_order(pod: Mapping[str, Any]) -> tuple[int, str, str, str]:
    """kube-scheduler's PrioritySort: higher ``spec.priority`` first, then the older pod.

    kube orders equal priorities by when each pod entered the queue; a pod enters it when it
    is created, so creation time (then namespace and name, for a total order) stands in.
    """
    meta = metadata(pod)
    return (
        -int((pod.get("spec") or {}).get("priority") or 0),
        meta.get("creationTimestamp") or "",
        meta.get("namespace", ""),
        meta["name"],
    )


@dataclass(frozen=True, slots=True)
class PodView:
    key: str
    uid: Any
    node_name: str | None
    finished: bool
    wanted: bool
    """Not being deleted, and this scheduler's (``spec.schedulerName``): placed if pending."""
    claims: bool
    """Names a ``persistentVolumeClaim`` (VolumeBinding's PreFilter must look it up)."""


def _view(pod: JsonObject) -> PodView:
    meta, spec = metadata(pod), pod.get("spec") or {}
    return PodView(
        key=object_key(pod),
        uid=meta.get("uid"),
        node_name=spec.get("nodeName") or None,
        finished=(pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
        wanted=not meta.get("deletionTimestamp")
        and spec.get("schedulerName", SCHEDULER_NAME) in (SCHEDULER_NAME, "", None),
        claims=any(
            ((volume or {}).get("persistentVolumeClaim") or {}).get("claimName")
            for volume in spec.get("volumes") or ()
        ),
    )


class PodViews:
    """``PodView`` of each stored pod object met by the last walk, and queue orders."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[JsonObject, PodView]] = {}
        self._orders: dict[int, tuple[JsonObject, tuple[int, str, str, str]]] = {}

    def walk(self, pods: Iterable[JsonObject]) -> list[tuple[JsonObject, PodView]]:
        """Each pod with its view; views of objects not in ``pods`` are dropped."""
        known, met = self._by_id, {}
        for pod in pods:
            entry = known.get(id(pod))
            if entry is None or entry[0] is not pod:
                entry = (pod, _view(pod))
            met[id(pod)] = entry
        self._by_id = met
        self._orders = {i: o for i, o in self._orders.items() if i in met and o[0] is met[i][0]}
        return list(met.values())

    def claims(self, pod: JsonObject) -> bool:
        entry = self._by_id.get(id(pod))
        return entry[1].claims if entry is not None and entry[0] is pod else True

    def order(self, pod: JsonObject) -> tuple[int, str, str, str]:
        """``queue_order(pod)``, once per stored object."""
        entry = self._orders.get(id(pod))
        if entry is None or entry[0] is not pod:
            entry = (pod, queue_order(pod))
            self._orders[id(pod)] = entry
        return entry[1]
