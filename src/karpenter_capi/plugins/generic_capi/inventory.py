"""Cluster API scalable resources as Karpenter instance types and offerings.

A ClusterAPINodeClass selects MachineDeployments, MachineSets and MachinePools (``selection``).
Resources that make the same node shape under the same instance-type name, differing only in
zone or capacity type, are one instance type with several offerings: that is how Karpenter
reasons about "the same machine in another zone", and it lets the solver pick the cheapest zone
instead of the first name in sort order. Each offering remembers which resources stand behind
it (``Inventory.resources_for``), so the launch code knows what to scale.

The shape of each resource comes from its annotations and its infrastructure machine template
(``shape``). Reading the template means resolving ``spec.template.spec.infrastructureRef`` to
a REST resource for a kind this project has never heard of; ``TemplateReader`` discovers the
served version, derives the plural as cluster-autoscaler does (lower-case kind + ``s``, the
kubebuilder convention every infrastructure provider follows) and caches what it read for a
minute, because the inventory is rebuilt at every provisioning round.

An offering is unavailable while its resource is at its
``cluster-api-autoscaler-node-group-max-size``, or for three minutes after the launch code
reported that the resource failed to produce a Machine (``UnavailableOfferings``), so the solver
moves on to the next zone or type instead of retrying the same one.

When a native plugin (``capa``, ``capz``) knows the template's kind, its description
(``ctx.describe_machine_template``) fills in what the annotations do not say: shape, zones where
the type is sold, capacity type and the price in the resource's zone (see ``shape`` for the
precedence). A resource whose failure domain is not among the description's zones is kept but
its offering is unavailable, with the reason; a description that fails is a notice (or, when
nothing else gives a shape, a problem), never an error of the whole inventory.

A resource that cannot be described (malformed annotation, no shape anywhere, paused) is left out
and reported as a ``ResourceProblem``; the others still make the inventory. What is usable but
worth knowing (an estimated price, a template that could not be read while the annotations
sufficed) is a notice. ``nodeclass_status`` turns both into the NodeClass's Ready condition. What
describing consults besides the resource itself (its template, recent launch failures) is read
through ``sources``. What each node keeps for itself is resolved per resource (``overhead``:
explicit settings, a real Node's ``learned``, the kubeadm bootstrap config's ``kubelet``
settings, a native plugin's formula, kubeadm's defaults); an instance type takes its strongest
member's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from karpenter_capi.plugin_api import (
    DescribeMachineTemplate,
    InstanceType,
    InstanceTypeOverhead,
    MachineTemplateDescription,
    NodeClassNotReadyError,
    Offering,
    PluginContext,
    Resource,
)
from karpenter_capi.plugin_api.karpenter import ClusterAPINodeClass, NodeClass
from karpenter_capi.plugin_api.kube import CapiResources, SelectorError
from karpenter_capi.plugins.generic_capi.inventory_memo import BuiltPart, InventoryMemo
from karpenter_capi.plugins.generic_capi.kubelet import KubeletSettings
from karpenter_capi.plugins.generic_capi.learned import NodeOverheads
from karpenter_capi.plugins.generic_capi.mirror import WatchedLists
from karpenter_capi.plugins.generic_capi.offering import (
    ScalableResource,
    describe_resource,
    template_spec,
)
from karpenter_capi.plugins.generic_capi.overhead import (
    LearnedOverhead,
    SettingsError,
    default_overhead,
    strongest,
)
from karpenter_capi.plugins.generic_capi.selection import (
    INFORMATIONAL_REASONS,
    ResourceProblem,
    Selection,
    problem_of,
    resource_key,
    select,
    select_resources,
    why_out_of_play,
)
from karpenter_capi.plugins.generic_capi.shape import (
    PRICE_ANNOTATION,
    MissingShapeError,
    ShapeError,
    TemplateStatus,
)
from karpenter_capi.plugins.generic_capi.shape_settings import ShapeSettings, settings_from
from karpenter_capi.plugins.generic_capi.sources import (
    TemplateError,
    TemplateReader,
    UnavailableOfferings,
    read_kubelet_settings,
)
from karpenter_capi.plugins.generic_capi.topology import leave_out_topology_managed

__all__ = [
    "INFORMATIONAL_REASONS",
    "Inventory",
    "ResourceProblem",
    "ScalableResource",
    "TemplateError",
    "TemplateReader",
    "UnavailableOfferings",
    "build_inventory",
    "collect_inventory",
    "default_overhead",
    "describe_resource",
    "resource_key",
    "select_resources",
]

# Problem and notice reasons (CamelCase: Event reasons).
REASON_INVALID_SHAPE: Final = "InvalidShape"
REASON_NO_SHAPE: Final = "NoShape"
REASON_SHAPE_MISMATCH: Final = "ShapeMismatch"
REASON_PRICE_ESTIMATED: Final = "PriceEstimated"
REASON_TEMPLATE_NOT_DESCRIBED: Final = "MachineTemplateNotDescribed"
REASON_OFFERING_NOT_AVAILABLE: Final = "OfferingNotAvailable"


# --- the inventory ------------------------------------------------------------------------------


@dataclass
class Inventory:
    """What one NodeClass can launch, and what got in the way.

    ``selected`` counts every resource the selector matched, including those left out.
    ``problems`` are resources left out; ``notices`` are usable resources with a caveat.
    ``error`` is a NodeClass-wide configuration error (invalid selector or overhead setting),
    in which case nothing was selected.
    """

    instance_types: list[InstanceType] = field(default_factory=list)
    resources: list[ScalableResource] = field(default_factory=list)
    problems: list[ResourceProblem] = field(default_factory=list)
    notices: list[ResourceProblem] = field(default_factory=list)
    selected: int = 0
    error: str | None = None
    management_error: tuple[str, str] | None = None
    """``(reason, message)`` when the management cluster could not be read at all (see
    ``nodeclass_status.management_cluster_error``): nothing is known, not "nothing selected"."""

    def resources_for(
        self, instance_type: str, zone: str | None = None, capacity_type: str | None = None
    ) -> list[ScalableResource]:
        """The resources behind an instance type's offering, best first.

        Best = available, then cheapest, then by key (deterministic). ``None`` matches any zone
        or capacity type.
        """
        found = [
            r
            for r in self.resources
            if r.instance_type == instance_type
            and (zone is None or r.zone == zone)
            and (capacity_type is None or r.capacity_type == capacity_type)
        ]
        return sorted(found, key=lambda r: (not r.available, r.price, r.key))


def _identity(kind: str, obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return kind, str(meta.get("namespace") or ""), str(meta.get("name") or "")


@dataclass(frozen=True)
class _Sources:
    """What describing a resource consults besides the resource itself."""

    templates: TemplateReader | None
    settings: ShapeSettings
    unavailable: UnavailableOfferings | None
    describe: DescribeMachineTemplate | None = None
    learned: NodeOverheads | None = None


def _described(
    sources: _Sources, template: TemplateStatus | None, obj: Mapping[str, Any]
) -> tuple[MachineTemplateDescription | None, str | None]:
    """The native description of ``template``, or why there is none (``None``: no plugin)."""
    if sources.describe is None or template is None:
        return None, None
    try:
        return sources.describe(template.raw, obj), None
    except NodeClassNotReadyError as exc:
        return None, f"{template.source}: {exc.reason}"
    except Exception as exc:  # a plugin's bug or a cloud error: one resource's notice, no crash
        return None, f"{template.source}: {exc}"


@dataclass(frozen=True)
class _ResourceInputs:
    """What describing one resource reads besides the resource itself, read on every call."""

    resource: Resource
    obj: Mapping[str, Any]
    out: ResourceProblem | None = None
    template: TemplateStatus | None = None
    template_error: TemplateError | None = None
    native: MachineTemplateDescription | None = None
    native_error: str | None = None
    kubelet: KubeletSettings | None = None
    kubelet_error: TemplateError | None = None
    learned: LearnedOverhead | None = None
    failed: str | None = None
    """Why the resource recently failed to produce a Machine (``UnavailableOfferings``)."""

    def key(self) -> tuple[Any, ...] | None:
        """What the description depends on, compared by value; ``None`` when the resource
        has no ``resourceVersion`` to tell its versions apart."""
        meta = self.obj.get("metadata") or {}
        version = str(meta.get("resourceVersion") or "")
        if not version:
            return None
        return (
            self.resource,
            str(meta.get("namespace") or ""),
            str(meta.get("name") or ""),
            str(meta.get("uid") or ""),
            version,
            self.template,
            _error_key(self.template_error),
            self.native,
            self.native_error,
            self.kubelet,
            _error_key(self.kubelet_error),
            self.learned,
            self.failed,
            self.out,
        )


def _error_key(error: TemplateError | None) -> tuple[str, str] | None:
    return None if error is None else (error.reason, error.message)


@dataclass(frozen=True)
class _Failed:
    """The launch failures as they were read (``UnavailableOfferings.reason``'s answer)."""

    reason_of: str | None

    def reason(self, key: str) -> str | None:
        return self.reason_of


def _read_inputs(resource: Resource, obj: Mapping[str, Any], sources: _Sources) -> _ResourceInputs:
    """Everything describing ``obj`` consults, read now (through the sources' caches)."""
    identity = _identity(resource.kind, obj)
    out = why_out_of_play(resource.kind, obj)
    if out is not None:
        return _ResourceInputs(resource, obj, out=out)
    try:
        template, template_error = _read_template(sources, identity[1], obj)
    except ShapeError as exc:  # a malformed template status: the resource is left out
        out = problem_of(resource.kind, obj, REASON_INVALID_SHAPE, str(exc))
        return _ResourceInputs(resource, obj, out=out)
    native, native_error = _described(sources, template, obj)
    kubelet, kubelet_error = (
        read_kubelet_settings(sources.templates, identity[1], obj)
        if sources.templates is not None
        else (None, None)
    )
    return _ResourceInputs(
        resource,
        obj,
        template=template,
        template_error=template_error,
        native=native,
        native_error=native_error,
        kubelet=kubelet,
        kubelet_error=kubelet_error,
        learned=sources.learned.learned(resource, obj) if sources.learned else None,
        failed=(
            sources.unavailable.reason(resource_key(*identity))
            if sources.unavailable is not None
            else None
        ),
    )


def _describe(inventory: Inventory, inputs: _ResourceInputs, settings: ShapeSettings) -> None:
    """Describe one resource into ``inventory``: a resource, or a problem, plus notices."""
    resource, obj = inputs.resource, inputs.obj
    identity = _identity(resource.kind, obj)
    if inputs.out is not None:
        inventory.problems.append(inputs.out)
        return
    native = inputs.native
    try:
        scalable = describe_resource(
            resource,
            obj,
            template=inputs.template,
            native=native,
            settings=settings,
            unavailable=_Failed(inputs.failed),
            kubelet=inputs.kubelet,
            learned=inputs.learned,
        )
    except MissingShapeError as exc:
        inventory.problems.append(
            _no_shape(resource, obj, exc, inputs.template_error, inputs.native_error)
        )
        return
    except ShapeError as exc:
        inventory.problems.append(problem_of(resource.kind, obj, REASON_INVALID_SHAPE, str(exc)))
        return
    inventory.resources.append(scalable)
    inventory.notices.extend(
        _fallback_notices(identity, inputs.template_error, inputs.native_error)
    )
    if inputs.kubelet_error is not None:
        inventory.notices.append(
            ResourceProblem(
                *identity,
                inputs.kubelet_error.reason,
                f"{inputs.kubelet_error.message}; its overhead and max pods come from the next "
                "source",
            )
        )
    inventory.notices.extend(_offering_notices(identity, scalable, native))


def _read_template(
    sources: _Sources, namespace: str, obj: Mapping[str, Any]
) -> tuple[TemplateStatus | None, TemplateError | None]:
    """The infrastructure template ``obj`` references, or why it could not be read (neither
    without a template reader or a reference)."""
    ref = template_spec(obj).get("infrastructureRef")
    if sources.templates is None or not isinstance(ref, Mapping):
        return None, None
    try:
        return sources.templates.read(namespace, ref), None
    except TemplateError as exc:
        # Without its traceback: its frames (this one's included) would hold it in a cycle
        # with the whole inventory, left for the cyclic collector.
        return None, exc.with_traceback(None)


def _no_shape(
    resource: Resource,
    obj: Mapping[str, Any],
    exc: MissingShapeError,
    template_error: TemplateError | None,
    native_error: str | None,
) -> ResourceProblem:
    """The problem of a resource with no node shape, with why the template gave none."""
    if template_error is not None:
        reason, message = template_error.reason, f"{exc}; and {template_error.message}"
    elif native_error is not None:
        reason, message = REASON_TEMPLATE_NOT_DESCRIBED, f"{exc}; and {native_error}"
    else:
        reason, message = REASON_NO_SHAPE, str(exc)
    return problem_of(resource.kind, obj, reason, message)


def _fallback_notices(
    identity: tuple[str, str, str], template_error: TemplateError | None, native_error: str | None
) -> list[ResourceProblem]:
    """Notices of a resource described without its template or its plugin's description:
    where its shape came from instead."""
    notices = []
    if template_error is not None:
        notices.append(
            ResourceProblem(
                *identity,
                template_error.reason,
                f"{template_error.message}; the node shape comes from the annotations only",
            )
        )
    if native_error is not None:
        notices.append(
            ResourceProblem(
                *identity,
                REASON_TEMPLATE_NOT_DESCRIBED,
                f"{native_error}; the node shape comes from the annotations and template status",
            )
        )
    return notices


def _offering_notices(
    identity: tuple[str, str, str],
    scalable: ScalableResource,
    native: MachineTemplateDescription | None,
) -> list[ResourceProblem]:
    """Notices of a described resource's offering: its plugin says it is unavailable, or its
    price is estimated from the shape."""
    notices = []
    why = scalable.unavailable_reason
    if native is not None and why and why.startswith(f"{native.source}: "):
        notices.append(ResourceProblem(*identity, REASON_OFFERING_NOT_AVAILABLE, why))
    if scalable.price_estimated:
        known = f"{native.source} has no price for it yet and no " if native else "no "
        notices.append(
            ResourceProblem(
                *identity,
                REASON_PRICE_ESTIMATED,
                f"{known}{PRICE_ANNOTATION} annotation; price estimated from the shape as "
                f"{scalable.price:g} per hour",
            )
        )
    return notices


def build_inventory(
    selected: Iterable[tuple[Resource, Mapping[str, Any]]],
    *,
    templates: TemplateReader | None = None,
    unavailable: UnavailableOfferings | None = None,
    settings: ShapeSettings | None = None,
    problems: Iterable[ResourceProblem] = (),
    describe: DescribeMachineTemplate | None = None,
    learned: NodeOverheads | None = None,
    memo: InventoryMemo | None = None,
    memo_slot: str = "",
) -> Inventory:
    """Group the selected resources into instance types with one offering per zone and
    capacity type.

    ``templates`` reads infrastructure templates (without it only annotations count);
    ``unavailable`` marks recently failed resources; ``problems`` are carried over from the
    selection (resources it left out), and count as selected. ``describe`` asks the native
    plugins about each template read (``PluginContext.describe_machine_template``);
    ``learned`` gives the overhead real Nodes show (without it, none is learned). With
    ``memo``, what was built for ``memo_slot`` (a NodeClass) from equal inputs is reused
    (``inventory_memo``); the reads run either way.
    """
    settings = settings or ShapeSettings()
    sources = _Sources(templates, settings, unavailable, describe, learned)
    inputs = [_read_inputs(resource, obj, sources) for resource, obj in selected]
    if memo is None:
        part = _build(inputs, settings)
    else:
        key = _memo_key(settings, inputs)
        part = memo.get_or_build(memo_slot, key, lambda: _build(inputs, settings))
    carried = list(problems)
    return Inventory(
        instance_types=list(part.instance_types),
        resources=list(part.resources),
        problems=[*carried, *part.problems],
        notices=list(part.notices),
        selected=len(carried) + part.described,
    )


def _memo_key(settings: ShapeSettings, inputs: Sequence[_ResourceInputs]) -> tuple[Any, ...] | None:
    """What ``_build`` depends on, or ``None`` when some resource cannot be keyed."""
    keys = [one.key() for one in inputs]
    return None if any(k is None for k in keys) else (settings, *keys)


def _build(inputs: Sequence[_ResourceInputs], settings: ShapeSettings) -> BuiltPart:
    """The pure part of ``build_inventory``: describe each resource and group them."""
    inventory = Inventory()
    for one in inputs:
        _describe(inventory, one, settings)
    described = len(inventory.problems) + len(inventory.resources)
    groups: dict[str, list[ScalableResource]] = {}
    for scalable in inventory.resources:
        groups.setdefault(scalable.instance_type, []).append(scalable)
    kept: list[ScalableResource] = []
    for name, members in sorted(groups.items()):
        members.sort(key=lambda r: r.key)
        first = members[0]
        consistent = [first]
        for other in members[1:]:
            if (other.shape.capacity, other.shape.taints, other.labels) != (
                first.shape.capacity,
                first.shape.taints,
                first.labels,
            ):
                inventory.problems.append(
                    ResourceProblem(
                        other.kind,
                        other.namespace,
                        other.name,
                        REASON_SHAPE_MISMATCH,
                        f"instance type {name} is described differently (capacity, labels or "
                        f"taints) by {first.kind} {first.namespace}/{first.name}; left out",
                    )
                )
                continue
            consistent.append(other)
        kept.extend(consistent)
        resolved = [m.overhead for m in consistent if m.overhead is not None]
        overhead = (
            strongest(resolved) if resolved else settings.overhead.overhead(first.shape.capacity)
        )
        inventory.instance_types.append(_instance_type(name, consistent, overhead))
    return BuiltPart(
        instance_types=tuple(inventory.instance_types),
        resources=tuple(kept),
        problems=tuple(inventory.problems),
        notices=tuple(inventory.notices),
        described=described,
    )


def _instance_type(
    name: str, members: Sequence[ScalableResource], overhead: InstanceTypeOverhead
) -> InstanceType:
    first = members[0]
    by_offering: dict[tuple[str, str], list[ScalableResource]] = {}
    for member in members:
        by_offering.setdefault((member.zone, member.capacity_type), []).append(member)
    offerings = []
    for (zone, capacity_type), behind in sorted(by_offering.items()):
        available = [m for m in behind if m.available]
        cheapest = min(available or behind, key=lambda m: (m.price, m.key))
        offerings.append(
            Offering(
                zone=zone,
                capacity_type=capacity_type,
                price=cheapest.price,
                available=bool(available),
                price_source=cheapest.price_source,
            )
        )
    return InstanceType(
        name=name,
        capacity=first.shape.capacity,
        offerings=tuple(offerings),
        requirements={key: frozenset((value,)) for key, value in first.labels.items()},
        overhead=overhead,
        taints=first.shape.taints,
        source=first.shape.source,
    )


def raw_nodeclass(nodeclass: NodeClass) -> Mapping[str, Any]:
    """The NodeClass as JSON, whether the hook received the model or a raw object."""
    if isinstance(nodeclass, ClusterAPINodeClass):
        return nodeclass.to_json()
    return nodeclass


def collect_inventory(
    ctx: PluginContext,
    nodeclass: NodeClass | Mapping[str, Any],
    capi: CapiResources,
    *,
    templates: TemplateReader | None = None,
    unavailable: UnavailableOfferings | None = None,
    learned: NodeOverheads | None = None,
) -> Inventory:
    """The inventory of one ClusterAPINodeClass: select, read templates, describe, group.

    Settings come from ``ctx.options`` and the NodeClass's annotations (see ``shape``). The
    template reader and the availability cache default to the ones kept for ``ctx``'s cluster
    (``PluginContext.state``), so the launch code's ``UnavailableOfferings.shared(ctx)``
    marks are seen here. An invalid selector or setting is ``Inventory.error``; API errors
    other than "kind not served" propagate.
    """
    raw = raw_nodeclass(nodeclass)
    meta = raw.get("metadata") or {}
    try:
        settings = settings_from(meta.get("annotations") or {}, ctx.options)
        selection: Selection = select(
            ctx.management,
            capi,
            (raw.get("spec") or {}).get("scalableResourceSelector"),
            lister=WatchedLists.shared(ctx),
        )
    except (SettingsError, SelectorError) as exc:
        where = "spec.scalableResourceSelector: " if isinstance(exc, SelectorError) else ""
        return Inventory(error=f"{where}{exc}")
    leave_out_topology_managed(selection)
    return build_inventory(
        selection.selected,
        memo=InventoryMemo.shared(ctx),
        memo_slot=str(meta.get("name") or ""),
        templates=templates or TemplateReader.shared(ctx),
        unavailable=unavailable or UnavailableOfferings.shared(ctx),
        settings=settings,
        problems=selection.problems,
        describe=ctx.describe_machine_template,
        learned=learned or NodeOverheads.shared(ctx, capi),
    )
