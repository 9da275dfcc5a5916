"""What a scheduling cycle's snapshot reads of each pod, kept from one cycle to the next.

A cycle's ``Snapshot`` places every bound pod on its node (its requests, its spreading owner,
its pod (anti-)affinity terms). A burst brings a cycle per few pods, so each bound pod was read
again at every cycle; kube-scheduler's cache keeps a ``PodInfo`` per pod instead, made when
the pod is added or updated (``pkg/scheduler/backend/cache/cache.go: AddPod``,
``framework.NewPodInfo``).
``PodFacts`` does the same per stored pod object: stored objects are never changed in place, so
one object has one set of facts, and a new version is read again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.sim.scheduler import rules

__all__ = ["Facts", "PodFacts", "facts_of", "metadata", "spread_owner"]

# Owners whose pods get PodTopologySpread's system default constraints. kube finds them by the
# ReplicaSets, StatefulSets, ReplicationControllers (and Services) selecting the pod; the
# emulated Deployments make their pods through a ReplicaSet as kube's do, and a Deployment
# owning pods itself (as a test may make them) stands in for its ReplicaSet.
_SPREAD_OWNERS: Final = frozenset(
    {"ReplicaSet", "StatefulSet", "ReplicationController", "Deployment"}
)


def metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def spread_owner(pod: Mapping[str, Any]) -> str | None:
    """The uid of the controller whose pods the system default spreading groups, if any."""
    for owner in metadata(pod).get("ownerReferences") or []:
        if owner.get("controller") and owner.get("kind") in _SPREAD_OWNERS:
            return str(owner.get("uid", ""))
    return None


@dataclass(frozen=True)
class Facts:
    """What ``Snapshot.place`` reads of a pod's own fields."""

    requests: dict[str, int]
    nonzero: tuple[int, int]
    terminating: bool
    owner: str | None
    scores_affinity: bool
    anti_terms: list[Mapping[str, Any]]
    namespace: str


def facts_of(pod: JsonObject) -> Facts:
    return Facts(
        requests=rules.pod_requests(pod),
        nonzero=rules.pod_nonzero_cpu_memory(pod),
        terminating=bool(metadata(pod).get("deletionTimestamp")),
        owner=spread_owner(pod),
        scores_affinity=bool(
            rules.pod_terms(pod, "podAffinity")
            or rules.preferred_pod_terms(pod, "podAffinity")
            or rules.preferred_pod_terms(pod, "podAntiAffinity")
        ),
        anti_terms=rules.pod_terms(pod, "podAntiAffinity"),
        namespace=metadata(pod).get("namespace", ""),
    )


class PodFacts:
    """What a snapshot reads of each pod, read once per stored pod object and kept from one
    cycle to the next (kube-scheduler's cache likewise keeps a ``PodInfo`` per pod, made when
    the pod is added or updated, not at each scheduling cycle). Stored objects are never
    changed in place, so the same object has the same facts; a new version is read again.
    Objects not placed in the last cycle are dropped at the next (``next_cycle``)."""

    def __init__(self) -> None:
        # id(pod) -> (pod, facts): the pod is held, so its id is not reused while kept.
        self._now: dict[int, tuple[JsonObject, Facts]] = {}
        self._before: dict[int, tuple[JsonObject, Facts]] = {}

    def next_cycle(self) -> None:
        self._before, self._now = self._now, {}

    def of(self, pod: JsonObject) -> Facts:
        known = self._now.get(id(pod))
        if known is not None and known[0] is pod:
            return known[1]
        known = self._before.get(id(pod))
        if known is None or known[0] is not pod:
            known = (pod, facts_of(pod))
        self._now[id(pod)] = known
        return known[1]
