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

Besides ``podspec``, this is the one module of ``core.scheduling`` that reads JSON: each
DaemonSet's template, once per round, into the pod it would run (:func:`daemon_pod`), which
``podspec.parse_pod`` then reads like any pod.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from karpenter_capi.core.scheduling.hostports import HostPortUsage
from karpenter_capi.core.scheduling.podspec import PodSpec, node_alternatives, parse_pod
from karpenter_capi.core.values.requirements import Requirements
from karpenter_capi.core.values.resources import ResourceList, empty
from karpenter_capi.core.values.taints import Taint, Toleration, untolerated

DaemonSetObject = Mapping[str, Any]
"""A DaemonSet as the API server returns it (JSON): read here only, by :func:`parse_daemons`,
the way ``podspec`` reads pods."""

_NO_EXECUTE: Final = "NoExecute"
_NO_SCHEDULE: Final = "NoSchedule"

DAEMON_TOLERATIONS: Final[tuple[tuple[str, str], ...]] = (
    ("node.kubernetes.io/not-ready", _NO_EXECUTE),
    ("node.kubernetes.io/unreachable", _NO_EXECUTE),
    ("node.kubernetes.io/disk-pressure", _NO_SCHEDULE),
    ("node.kubernetes.io/memory-pressure", _NO_SCHEDULE),
    ("node.kubernetes.io/pid-pressure", _NO_SCHEDULE),
    ("node.kubernetes.io/unschedulable", _NO_SCHEDULE),
)
"""``(key, effect)`` of the tolerations the DaemonSet controller gives every daemon pod."""

HOST_NETWORK_DAEMON_TOLERATION: Final = ("node.kubernetes.io/network-unavailable", _NO_SCHEDULE)
"""The extra toleration a daemon pod on the host network gets (it needs no pod network)."""


def daemon_pod(daemonset: DaemonSetObject) -> dict[str, Any]:
    """The pod the DaemonSet controller would create from ``daemonset`` (no node name yet).

    A deep copy of ``spec.template`` in the DaemonSet's namespace, with the controller's
    default tolerations added (an existing identical toleration is not duplicated; one that
    differs only in ``tolerationSeconds`` is replaced, as ``AddOrUpdateTolerationInPodSpec``
    does).
    """
    meta = daemonset.get("metadata") or {}
    template = (daemonset.get("spec") or {}).get("template") or {}
    pod_meta = copy.deepcopy(dict(template.get("metadata") or {}))
    pod_meta.setdefault("namespace", meta.get("namespace") or "default")
    if "name" not in pod_meta and meta.get("name"):
        pod_meta["generateName"] = f"{meta['name']}-"
    spec = copy.deepcopy(dict(template.get("spec") or {}))

    defaults = list(DAEMON_TOLERATIONS)
    if spec.get("hostNetwork"):
        defaults.append(HOST_NETWORK_DAEMON_TOLERATION)
    tolerations: list[dict[str, Any]] = list(spec.get("tolerations") or [])
    for key, effect in defaults:
        wanted = Toleration(key, "Exists", "", effect)
        # v1.Toleration.MatchToleration: key, operator, value and effect all equal.
        tolerations = [t for t in tolerations if Toleration.from_dict(t) != wanted]
        tolerations.append(wanted.to_dict())
    spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


@dataclass(frozen=True, slots=True)
class DaemonSpec:
    """A DaemonSet's pod, parsed, with the node terms it accepts (``alternatives``: its
    ``nodeSelector`` AND each required node-affinity term that a new node can match)."""

    name: str
    pod: PodSpec
    alternatives: tuple[Requirements, ...]


@dataclass(frozen=True, slots=True)
class UnreadableDaemonSet:
    """A DaemonSet whose pod cannot be read, left out of the overhead: ``daemonset`` as read
    (to say so on it), ``name`` (``namespace/name``) and ``problem`` (the field and value)."""

    daemonset: DaemonSetObject
    name: str
    problem: str


def parse_daemons(
    daemonsets: Iterable[DaemonSetObject],
) -> tuple[tuple[DaemonSpec, ...], tuple[UnreadableDaemonSet, ...]]:
    """The daemon pods of ``daemonsets``, and those whose pod cannot be read.

    An unreadable one is skipped, as upstream skips a DaemonSet it cannot convert to a pod:
    one bad DaemonSet must not keep every pending pod from getting capacity.
    """
    daemons = []
    unreadable = []
    for daemonset in daemonsets:
        pod = daemon_pod(daemonset)
        spec = parse_pod(pod)
        meta = daemonset.get("metadata") or {}
        name = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        if spec.problem is not None:
            unreadable.append(UnreadableDaemonSet(daemonset, name, spec.problem))
            continue
        daemons.append(DaemonSpec(name, spec, node_alternatives(spec)))
    return tuple(daemons), tuple(unreadable)


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


_NO_DAEMONS: Final = _Verdict(pods=(), requests=empty())


class DaemonOverhead:
    """The DaemonSet pods, and their summed requests, that would run on a given node.

    Built once per provisioning round from the cluster's DaemonSets (:func:`parse_daemons`
    reads them; those it cannot read are left out and kept in ``unreadable``, for the
    provisioner to say so on them). The solver asks for every candidate NodeClaim, and many
    candidates share requirements and taints, so answers are cached by ``(requirements,
    taints)`` for the life of the object.
    """

    __slots__ = ("_cache", "_daemons", "unreadable")

    def __init__(self, daemonsets: Iterable[DaemonSetObject]) -> None:
        self._daemons, self.unreadable = parse_daemons(daemonsets)
        self._cache: dict[tuple[Requirements, frozenset[Taint]], _Verdict] = {}

    @classmethod
    def of(cls, daemonsets: Iterable[DaemonSetObject] | DaemonOverhead) -> DaemonOverhead:
        """``daemonsets`` if already parsed (one round's solvers share it), else parsed."""
        return daemonsets if isinstance(daemonsets, DaemonOverhead) else cls(daemonsets)

    def _verdict(self, requirements: Requirements, taints: Sequence[Taint]) -> _Verdict:
        if not self._daemons:
            return _NO_DAEMONS  # not one kept per claim: each claim has requirements of its own
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
