"""What the DaemonSets take on a node before any pending pod gets there.

Every node runs one pod of each DaemonSet that targets it, so a NodeClaim sized only for the
pending pods would be too small the moment its daemons land. The solver therefore reserves, on
each candidate NodeClaim, the requests of exactly the DaemonSets whose pod would run there, and
their host ports. Counting a DaemonSet that would not run there makes nodes needlessly large;
missing one that would leaves pods pending on a full node.

Which DaemonSets run on a node follows Karpenter's ``isDaemonPodCompatible``
(``pkg/controllers/provisioning/scheduling/scheduler.go``):

* the daemon pod must tolerate the node's ``NoSchedule`` and ``NoExecute`` taints. It carries
  the tolerations the DaemonSet controller adds to every daemon pod
  (``AddOrUpdateDaemonPodTolerations`` in ``pkg/controller/daemon/util``): not-ready and
  unreachable for ``NoExecute``; disk-, memory- and pid-pressure and unschedulable for
  ``NoSchedule``; network-unavailable too when the pod uses the host network.
  ``PreferNoSchedule`` never keeps a daemon off a node (upstream tolerates it explicitly).
* its ``nodeSelector`` and one of its required node affinity terms must be compatible with the
  node's requirements (``Requirements.compatible``): a custom label the node does not define
  keeps it off, a well-known label the node leaves open does not. Preferences are ignored, as a
  DaemonSet pod is placed by its controller, not by preference.

Upstream reads a term's ``matchExpressions`` only; we drop a term that also pins ``matchFields``
(a node name), as we do for pending pods, since a node not yet launched cannot be named.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from karpenter_capi.core.scheduling.hostports import HostPortUsage
from karpenter_capi.core.scheduling.podspec import (
    DaemonSetObject,
    DaemonSpec,
    PodSpec,
    parse_daemons,
)
from karpenter_capi.core.values.requirements import Requirements
from karpenter_capi.core.values.resources import ResourceList, empty
from karpenter_capi.core.values.taints import Taint, untolerated


def _runs_on(daemon: DaemonSpec, requirements: Requirements, taints: Sequence[Taint]) -> bool:
    if untolerated(daemon.pod.tolerations, taints) is not None:
        return False
    # Upstream tries each required OR-term in turn (removeRequiredNodeAffinityTerm) until
    # one is compatible: the daemon runs if any alternative fits.
    return any(requirements.incompatibility(alt) is None for alt in daemon.alternatives)


@dataclass(frozen=True, slots=True)
class _Verdict:
    pods: tuple[PodSpec, ...]
    requests: ResourceList


class DaemonOverhead:
    """The DaemonSet pods, and their summed requests, that would run on a given node.

    Built once per provisioning round from the cluster's DaemonSets (``podspec.parse_daemons``
    reads them). The solver asks for every candidate NodeClaim, and many candidates share
    requirements and taints, so answers are cached by ``(requirements, taints)`` for the life
    of the object.
    """

    __slots__ = ("_cache", "_daemons")

    def __init__(self, daemonsets: Iterable[DaemonSetObject]) -> None:
        self._daemons: tuple[DaemonSpec, ...] = parse_daemons(daemonsets)
        self._cache: dict[tuple[Requirements, frozenset[Taint]], _Verdict] = {}

    def _verdict(self, requirements: Requirements, taints: Sequence[Taint]) -> _Verdict:
        key = (requirements, frozenset(taints))
        verdict = self._cache.get(key)
        if verdict is None:
            running = [d.pod for d in self._daemons if _runs_on(d, requirements, taints)]
            verdict = _Verdict(
                pods=tuple(running),
                # Each daemon pod's requests include the node's pod slot it takes.
                requests=ResourceList.sum(p.requests for p in running) if running else empty(),
            )
            self._cache[key] = verdict
        return verdict

    def for_node(self, requirements: Requirements, taints: Sequence[Taint]) -> ResourceList:
        """The summed requests (``pods`` included) of the daemons that would run on the node.

        ``requirements`` are what the node is known to satisfy (a NodeClaim's requirements,
        optionally narrowed by an instance type's); ``taints`` its taints (startup taints
        excluded: daemons are expected to wait those out).
        """
        return self._verdict(requirements, taints).requests

    def pods_for_node(
        self, requirements: Requirements, taints: Sequence[Taint]
    ) -> tuple[PodSpec, ...]:
        """The daemon pods that would run on the node."""
        return self._verdict(requirements, taints).pods

    def host_ports_for_node(
        self, requirements: Requirements, taints: Sequence[Taint]
    ) -> HostPortUsage:
        """A fresh usage holding the host ports of the daemons that would run on the node."""
        usage = HostPortUsage()
        for pod in self.pods_for_node(requirements, taints):
            usage.add(pod.host_ports)
        return usage

    def __len__(self) -> int:
        return len(self._daemons)
