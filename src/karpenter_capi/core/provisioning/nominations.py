"""Planned pods told to kube-scheduler: ``status.nominatedNodeName`` on their NodeClaim's Node.

A plan only saves money if kube-scheduler realizes it. Its LeastAllocated scoring sends each
pod to the emptiest node, so two small pods queued before a big one land on two nodes and the
big one, planned beside them, fits nowhere. KEP-5278 (``NominatedNodeNameForExpectation``, beta
and on by default since Kubernetes 1.35) lets an autoscaler say where it expects a pod to go:
kube-scheduler tries a pod's nominated node first, and filters every node as if the pods
nominated to it (of equal or higher priority) were already there, so no other pod takes their
room (``docs/scheduler-stand-in.md`` cites the scheduler's code).

So each pending pod the last provisioning round placed on a NodeClaim gets that claim's Node
name as soon as the Node exists, before it is Ready, written through ``pods/status`` (a merge
patch of that one field). It is kept until the pod is bound (the API server then clears it), or
the plan changes: re-planned onto another node, the pod is nominated there; its NodeClaim gone
or the pod planned nowhere, a nomination this controller wrote is cleared. kube-scheduler clears
a nomination when an attempt fails (the Node not Ready yet, say); it is written again once the
Node has changed and can take the pod (Ready, not cordoned, its taints tolerated), not every
pass, so the two never trade writes while nothing happens. Until the Node can take the pod
every attempt there fails, and kube-scheduler attempts the pod again on every change to it or
to the Node (the kubelet's status, registration's labels and taints): a rewrite on each such
change would only be cleared again. Nor is a nomination written again while the pod cache has
not yet caught up with the write of it (the cached pod's resourceVersion is older than the one
the write answered with): the API holds it, and a second write would change nothing.

Before a restarted controller's first round, the plan is what the NodeClaims say they were
launched for (``karpenter.cluster.x-k8s.io/nominated-pods``). A nomination this controller did
not write (kube-scheduler's preemption, to a node that is not a NodeClaim's) is left alone. One
pod the API refuses (gone, conflict, invalid) stops only that pod; an API that is away fails the
pass, which the runtime retries. A dry run writes nothing and says what it would write.

Which mode is in force is decided once at start (:func:`nomination_mode`): from the workload
API server's release, unless ``--feature-gates NominatedNodeNameForExpectation=...`` says.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import ApiError, NotFound, refused_by_api
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES, PODS, Resource
from karpenter_capi.core.kube.version import server_version
from karpenter_capi.core.kube.writelog import resource_version_number
from karpenter_capi.core.lifecycle.nodes import node_is_ready
from karpenter_capi.core.observability.logs import first, ref
from karpenter_capi.core.provisioning.state import ClusterSnapshot, persisted_nominations
from karpenter_capi.core.provisioning.together import Writers, together
from karpenter_capi.core.runtime.controller import WORKLOAD, ControllerContext, Result
from karpenter_capi.core.values.taints import Taint, TaintError, parse_tolerations, untolerated

log = logging.getLogger(__name__)

GATE: Final = "NominatedNodeNameForExpectation"
FIRST_RELEASE: Final = (1, 35)
"""The Kubernetes release whose kube-scheduler has ``NominatedNodeNameForExpectation`` on by
default (beta)."""
DEFAULT_INTERVAL: Final = 0.5
"""Seconds between passes: as often as the provisioner looks for pending pods."""


@dataclass(frozen=True)
class NominationMode:
    """Whether planned pods are nominated, and why, as said once at start."""

    enabled: bool
    why: str
    unknown: bool = False
    """The server's release could not be read: said at WARNING, the gate decides alone."""


def nomination_mode(client: KubeClient, gate: bool | None = None) -> NominationMode:
    """Nominate on v1.35+ control planes, or as ``--feature-gates`` says (``gate``)."""
    if gate is False:
        return NominationMode(False, f"turned off by --feature-gates {GATE}=false")
    try:
        version, said = server_version(client)
    except ApiError as error:
        version, said = None, f"(not readable: {error.message})"
    if gate is True:
        return NominationMode(
            True, f"turned on by --feature-gates {GATE}=true (kube-apiserver {said})"
        )
    if version is None:
        return NominationMode(
            False,
            f"kube-apiserver version {said} unknown; set --feature-gates {GATE}=true to nominate",
            unknown=True,
        )
    if version >= FIRST_RELEASE:
        return NominationMode(
            True, f"kube-apiserver {said}: kube-scheduler has {GATE} on by default (v1.35+)"
        )
    return NominationMode(
        False,
        f"kube-apiserver {said} predates v1.35, where kube-scheduler turned {GATE} on by default",
    )


def log_mode(mode: NominationMode) -> None:
    """The one line that says how plans reach kube-scheduler."""
    if mode.enabled:
        log.info("nominating planned pods on their NodeClaims' nodes: %s", mode.why)
    else:
        log.log(
            logging.WARNING if mode.unknown else logging.INFO,
            "not nominating planned pods (plans assume kube-scheduler's own order): %s",
            mode.why,
        )


def _pending(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    return (
        not (pod.get("spec") or {}).get("nodeName")
        and not meta.get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    )


def _may_take(node: JsonObject, pod: JsonObject) -> bool:
    """Whether kube-scheduler's node-level filters could pass ``pod`` on ``node`` now: Ready,
    not cordoned, each ``NoSchedule`` and ``NoExecute`` taint tolerated (room aside). Until
    then an attempt there fails and clears the nomination (module docstring)."""
    spec = node.get("spec") or {}
    if not node_is_ready(node) or spec.get("unschedulable"):
        return False
    taints = []
    for raw in spec.get("taints") or ():
        with contextlib.suppress(TaintError, AttributeError):
            taints.append(Taint.from_dict(raw))
    tolerations = parse_tolerations((pod.get("spec") or {}).get("tolerations") or ())
    return untolerated(tolerations, taints) is None


WRITERS: Final = Writers()
"""The process's nomination writers, shared by every cluster's controller (``Writers``)."""


@dataclass(frozen=True)
class _Write:
    """One nomination to write (``node``) or clear (``None``), and the record it replaces."""

    pod: JsonObject
    key: str
    node: str | None
    previous: tuple[str, str, str] | None


class NominationController:
    """Writes each planned pod's ``status.nominatedNodeName`` (see the module docstring)."""

    name = "provisioner.nominations"

    def __init__(
        self,
        ctx: ControllerContext,
        plan: Callable[[], Mapping[str, str] | None],
        *,
        interval: float = DEFAULT_INTERVAL,
        write_concurrency: int = 1,
        writers: Writers = WRITERS,
    ) -> None:
        self._ctx = ctx
        self._write_concurrency = write_concurrency
        self._writers = writers
        self._plan = plan  # pod key -> NodeClaim or Node name; None before the first round
        self.interval = interval
        # Pod key -> (pod uid, node, the Node's resourceVersion) of the nomination last written.
        self._written: dict[str, tuple[str, str, str]] = {}
        self._said: dict[str, str] = {}  # pod key -> the refusal last said at WARNING
        # Pod key -> the pod's resourceVersion in the answer to the nomination last written.
        self._answered: dict[str, int] = {}
        self._ours: set[str] = set()  # the Nodes NodeClaims hold, as of the last pass
        # What the last pass read, when it wrote nothing: the same again would write nothing.
        self._quiet: tuple[object, ...] | None = None

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return [(PODS, WORKLOAD), (NODES, WORKLOAD), (NODECLAIMS, WORKLOAD)]

    def _stamp(self, planned: Mapping[str, str] | None) -> tuple[object, ...]:
        """What a pass reads: the plan and each store's change count. A pass depends on
        nothing else (not the time), so a pass over the same stamp as one that wrote nothing
        writes nothing and changes nothing either."""
        caches = self._ctx.caches
        return (
            None if planned is None else dict(planned),  # a copy: the caller's may change
            *(caches.store(resource, WORKLOAD).changes for resource in (PODS, NODES, NODECLAIMS)),
        )

    def _targets(self, planned: Mapping[str, str] | None) -> dict[str, tuple[str, str, JsonObject]]:
        """Pod key -> (node, its resourceVersion, the Node) for every planned pod whose Node
        exists."""
        caches = self._ctx.caches
        if planned is not None and not planned and not self._written:
            return {}  # nothing planned, nothing to clear: a pass costs nothing while idle
        claims = caches.store(NODECLAIMS, WORKLOAD).list()
        if planned is None:  # no round yet: what the NodeClaims were launched for
            launched = persisted_nominations(ClusterSnapshot([], [], list(claims), []))
            planned = {pod: claim for claim, pods in sorted(launched.items()) for pod in pods}
        node_of: dict[str, str] = {}
        for claim in claims:
            node_name = (claim.get("status") or {}).get("nodeName")
            if node_name and not (claim.get("metadata") or {}).get("deletionTimestamp"):
                node_of[str(claim["metadata"]["name"])] = str(node_name)
        ours = set(node_of.values())
        nodes = caches.store(NODES, WORKLOAD)
        targets: dict[str, tuple[str, str, JsonObject]] = {}
        for key, name in planned.items():
            node_name = node_of.get(name) or (name if name in ours else None)
            node = nodes.get(node_name) if node_name else None
            if node_name and node is not None and not node["metadata"].get("deletionTimestamp"):
                version = str(node["metadata"].get("resourceVersion", ""))
                targets[key] = (node_name, version, node)
        self._ours = ours
        return targets

    def run_once(self) -> Result:
        planned = self._plan()
        stamp = self._stamp(planned)
        if stamp == self._quiet:
            # Twice a second in every cluster of a fleet: re-reading every planned pod, Node
            # and NodeClaim to find nothing to write was most of an idle member's CPU.
            return Result(requeue_after=self.interval)
        self._quiet = None
        targets = self._targets(planned)
        pods = self._ctx.caches.store(PODS, WORKLOAD)
        writes: list[_Write] = []
        for key in sorted(set(targets) | set(self._written)):
            pod = pods.get(key)
            if pod is None or not _pending(pod):
                self._forget(key)
                continue
            uid = str(pod["metadata"].get("uid", ""))
            previous = self._written.get(key)
            if previous is not None and previous[0] != uid:
                previous = None  # a new pod under the same name
            current = (pod.get("status") or {}).get("nominatedNodeName") or None
            target = targets.get(key)
            if target is not None:
                node, version, node_object = target
                if current == node:
                    self._written[key] = (uid, node, previous[2] if previous else version)
                    continue
                if previous is not None and previous[:2] == (uid, node) and self._unseen(key, pod):
                    continue  # the cache has not caught up with our write: the API holds it
                if current is not None and current not in self._ours:
                    continue  # someone else's nomination, to a node no NodeClaim holds
                if (
                    current is None
                    and previous is not None
                    and previous[:2] == (uid, node)
                    and (previous[2] == version or not _may_take(node_object, pod))
                ):
                    # Cleared by kube-scheduler since: the Node has not changed, or cannot
                    # take the pod yet, where every attempt fails and clears it again.
                    continue
                # Recorded even when refused: tried again once the plan or the Node changes.
                self._written[key] = (uid, node, version)
                writes.append(_Write(pod, key, node, previous))
            elif previous is not None:
                if current == previous[1]:
                    writes.append(_Write(pod, key, None, previous))
                else:
                    self._forget(key)
        self._write_all(writes)  # raises when a write did not reach the API: no skip then
        if not writes:
            self._quiet = stamp
        return Result(requeue_after=self.interval)

    def _write_all(self, writes: Sequence[_Write]) -> None:
        """Write a pass's nominations, ``write_concurrency`` at a time (a 1,000-pod round has
        as many, and one by one they took seconds), each pod once: ``run_once`` visits each
        key once. A write the API did not take (away, busy) is not recorded, so the next pass
        tries it again; the first such error is raised for the runtime to retry and say."""

        def write(job: _Write) -> bool | ApiError:
            try:
                return self._write(job.pod, job.key, job.node)
            except ApiError as error:  # away or busy: not refused_by_api
                return error

        outcomes: list[bool | ApiError | None] = []
        if self._write_concurrency <= 1 or len(writes) <= 1:
            for job in writes:
                outcomes.append(write(job))
                if isinstance(outcomes[-1], ApiError):
                    break  # the API is away: the rest waits for the retry
        else:
            outcomes = self._write_together(writes, write)
        nominated: list[str] = []
        cleared: list[str] = []
        failed: ApiError | None = None
        for index, job in enumerate(writes):
            outcome = outcomes[index] if index < len(outcomes) else None
            if outcome is None or isinstance(outcome, ApiError):
                failed = failed or outcome
                if job.node is not None:  # not written: as it was before this pass
                    if job.previous is None:
                        self._written.pop(job.key, None)
                    else:
                        self._written[job.key] = job.previous
                continue
            if job.node is None:
                if outcome:
                    cleared.append(job.key)
                self._forget(job.key)
            elif outcome:
                nominated.append(job.node)
        self._report(nominated, cleared)
        if failed is not None:
            raise failed

    def _write_together(
        self, writes: Sequence[_Write], write: Callable[[_Write], bool | ApiError]
    ) -> list[bool | ApiError | None]:
        """Every write's outcome, ``write_concurrency`` lanes taking the next write as each
        finishes one: this thread is one lane, the shared ``Writers`` run the others (a bug
        one raises is raised in the pass, as before)."""
        outcomes: list[bool | ApiError | None] = list(
            together(self._writers, write, writes, self._write_concurrency)
        )
        return outcomes

    def _forget(self, key: str) -> None:
        self._written.pop(key, None)
        self._said.pop(key, None)
        self._answered.pop(key, None)

    def _unseen(self, key: str, pod: JsonObject) -> bool:
        """Whether the cached ``pod`` predates the answer to our last nomination of it: then
        the API holds that nomination (any later change would show a later resourceVersion),
        and writing it again would change nothing. ResourceVersions that are not integers
        (opaque by contract) tell nothing: the nomination is written as before."""
        answered = self._answered.get(key)
        cached = resource_version_number(pod["metadata"].get("resourceVersion"))
        return answered is not None and cached is not None and cached < answered

    def _write(self, pod: JsonObject, key: str, node: str | None) -> bool:
        """Patch the pod's nomination; False when the API refused it for this pod only."""
        if self._ctx.dry_run:
            return True
        meta = pod["metadata"]
        try:
            answer = self._ctx.client.patch(
                PODS,
                str(meta["name"]),
                {"status": {"nominatedNodeName": node}},
                meta.get("namespace"),
                subresource="status",
            )
        except ApiError as error:
            if not refused_by_api(error):
                raise  # away or busy: the runtime retries the pass and says so once
            if not isinstance(error, NotFound) and self._said.get(key) != error.message:
                log.warning(
                    "could not nominate pod",
                    extra={
                        "Pod": ref(str(meta["name"]), meta.get("namespace")),
                        "node": node,
                        "error": error.message,
                    },
                )
            self._said[key] = error.message
            return False
        answered = resource_version_number((answer.get("metadata") or {}).get("resourceVersion"))
        if node is not None and answered is not None:
            self._answered[key] = answered
        else:
            self._answered.pop(key, None)
        return True

    def _report(self, nominated: list[str], cleared: list[str]) -> None:
        dry = "would " if self._ctx.dry_run else ""
        if nominated:
            log.info(
                f"{dry}nominate pod(s) on their planned nodes",
                extra={"pod-count": len(nominated), "Nodes": first(sorted(set(nominated)))},
            )
        if cleared:
            log.info(
                f"{dry}clear nomination(s) the plan no longer holds",
                extra={"pod-count": len(cleared), "Pods": first(cleared)},
            )
