"""What must hold in a cluster the controller manages, checked from the API alone.

Chaos, fault, two-cluster and soak runs all end the same way: whatever happened on the way,
the cluster the controller leaves behind must be one a user can trust. Each of those suites
used to assert its own subset of that; this module is the one list, used by all of them and by
``karpenter-capi simulate --check``:

- ``leaked-machine``: a live Machine the controller is responsible for (one it bound to a
  NodeClaim, launched natively, or that belongs to an opted-in scalable resource) that no
  NodeClaim claims (a NodeClaim being deleted still does: termination removes its Machine),
  beyond its resource's min size (``cluster-api-autoscaler-node-group-min-size`` keeps that
  many Machines, claimed or not). That is a machine the user pays for and nothing removes on
  purpose (``generic_capi``'s safety net would, after its TTL: a settled run shows none).
- ``double-claim``: two NodeClaims with one provider ID, two live Machines with one provider ID,
  or one NodeClaim bound to two Machines (a launch done twice).
- ``stuck-nodeclaim``: a NodeClaim neither Ready nor being deleted for longer than the
  registration TTL (the lifecycle controller should have given up on it by then).
- ``replicas-mismatch``: a scalable resource the controller scales whose ``spec.replicas``
  differs from its live Machines once things settle (a replica asked for and never deleted, or
  a Machine deleted without its replica).
- ``unclaimed-node``: a Node of a managed resource (labelled with a NodePool, or on a managed
  Machine) without a NodeClaim holding its provider ID.
- ``schedulable-pending-pod``: a pending pod that a settled cluster could hold: it passes the
  simulated kube-scheduler's filters on an existing node, or (given the plugins) the
  controller's own dry-run provisioning round would launch a NodeClaim for it.
- ``stale-disrupted-taint``: a Node carrying ``karpenter.sh/disrupted:NoSchedule`` whose
  NodeClaim is not being deleted, once things settle: no disruption command holds it any more
  (commands live in the controller's memory and end within a settle), so nothing will ever lift
  the taint.

``settled=False`` keeps only the checks that hold at any instant (double claims, stuck
NodeClaims), for checks in the middle of a run.

The pending-pod check deliberately uses the simulator's kube-scheduler rules
(``sim.scheduler``), which share no code with the controller's scheduling, so a pod the
controller thinks cannot fit but kube-scheduler would place shows up here.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import Clock, parse_timestamp
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.discovery import CapiNotServedError, CapiResources, capi_resources
from karpenter_capi.core.kube.errors import ApiError
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES, PODS
from karpenter_capi.sim.scheduler.controller import missing_claim
from karpenter_capi.sim.scheduler.cycle import PodContext, Snapshot, finished

if TYPE_CHECKING:
    from karpenter_capi.core.plugin_host import Plugins

__all__ = [
    "INVARIANTS",
    "InvariantError",
    "Violation",
    "assert_invariants",
    "check_invariants",
]

JsonObject = dict[str, Any]

log = logging.getLogger(__name__)

LEAKED_MACHINE: Final = "leaked-machine"
DOUBLE_CLAIM: Final = "double-claim"
STUCK_NODECLAIM: Final = "stuck-nodeclaim"
REPLICAS_MISMATCH: Final = "replicas-mismatch"
UNCLAIMED_NODE: Final = "unclaimed-node"
SCHEDULABLE_PENDING_POD: Final = "schedulable-pending-pod"
STALE_DISRUPTED_TAINT: Final = "stale-disrupted-taint"
INVARIANTS: Final = (
    LEAKED_MACHINE,
    DOUBLE_CLAIM,
    STUCK_NODECLAIM,
    REPLICAS_MISMATCH,
    UNCLAIMED_NODE,
    SCHEDULABLE_PENDING_POD,
    STALE_DISRUPTED_TAINT,
)

DEFAULT_REGISTRATION_TTL: Final = 900.0  # upstream's registration timeout, 15 minutes

# Written by the plugins; read here by value so the checker does not trust their helpers.
ANNOTATION_NODECLAIM: Final = "karpenter.cluster.x-k8s.io/nodeclaim"
LABEL_NATIVE_LAUNCH: Final = "karpenter.cluster.x-k8s.io/launch"
LABEL_NATIVE_NODECLAIM: Final = "karpenter.sh/nodeclaim"


@dataclass(frozen=True)
class Violation:
    """One broken invariant: which, on what object, and what is wrong."""

    invariant: str
    subject: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.subject}: {self.detail}"


class InvariantError(AssertionError):
    """Raised by ``assert_invariants``; its message lists every violation."""

    def __init__(self, violations: Sequence[Violation]) -> None:
        self.violations = list(violations)
        lines = "\n".join(f"  - {v}" for v in self.violations)
        super().__init__(f"{len(self.violations)} invariant violation(s):\n{lines}")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta: Mapping[str, Any] = obj.get("metadata") or {}
    return meta


def _deleting(obj: Mapping[str, Any]) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def _ref(kind: str, obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    namespace = meta.get("namespace")
    return f"{kind} {namespace}/{meta.get('name')}" if namespace else f"{kind} {meta.get('name')}"


def _controller(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    for ref in _meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind")), str(ref.get("name"))
    return None


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            found: Mapping[str, Any] = condition
            return found
    return None


@dataclass
class _CapiState:
    """The management cluster's Cluster API objects, by namespace and name."""

    machines: list[JsonObject] = field(default_factory=list)
    sets: dict[tuple[str, str], JsonObject] = field(default_factory=dict)
    deployments: dict[tuple[str, str], JsonObject] = field(default_factory=dict)
    pools: dict[tuple[str, str], JsonObject] = field(default_factory=dict)

    @classmethod
    def read(cls, client: KubeClient) -> _CapiState:
        try:
            capi: CapiResources = capi_resources(client, {})
        except CapiNotServedError:
            return cls()

        def keyed(items: Iterable[JsonObject]) -> dict[tuple[str, str], JsonObject]:
            return {(_meta(o).get("namespace", ""), _meta(o)["name"]): o for o in items}

        def listed(resource: Any) -> list[JsonObject]:
            try:
                return list(client.list(resource).items)
            except ApiError as error:
                if error.code == 404:  # MachinePools are optional in older CAPI releases
                    return []
                raise

        return cls(
            machines=listed(capi.machines),
            sets=keyed(listed(capi.machine_sets)),
            deployments=keyed(listed(capi.machine_deployments)),
            pools=keyed(listed(capi.machine_pools)),
        )

    def owner(self, machine: Mapping[str, Any]) -> tuple[str, JsonObject] | None:
        """The scalable resource whose replicas the Machine counts in: a MachineDeployment (through
        its MachineSet), an independent MachineSet, or a MachinePool."""
        namespace = _meta(machine).get("namespace", "")
        controller = _controller(machine)
        if controller is None:
            return None
        kind, name = controller
        if kind == "MachinePool":
            pool = self.pools.get((namespace, name))
            return None if pool is None else ("MachinePool", pool)
        if kind != "MachineSet":
            return None
        machine_set = self.sets.get((namespace, name))
        if machine_set is None:
            return None
        parent = _controller(machine_set)
        if parent is not None and parent[0] == "MachineDeployment":
            deployment = self.deployments.get((namespace, parent[1]))
            if deployment is not None:
                return "MachineDeployment", deployment
        return "MachineSet", machine_set

    def scalable(self) -> Iterable[tuple[str, JsonObject]]:
        for deployment in self.deployments.values():
            yield "MachineDeployment", deployment
        for machine_set in self.sets.values():
            parent = _controller(machine_set)
            if parent is None or parent[0] != "MachineDeployment":
                yield "MachineSet", machine_set
        for pool in self.pools.values():
            yield "MachinePool", pool


def _managed_resource(resource: Mapping[str, Any]) -> bool:
    """Opted in to autoscaling (the member label) or created by a native launch path."""
    labels = _meta(resource).get("labels") or {}
    return wellknown.LABEL_KARPENTER_MEMBER in labels or LABEL_NATIVE_LAUNCH in labels


def _bound_claim(machine: Mapping[str, Any]) -> str:
    """The NodeClaim a Machine says it was launched for ("" when none)."""
    meta = _meta(machine)
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    return str(annotations.get(ANNOTATION_NODECLAIM) or labels.get(LABEL_NATIVE_NODECLAIM) or "")


def _provider_id(obj: Mapping[str, Any], where: str) -> str:
    return str((obj.get(where) or {}).get("providerID") or "")


class _Checker:
    def __init__(
        self,
        workload: KubeClient,
        management: KubeClient,
        now: datetime,
        registration_ttl: float,
    ) -> None:
        self.violations: list[Violation] = []
        self.now = now
        self.registration_ttl = registration_ttl
        self.claims = list(workload.list(NODECLAIMS).items)
        self.nodes = list(workload.list(NODES).items)
        self.pods = list(workload.list(PODS).items)
        self.capi = _CapiState.read(management)
        self.live_claims = {_meta(c)["name"]: c for c in self.claims if not _deleting(c)}
        self.claim_names = {_meta(c)["name"] for c in self.claims}
        self.claimed_ids = {
            _provider_id(c, "status"): c for c in self.claims if _provider_id(c, "status")
        }
        self.managed_machines = [m for m in self.capi.machines if self._managed_machine(m)]

    def add(self, invariant: str, subject: str, detail: str) -> None:
        self.violations.append(Violation(invariant, subject, detail))

    def _managed_machine(self, machine: Mapping[str, Any]) -> bool:
        if _bound_claim(machine) or LABEL_NATIVE_LAUNCH in (_meta(machine).get("labels") or {}):
            return True
        owner = self.capi.owner(machine)
        return owner is not None and _managed_resource(owner[1])

    # --- checks that hold at any instant ----------------------------------------------------

    def double_claims(self) -> None:
        self._double_claimed_provider_ids()
        self._double_launched_machines()

    def _double_claimed_provider_ids(self) -> None:
        """No two NodeClaims report the same instance."""
        by_id: dict[str, list[str]] = {}
        for claim in self.claims:
            provider_id = _provider_id(claim, "status")
            if provider_id:
                by_id.setdefault(provider_id, []).append(_meta(claim)["name"])
        for provider_id, names in sorted(by_id.items()):
            if len(names) > 1:
                self.add(
                    DOUBLE_CLAIM,
                    f"provider ID {provider_id}",
                    f"claimed by NodeClaims {', '.join(sorted(names))}",
                )

    def _double_launched_machines(self) -> None:
        """No two live Machines hold the same instance, or are bound to the same NodeClaim."""
        machines_by_id: dict[str, list[str]] = {}
        machines_by_claim: dict[str, list[str]] = {}
        for machine in self.capi.machines:
            if _deleting(machine):
                continue
            provider_id = _provider_id(machine, "spec")
            if provider_id:
                machines_by_id.setdefault(provider_id, []).append(_ref("Machine", machine))
            bound_to = _bound_claim(machine)
            if bound_to:
                machines_by_claim.setdefault(bound_to, []).append(_ref("Machine", machine))
        for provider_id, refs in sorted(machines_by_id.items()):
            if len(refs) > 1:
                self.add(
                    DOUBLE_CLAIM,
                    f"provider ID {provider_id}",
                    f"held by live {', '.join(sorted(refs))}",
                )
        for bound_to, refs in sorted(machines_by_claim.items()):
            if len(refs) > 1:
                self.add(
                    DOUBLE_CLAIM,
                    f"NodeClaim {bound_to}",
                    f"launched twice: bound to {', '.join(sorted(refs))}",
                )

    def stuck_nodeclaims(self) -> None:
        for claim in self.live_claims.values():
            ready = _condition(claim, "Ready")
            if ready is not None and ready.get("status") == "True":
                continue
            created = _meta(claim).get("creationTimestamp")
            if not created:
                continue
            age = (self.now - parse_timestamp(created)).total_seconds()
            if age > self.registration_ttl:
                why = (ready or {}).get("message") or (ready or {}).get("reason") or "no Ready"
                self.add(
                    STUCK_NODECLAIM,
                    _ref("NodeClaim", claim),
                    f"not Ready after {age:.0f}s (registration TTL {self.registration_ttl:.0f}s)"
                    f" and not being deleted: {why}",
                )

    # --- checks that hold once the cluster has settled --------------------------------------

    def _floor_kept(self) -> set[int]:
        """The free Machines a resource's min size keeps (``id`` of each): the oldest, as many
        as the min size leaves room for beside the Machines NodeClaims claim. Those are the
        resource's floor, CAPI capacity nobody removes on purpose."""
        by_owner: dict[int, tuple[Mapping[str, Any], list[JsonObject]]] = {}
        claimed: Counter[int] = Counter()
        for machine in self.managed_machines:
            owner = self.capi.owner(machine)
            if owner is None or _deleting(machine):
                continue
            entry = by_owner.setdefault(id(owner[1]), (owner[1], []))
            if self._claimed(machine):
                claimed[id(owner[1])] += 1
            elif not _bound_claim(machine):  # bound to a NodeClaim that is gone: a leak
                entry[1].append(machine)
        kept: set[int] = set()
        for key, (resource, unclaimed) in by_owner.items():
            annotations = _meta(resource).get("annotations") or {}
            try:
                minimum = int(str(annotations.get(wellknown.ANNOTATION_AUTOSCALER_MIN_SIZE, "0")))
            except ValueError:
                minimum = 0
            room = max(0, minimum - claimed[key])
            unclaimed.sort(key=lambda m: (str(_meta(m).get("creationTimestamp")), _meta(m)["name"]))
            kept.update(id(m) for m in unclaimed[:room])
        return kept

    def _claimed(self, machine: Mapping[str, Any]) -> bool:
        # A NodeClaim being deleted still holds its Machine: termination deletes it last,
        # and a drain a PodDisruptionBudget blocks may keep it for as long as it takes.
        provider_id = _provider_id(machine, "spec")
        return _bound_claim(machine) in self.claim_names or bool(
            provider_id and provider_id in self.claimed_ids
        )

    def leaked_machines(self) -> None:
        floor = self._floor_kept()
        for machine in self.managed_machines:
            if _deleting(machine) or self._claimed(machine) or id(machine) in floor:
                continue
            claim = _bound_claim(machine)
            if claim:
                said = f"bound to NodeClaim {claim}, which does not exist"
            else:
                said = "no NodeClaim: it is "
                owner = self.capi.owner(machine)
                said += (
                    f"a replica of {_ref(owner[0], owner[1])}"
                    if owner
                    else "launched natively and never adopted"
                )
            self.add(LEAKED_MACHINE, _ref("Machine", machine), f"{said}; nothing will remove it")

    def replicas(self) -> None:
        counts: Counter[tuple[str, str, str]] = Counter()
        for machine in self.capi.machines:
            if _deleting(machine):
                continue
            owner = self.capi.owner(machine)
            if owner is not None:
                kind, resource = owner
                counts[(kind, _meta(resource).get("namespace", ""), _meta(resource)["name"])] += 1
        for kind, resource in self.capi.scalable():
            if not _managed_resource(resource) or _deleting(resource):
                continue
            if kind == "MachinePool" and not self._pool_has_machines(resource):
                continue
            wanted = (resource.get("spec") or {}).get("replicas")
            if wanted is None:
                continue
            live = counts[(kind, _meta(resource).get("namespace", ""), _meta(resource)["name"])]
            if int(wanted) != live:
                self.add(
                    REPLICAS_MISMATCH,
                    _ref(kind, resource),
                    f"spec.replicas is {wanted} but {live} live Machine(s) belong to it",
                )

    def _pool_has_machines(self, pool: Mapping[str, Any]) -> bool:
        """Whether the pool's infrastructure reports per-instance Machines (CAPI creates them only
        for providers that support MachinePool Machines); otherwise replicas cannot be counted."""
        status = pool.get("status") or {}
        return bool(status.get("infrastructureMachineKind")) or any(
            _controller(m) == ("MachinePool", _meta(pool)["name"])
            and _meta(m).get("namespace") == _meta(pool).get("namespace")
            for m in self.capi.machines
        )

    def unclaimed_nodes(self) -> None:
        managed_ids = {
            _provider_id(m, "spec") for m in self.managed_machines if _provider_id(m, "spec")
        }
        for node in self.nodes:
            if _deleting(node):
                continue
            provider_id = _provider_id(node, "spec")
            labels = _meta(node).get("labels") or {}
            pool = labels.get(wellknown.LABEL_NODEPOOL)
            if not pool and provider_id not in managed_ids:
                continue
            if provider_id and provider_id in self.claimed_ids:
                continue
            why = f"labelled with NodePool {pool}" if pool else "on a managed Machine"
            self.add(
                UNCLAIMED_NODE,
                _ref("Node", node),
                f"{why}, but no NodeClaim holds provider ID {provider_id or '(none)'}",
            )

    def pending_pods(self, plugins: Plugins | None, clock: Clock, workload: KubeClient) -> None:
        pending = [p for p in self.pods if _pending(p)]
        if not pending:
            return
        bound = [
            (p, str(p["spec"]["nodeName"]))
            for p in self.pods
            if (p.get("spec") or {}).get("nodeName") and not finished(p)
        ]
        snapshot = Snapshot(self.nodes, bound)
        for pod in pending:
            if missing_claim(workload, pod) is not None:
                continue  # no node can take it until its claim exists
            try:
                context = PodContext(pod, snapshot)
                fits = [n.name for n in context.static.passing if not context.failures(n)]
            except (ValueError, TypeError, AttributeError, KeyError):
                continue  # a spec kube-scheduler would never see (the API refuses it)
            if fits:
                self.add(
                    SCHEDULABLE_PENDING_POD,
                    _ref("Pod", pod),
                    f"pending, but kube-scheduler's filters pass on node(s) {', '.join(fits[:3])}",
                )
        if plugins is None:
            return
        # The controller's own view: a settled controller has nothing left to launch.
        from karpenter_capi.core.provisioning.provisioner import Provisioner

        report = Provisioner(workload, plugins, clock, dry_run=True).reconcile()
        for decision in report.launched:
            for pod_key in decision.pods:
                self.add(
                    SCHEDULABLE_PENDING_POD,
                    f"Pod {pod_key}",
                    f"pending, and NodePool {decision.nodepool} could hold it on a new "
                    f"{decision.instance_type} ({decision.zone}, {decision.capacity_type}), "
                    "which the settled controller did not launch",
                )

    def stale_disrupted_taints(self) -> None:
        claims_by_id = {
            _provider_id(c, "status"): c for c in self.claims if _provider_id(c, "status")
        }
        for node in self.nodes:
            taints = (node.get("spec") or {}).get("taints") or []
            if not any(t.get("key") == wellknown.TAINT_DISRUPTED_KEY for t in taints):
                continue
            if _deleting(node):
                continue
            claim = claims_by_id.get(_provider_id(node, "spec"))
            if claim is not None and _deleting(claim):
                continue
            self.add(
                STALE_DISRUPTED_TAINT,
                _ref("Node", node),
                f"tainted {wellknown.TAINT_DISRUPTED_KEY}:{wellknown.TAINT_DISRUPTED_EFFECT} "
                "but neither it nor its NodeClaim is being deleted; no command holds it",
            )


def _pending(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    if spec.get("nodeName") or finished(pod) or _deleting(pod) or spec.get("schedulingGates"):
        return False
    # A DaemonSet pod targets one node; when that node goes, its controller deletes the pod.
    return not any(r.get("kind") == "DaemonSet" for r in _meta(pod).get("ownerReferences") or [])


def check_invariants(
    workload: KubeClient,
    management: KubeClient | None = None,
    *,
    clock: Clock,
    plugins: Plugins | None = None,
    registration_ttl: float = DEFAULT_REGISTRATION_TTL,
    settled: bool = True,
) -> list[Violation]:
    """Every invariant the cluster breaks now (see the module docstring); ``[]`` when sound.

    ``management`` is the cluster holding the Cluster API objects (the workload cluster when
    not given). ``plugins`` adds the controller's own dry-run provisioning round to the
    pending-pod check. ``settled=False`` checks only what holds at any instant.
    """
    checker = _Checker(workload, management or workload, clock.now(), registration_ttl)
    checker.double_claims()
    checker.stuck_nodeclaims()
    if settled:
        checker.leaked_machines()
        checker.replicas()
        checker.unclaimed_nodes()
        checker.stale_disrupted_taints()
        checker.pending_pods(plugins, clock, workload)
    for violation in checker.violations:
        log.warning("invariant violated: %s", violation)
    return checker.violations


def assert_invariants(
    workload: KubeClient,
    management: KubeClient | None = None,
    *,
    clock: Clock,
    plugins: Plugins | None = None,
    registration_ttl: float = DEFAULT_REGISTRATION_TTL,
    settled: bool = True,
) -> None:
    """``check_invariants``, raising ``InvariantError`` listing every violation."""
    violations = check_invariants(
        workload,
        management,
        clock=clock,
        plugins=plugins,
        registration_ttl=registration_ttl,
        settled=settled,
    )
    if violations:
        raise InvariantError(violations)
