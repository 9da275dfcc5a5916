"""One scalable resource as launch and delete see it: replicas, Machines, and how to change them.

Every decision to scale is taken from one fresh read of the resource and of its Machines (the ones
carrying its ``cluster.x-k8s.io/deployment-name``, ``set-name`` or ``pool-name`` label, listed with
that selector, never all Machines, or read through the plugin's ``mirror`` of that selection, which
is as fresh), and written through the ``scale`` subresource with the resourceVersion of that read as
precondition (design decision 4, "Deletes target one Machine": never a full update of a CAPI
object). A 409 means somebody changed the resource since; the caller reads again and decides again,
so no decision is ever applied to a state it was not made on. That is also what lets launch read
the resource itself from a watch-fed copy (``launch_reads``): a copy that lags another actor's
write costs a 409 and a ``GET``, never a decision made on a state that is gone.

The MachineDeployment rollout guard lives here too. Lowering a MachineDeployment's replicas only
removes the Machines marked ``cluster.x-k8s.io/delete-machine`` when exactly one MachineSet has
replicas: during a RollingUpdate the controller spreads a scale-down over the old and new
MachineSets, and a MachineSet without a marked Machine then removes one at random. With the
``OnDelete`` strategy CAPI scales the oldest old MachineSets down first, so a scale-down is
also safe when every marked Machine sits in the MachineSet that goes first; that is what lets
Karpenter replace drifted Machines of an ``OnDelete`` MachineDeployment one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from karpenter_capi.plugin_api import KubeClient, Resource
from karpenter_capi.plugin_api.karpenter import wellknown
from karpenter_capi.plugin_api.kube import (
    DEPLOYMENT_NAME_LABEL,
    POOL_NAME_LABEL,
    SET_NAME_LABEL,
    CapiResources,
    JsonObject,
    NotFound,
)
from karpenter_capi.plugins.generic_capi.binding import MachineFacts, machine_facts
from karpenter_capi.plugins.generic_capi.selection import (
    MACHINE_DEPLOYMENT,
    MACHINE_POOL,
    MACHINE_SET,
    resource_key,
)

ANNOTATION_REVISION: Final = "machinedeployment.clusters.x-k8s.io/revision"
STRATEGY_ON_DELETE: Final = "OnDelete"
STRATEGY_ROLLING_UPDATE: Final = "RollingUpdate"

_MACHINE_LABEL: Final = {
    MACHINE_DEPLOYMENT: DEPLOYMENT_NAME_LABEL,
    MACHINE_SET: SET_NAME_LABEL,
    MACHINE_POOL: POOL_NAME_LABEL,
}


@dataclass(frozen=True)
class ResourceRef:
    """A scalable resource by identity: ``Kind/namespace/name`` (``selection.resource_key``)."""

    kind: str
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return resource_key(self.kind, self.namespace, self.name)

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> ResourceRef | None:
        """``Kind/namespace/name`` back into a reference; ``None`` when malformed."""
        parts = text.split("/")
        if len(parts) != 3 or parts[0] not in _MACHINE_LABEL or not all(parts):
            return None
        return cls(parts[0], parts[1], parts[2])

    def resource(self, capi: CapiResources) -> Resource:
        return {
            MACHINE_DEPLOYMENT: capi.machine_deployments,
            MACHINE_SET: capi.machine_sets,
            MACHINE_POOL: capi.machine_pools,
        }[self.kind]

    @property
    def machine_selector(self) -> str:
        """The label selector of this resource's Machines."""
        return f"{_MACHINE_LABEL[self.kind]}={self.name}"


def owner_of(machine: MachineFacts) -> ResourceRef | None:
    """The scalable resource that scales this Machine: its MachineDeployment when it has one,
    else its MachineSet or MachinePool (from the labels CAPI puts on every Machine)."""
    for kind in (MACHINE_DEPLOYMENT, MACHINE_SET, MACHINE_POOL):
        name = machine.labels.get(_MACHINE_LABEL[kind])
        if name:
            return ResourceRef(kind, machine.namespace, name)
    return None


def _int_annotation(annotations: Mapping[str, Any], key: str) -> int | None:
    try:
        value = int(str(annotations.get(key, "")).strip())
    except ValueError:
        return None
    return value if value >= 0 else None


def _annotations_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


def replicas_of(obj: Mapping[str, Any]) -> int:
    """Desired replicas (CAPI defaults an unset count to 1, as ``capi_views`` does)."""
    spec = obj.get("spec")
    raw = spec.get("replicas") if isinstance(spec, Mapping) else None
    return 1 if raw is None else int(raw)


def min_size_of(obj: Mapping[str, Any]) -> int | None:
    """``cluster-api-autoscaler-node-group-min-size``; ``None`` when unset or malformed."""
    return _int_annotation(_annotations_of(obj), wellknown.ANNOTATION_AUTOSCALER_MIN_SIZE)


def max_size_of(obj: Mapping[str, Any]) -> int | None:
    """``cluster-api-autoscaler-node-group-max-size``; ``None`` when unset or malformed."""
    return _int_annotation(_annotations_of(obj), wellknown.ANNOTATION_AUTOSCALER_MAX_SIZE)


def scale_down_headroom(obj: Mapping[str, Any]) -> int | None:
    """Replicas the resource can still lose before its min size; ``None`` without one."""
    minimum = min_size_of(obj)
    return None if minimum is None else max(0, replicas_of(obj) - minimum)


@dataclass
class ResourceState:
    """One read of a scalable resource and of its Machines."""

    ref: ResourceRef
    obj: JsonObject
    machines: list[MachineFacts] = field(default_factory=list)

    @property
    def meta(self) -> Mapping[str, Any]:
        meta = self.obj.get("metadata")
        return meta if isinstance(meta, Mapping) else {}

    @property
    def spec(self) -> Mapping[str, Any]:
        spec = self.obj.get("spec")
        return spec if isinstance(spec, Mapping) else {}

    @property
    def resource_version(self) -> str:
        return str(self.meta.get("resourceVersion") or "")

    @property
    def replicas(self) -> int:
        return replicas_of(self.obj)

    @property
    def deleting(self) -> bool:
        return bool(self.meta.get("deletionTimestamp"))

    @property
    def min_size(self) -> int | None:
        return min_size_of(self.obj)

    @property
    def max_size(self) -> int | None:
        return max_size_of(self.obj)

    @property
    def present(self) -> list[MachineFacts]:
        """Machines not being deleted: what the MachineSet counts against its replicas."""
        return [m for m in self.machines if not m.deleting]

    @property
    def alive(self) -> list[MachineFacts]:
        """Machines that stay: neither deleting nor marked for deletion."""
        return [m for m in self.machines if m.alive]

    @property
    def marked(self) -> list[MachineFacts]:
        """Machines marked for deletion that CAPI has not started deleting."""
        return [m for m in self.machines if m.marked and not m.deleting]

    @property
    def in_flight(self) -> int:
        """Replicas asked for that have no Machine yet."""
        return max(0, self.replicas - len(self.present))

    def replace(self, machine: MachineFacts) -> None:
        """Record our own write of one of its Machines without reading again."""
        self.machines = [machine if m.key == machine.key else m for m in self.machines]


MachinesOf = Callable[[ResourceRef], list[MachineFacts]]
"""Reads the Machines of a resource as a list made now would show them (``mirror``)."""


def list_machines(client: KubeClient, capi: CapiResources, ref: ResourceRef) -> list[MachineFacts]:
    """The Machines of ``ref``, listed with its label selector."""
    listed = client.list(capi.machines, ref.namespace, label_selector=ref.machine_selector)
    return [machine_facts(m) for m in listed.items]


def read_state(
    client: KubeClient,
    capi: CapiResources,
    ref: ResourceRef,
    machines_of: MachinesOf | None = None,
) -> ResourceState | None:
    """The resource and its Machines, or ``None`` when the resource does not exist.

    The Machines come from ``machines_of`` when given (the plugin's mirrors, which cost only
    the changes since their last read), else from a list; either way they are read after the
    resource, as of now.
    """
    try:
        obj = client.get(ref.resource(capi), ref.name, ref.namespace)
    except NotFound:
        return None
    machines = list_machines(client, capi, ref) if machines_of is None else machines_of(ref)
    return ResourceState(ref, obj, machines)


def scale(client: KubeClient, capi: CapiResources, state: ResourceState, replicas: int) -> None:
    """Set the replicas through the scale subresource, if the resource is still as read.

    Raises ``Conflict`` when it changed since ``state`` was read.
    """
    patch = {
        "metadata": {"resourceVersion": state.resource_version},
        "spec": {"replicas": replicas},
    }
    client.patch(
        state.ref.resource(capi), state.ref.name, patch, state.ref.namespace, subresource="scale"
    )


# --- the MachineDeployment rollout guard --------------------------------------------------------


def _strategy(spec: Mapping[str, Any]) -> str:
    """The rollout strategy, in the v1beta1 (``spec.strategy``) or v1beta2 (``spec.rollout``)
    layout; RollingUpdate when unset."""
    for holder in (spec.get("strategy"), (spec.get("rollout") or {}).get("strategy")):
        if isinstance(holder, Mapping) and holder.get("type"):
            return str(holder["type"])
    return STRATEGY_ROLLING_UPDATE


def rollout_strategy(deployment: Mapping[str, Any]) -> str:
    spec = deployment.get("spec")
    return _strategy(spec if isinstance(spec, Mapping) else {})


def _ms_replicas(machine_set: Mapping[str, Any]) -> int:
    """The larger of desired and current replicas: a MachineSet still removing Machines is
    active too."""
    spec = machine_set.get("spec") or {}
    status = machine_set.get("status") or {}
    values = [v for v in (spec.get("replicas"), status.get("replicas")) if isinstance(v, int)]
    return max(values, default=0)


def _revision(obj: Mapping[str, Any]) -> int | None:
    return _int_annotation(_annotations_of(obj), ANNOTATION_REVISION)


def _names(machine_sets: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(sorted(str((ms.get("metadata") or {}).get("name")) for ms in machine_sets))


def rollout_in_progress(
    deployment: Mapping[str, Any],
    machine_sets: Sequence[Mapping[str, Any]],
    marked: Sequence[MachineFacts],
) -> str | None:
    """Why lowering this MachineDeployment's replicas could remove another Machine than the
    ``marked`` ones, or ``None`` when it is safe (see the module docstring)."""
    meta = deployment.get("metadata") or {}
    status = deployment.get("status") or {}
    observed = status.get("observedGeneration")
    generation = meta.get("generation")
    if isinstance(observed, int) and isinstance(generation, int) and observed < generation:
        return "its controller has not yet acted on its latest spec"
    active = [ms for ms in machine_sets if _ms_replicas(ms) > 0]
    wanted = _revision(deployment)
    revisions = {_revision(ms) for ms in machine_sets} - {None}
    if wanted is not None and revisions and wanted not in revisions:
        return f"its revision {wanted} has no MachineSet yet"
    if len(active) <= 1:
        return None
    names = _names(active)
    if rollout_strategy(deployment) != STRATEGY_ON_DELETE:
        return f"it is rolling out ({len(active)} MachineSets have replicas: {names})"

    # OnDelete: the controller scales the oldest old MachineSets down first.
    def created(ms: Mapping[str, Any]) -> tuple[str, str]:
        ms_meta = ms.get("metadata") or {}
        return (str(ms_meta.get("creationTimestamp") or ""), str(ms_meta.get("name") or ""))

    newest = max(active, key=created)
    old = sorted((ms for ms in active if ms is not newest), key=created)
    first = str((old[0].get("metadata") or {}).get("name"))
    outside = [m.name for m in marked if m.labels.get(SET_NAME_LABEL) != first]
    if outside or len(marked) > _ms_replicas(old[0]):
        return (
            f"it is rolling out with OnDelete ({names}) and CAPI would first remove Machines "
            f"of MachineSet {first}, not {', '.join(outside) or 'only the marked ones'}"
        )
    return None


def withdrawal_unsafe(
    deployment: Mapping[str, Any], machine_sets: Sequence[Mapping[str, Any]]
) -> str | None:
    """Why lowering this MachineDeployment's replicas to withdraw a replica that has no Machine
    yet could remove a running Machine instead, or ``None`` when it is safe.

    With one active MachineSet the lower count only stops the Machine not yet made, even if the
    controller has yet to see the raise (it then sees neither). While two or more have replicas,
    a roll-out is under way and CAPI takes the replica from the old MachineSets first (OnDelete
    and RollingUpdate alike): a running Machine would go, and the new set would still make the
    one nobody waits for. The withdrawal then waits until the roll-out is over or the Machine
    exists (and can be marked and removed itself, under ``rollout_in_progress``'s rule).
    """
    active = [ms for ms in machine_sets if _ms_replicas(ms) > 0]
    if len(active) <= 1:
        return None
    return (
        f"it is rolling out ({rollout_strategy(deployment)}: {_names(active)} have replicas) and "
        "CAPI would take the replica from an old MachineSet, removing a running Machine"
    )


def machine_sets_of(client: KubeClient, capi: CapiResources, ref: ResourceRef) -> list[JsonObject]:
    """The MachineSets of a MachineDeployment (by its deployment-name label)."""
    return client.list(
        capi.machine_sets, ref.namespace, label_selector=f"{DEPLOYMENT_NAME_LABEL}={ref.name}"
    ).items


def withdrawal_blocked(client: KubeClient, capi: CapiResources, state: ResourceState) -> str | None:
    """``withdrawal_unsafe`` for ``state``'s resource: only a MachineDeployment rolls out."""
    if state.ref.kind != MACHINE_DEPLOYMENT:
        return None
    return withdrawal_unsafe(state.obj, machine_sets_of(client, capi, state.ref))
