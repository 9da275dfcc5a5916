"""Which pods a node drain must remove, in which order, and by when.

Draining is mostly a matter of classifying pods, and the classification is where upstream
Karpenter's behaviour lives (``pkg/utils/pod/scheduling.go``, ``terminator.go``). It is kept apart
from the controller, as pure functions over ``PodView``, so that every rule can be read in one
place and tested without an API server:

* a pod **blocks** the drain (is *waiting*) unless it is terminal, a mirror/static pod, tolerates
  the ``karpenter.sh/disrupted:NoSchedule`` taint (it would come straight back), or has been
  terminating for a minute past its deletion time (its kubelet is not finishing it);
* a waiting pod is **evicted** unless it is already terminating or carries
  ``karpenter.sh/do-not-disrupt: "true"`` (it still blocks, until the deadline removes it);
* evictions go in four **tiers**, as graceful node shutdown orders them: non-critical pods, then
  non-critical DaemonSet pods, then critical pods, then critical DaemonSet pods, so the daemons
  that serve the others (logging, networking) and the cluster's critical add-ons go last;
* with a termination deadline, each waiting pod is **deleted** (bypassing PDBs and do-not-disrupt)
  at ``deadline - terminationGracePeriodSeconds``, so its own grace period ends by the deadline.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from enum import IntEnum
from typing import Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.views import PodView
from karpenter_capi.core.values.taints import Taint, parse_tolerations, tolerates

CRITICAL_PRIORITY_CLASSES: Final = frozenset({"system-cluster-critical", "system-node-critical"})
MIRROR_POD_ANNOTATION: Final = "kubernetes.io/config.mirror"
# Kubernetes' default for a pod that does not set terminationGracePeriodSeconds.
DEFAULT_POD_GRACE_SECONDS: Final = 30
# A pod terminating this long past its deletion time is left to its fate, as upstream does: its
# kubelet is gone or stuck, and waiting longer would only leak the node.
STUCK_TERMINATING_AFTER: Final = timedelta(minutes=1)

DISRUPTED_TAINT: Final = Taint(wellknown.TAINT_DISRUPTED_KEY, wellknown.TAINT_DISRUPTED_EFFECT)


class Tier(IntEnum):
    """Eviction order: a tier is evicted only once every earlier tier has left the node."""

    NON_CRITICAL = 0
    NON_CRITICAL_DAEMONSET = 1
    CRITICAL = 2
    CRITICAL_DAEMONSET = 3


def is_terminal(pod: PodView) -> bool:
    return pod.is_terminal


def is_terminating(pod: PodView) -> bool:
    return pod.metadata.deletion_timestamp is not None


def is_stuck_terminating(pod: PodView, now: datetime) -> bool:
    deleted = pod.metadata.deletion_timestamp
    return deleted is not None and now - deleted >= STUCK_TERMINATING_AFTER


def _owned_by(pod: PodView, kind: str, api_versions: Iterable[str]) -> bool:
    versions = set(api_versions)
    return any(
        ref.kind == kind and ref.api_version in versions for ref in pod.metadata.owner_references
    )


def is_daemonset_pod(pod: PodView) -> bool:
    return _owned_by(pod, "DaemonSet", ("apps/v1",))


def is_mirror_pod(pod: PodView) -> bool:
    """A static pod's mirror: the kubelet owns it and the API cannot remove it."""
    return MIRROR_POD_ANNOTATION in pod.metadata.annotations or _owned_by(pod, "Node", ("v1",))


def is_critical(pod: PodView) -> bool:
    return pod.spec.priority_class_name in CRITICAL_PRIORITY_CLASSES


def has_do_not_disrupt(pod: PodView) -> bool:
    return pod.metadata.annotations.get(wellknown.ANNOTATION_DO_NOT_DISRUPT) == "true"


def tolerates_disrupted_taint(pod: PodView) -> bool:
    tolerations = parse_tolerations(t.model_dump(by_alias=True) for t in pod.spec.tolerations)
    return tolerates(tolerations, DISRUPTED_TAINT)


def grace_seconds(pod: PodView) -> int:
    value = pod.spec.termination_grace_period_seconds
    return DEFAULT_POD_GRACE_SECONDS if value is None else max(0, value)


def is_waiting(pod: PodView, now: datetime) -> bool:
    """Whether the drain must wait for this pod to leave the node."""
    return not (
        is_terminal(pod)
        or is_mirror_pod(pod)
        or tolerates_disrupted_taint(pod)
        or is_stuck_terminating(pod, now)
    )


def is_evictable(pod: PodView, now: datetime) -> bool:
    """Whether the drain should call the Eviction API for this pod now."""
    return is_waiting(pod, now) and not is_terminating(pod) and not has_do_not_disrupt(pod)


def tier(pod: PodView) -> Tier:
    daemon = is_daemonset_pod(pod)
    if is_critical(pod):
        return Tier.CRITICAL_DAEMONSET if daemon else Tier.CRITICAL
    return Tier.NON_CRITICAL_DAEMONSET if daemon else Tier.NON_CRITICAL


def current_tier(waiting: Sequence[PodView]) -> Tier | None:
    """The tier being drained: the earliest one that still has a pod on the node."""
    return min((tier(pod) for pod in waiting), default=None)


def delete_time(pod: PodView, deadline: datetime) -> datetime:
    """When ``pod`` must be deleted for its own grace period to end by ``deadline``."""
    return deadline - timedelta(seconds=grace_seconds(pod))


def outlives(pod: PodView, deadline: datetime) -> bool:
    """A terminating pod whose grace period runs past the deadline (it was evicted with a
    longer grace period than the time left); deleting it again shortens it."""
    deleted = pod.metadata.deletion_timestamp
    return deleted is not None and deleted > deadline


def describe(pod: PodView) -> str:
    return f"{pod.metadata.namespace}/{pod.metadata.name}"
