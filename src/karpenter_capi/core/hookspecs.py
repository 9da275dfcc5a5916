"""The plugin contract: every hook a provider plugin may implement (pluggy hook specifications).

A provider (the generic Cluster API plugin, AWS, Azure, or a third party's package) is a module
whose functions, or an object whose methods, are decorated with ``hookimpl`` and named like the
specifications below. An entry point naming a class or a factory gets one object per ``Plugins``,
made with the plugin's ``PluginContext``, so the object holds that context and its own state
(see ``core.plugin_host``). The docstrings here ARE the reference
documentation (``docs/plugins.md`` repeats the signatures, and a test keeps the two in step). A
plugin imports ``hookimpl`` and the types below from ``karpenter_capi.plugin_api`` (and its
``kube`` and ``model`` modules), its only import from this distribution.

Rules that hold for every hook:

* Hooks are **synchronous** and may block on network I/O: the runtime calls them from worker
  threads, never from an event loop, so a plugin uses blocking SDKs (boto3, the Azure SDK, the
  Kubernetes client in ``ctx``) directly. A plugin must be thread-safe: the same hook may run
  concurrently for different NodeClaims.
* Time comes from ``ctx.clock`` and Kubernetes from ``ctx.workload`` / ``ctx.management``; a
  plugin never sleeps to wait for an instance. Launch is asynchronous: ``create`` records intent
  and returns, and later rounds observe progress through ``get`` and ``list``.
* An implementation may accept any subset of a hook's arguments, by name (pluggy's rule).
* Arguments are the typed values ``plugin_api`` exports: ``nodeclaim`` a ``NodeClaim``,
  ``nodepool`` a ``NodePool``, ``nodeclass`` a ``NodeClass``; the models are frozen and shared
  with every other reader (``to_json()`` gives a plugin its own JSON copy). What must outlive
  a call and be shared by several hooks or plugins goes in ``ctx.state`` (one per cluster).
* Hooks are called one plugin at a time by ``core.plugin_host.Plugins`` in the **plugin order**:
  implementations marked ``hookimpl(tryfirst=True)`` first, then unmarked ones in the order
  the plugins are enabled (``--plugins a,b``: ``a`` before ``b``), then ``trylast=True`` ones.
* "firstresult" hooks stop at the first plugin that returns something other than ``None``;
  returning ``None`` means "not mine, ask the next plugin". Other hooks ask every plugin.
* Raise the errors of ``core.errors`` (``InsufficientCapacityError``, ``NodeClassNotReadyError``,
  ``InstanceNotFoundError``, ``RetryableCreateError``) to tell the core what happened. Any other
  exception, or a return value of the wrong type, is reported as a bug in the plugin, by name.

Wrappers (``hookwrapper=True`` / ``wrapper=True``) are not supported: the facade calls each
implementation itself so that it can give every plugin its own ``ctx`` and chain pricing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias, TypeVar

import pluggy

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.instancetype import InstanceType, InstanceTypeOverhead
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.core.values.resources import ResourceList

if TYPE_CHECKING:
    from karpenter_capi.core.api.nodeclaim import NodeClaim
    from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass
    from karpenter_capi.core.api.nodepool import NodePool
    from karpenter_capi.core.observability.metrics import Metrics

PROJECT_NAME: Final = "karpenter_capi"
"""The pluggy project name; also the prefix of every hook (``karpenter_capi_``)."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

NodeClass: TypeAlias = "ClusterAPINodeClass | Mapping[str, Any]"
"""What hooks receive as ``nodeclass``: the validated ``ClusterAPINodeClass`` model when the
NodePool references that kind, otherwise the raw object (a JSON dict) of a kind some plugin
declared with ``karpenter_capi_nodeclass_kinds``."""


def _frozen_empty() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True)
class MachineTemplateDescription:
    """What a native provider plugin knows about the nodes an infrastructure template makes.

    Returned by ``karpenter_capi_describe_machine_template`` for templates of the provider's
    kind (an ``AWSMachineTemplate``, an ``AzureMachineTemplate``). ``source`` names where the
    values come from (``"AWS"``, ``"Azure"``) and is shown by ``karpenter-capi instance-types``.
    ``instance_type`` is the provider's name for the shape (``m5.large``, ``Standard_D4s_v5``);
    ``capacity`` holds cpu, memory, pods and accelerators as extended resources; ``labels`` at
    least ``kubernetes.io/arch`` and ``kubernetes.io/os``. ``capacity_type`` is ``on-demand`` or
    ``spot`` as the template asks. ``zones`` maps every zone where the type can be bought in
    that capacity type to its hourly price there (``None`` while no price is known); a zone
    missing from it cannot be bought. ``unavailable_reason`` says why nothing can be bought at
    all (a restricted SKU), or is ``None``.

    ``overhead`` is what the platform's own node bootstrap reserves on such a node when that is
    not the kubeadm default (EKS's kube-reserved formula on an EKS cluster), with its
    ``source`` set (``EKS``); ``None`` lets the caller's own precedence decide (a kubeadm
    bootstrap config, else kubeadm's defaults).
    """

    source: str
    instance_type: str
    capacity: ResourceList
    capacity_type: str
    zones: Mapping[str, float | None]
    labels: Mapping[str, str] = field(default_factory=_frozen_empty)
    unavailable_reason: str | None = None
    overhead: InstanceTypeOverhead | None = None


class DescribeMachineTemplate(Protocol):
    """``PluginContext.describe_machine_template``: asks the enabled plugins about a template."""

    def __call__(
        self, template: Mapping[str, Any], owner: Mapping[str, Any]
    ) -> MachineTemplateDescription | None: ...


def _describes_nothing(
    template: Mapping[str, Any], owner: Mapping[str, Any]
) -> MachineTemplateDescription | None:
    return None


_T = TypeVar("_T")


class ClusterState:
    """State the plugins keep for one cluster, owned by the framework (one per ``Plugins``).

    A cache that the launch code and the inventory must share (which offerings recently failed,
    the templates read, the node overheads learned) belongs to the cluster the plugins serve,
    not to the process: a process serving two clusters keeps two ``Plugins`` and so two of
    these, which never see each other's entries, and an entry goes when its ``Plugins`` goes.
    Shared by every plugin of that ``Plugins``, so a key is a class the plugin owns. Thread-safe:
    ``factory`` runs at most once per key.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[type[Any], Any] = {}

    def get(self, key: type[_T], factory: Callable[[], _T]) -> _T:
        """The value kept under ``key``, made by ``factory`` on first use."""
        with self._lock:
            found = self._values.get(key)
            if found is None:
                found = factory()
                if not isinstance(found, key):
                    raise TypeError(
                        f"the factory for {key.__qualname__} made a {type(found).__qualname__}"
                    )
                self._values[key] = found
            result: _T = found
            return result


@dataclass(frozen=True)
class PluginContext:
    """What the core gives every hook call: clients, time, logging, and the plugin's options.

    Each plugin gets its own context: ``plugin_name`` is its enabled name, ``logger`` a child of
    the ``karpenter_capi.plugins`` logger named after it, and ``options`` only its own settings
    (``--plugin-option capa.region=eu-west-1`` arrives in the ``capa`` plugin as
    ``{"region": "eu-west-1"}``). ``workload`` serves Nodes and Pods; ``management`` serves the
    Cluster API objects and this project's CRDs (they are the same client in a single cluster).
    """

    plugin_name: str
    workload: KubeClient
    management: KubeClient
    clock: Clock
    logger: logging.Logger
    options: Mapping[str, str] = field(default_factory=_frozen_empty)
    dry_run: bool = False
    """True when the controller runs with ``--dry-run``: decide and log, write nothing."""
    describe_machine_template: DescribeMachineTemplate = _describes_nothing
    """Ask the enabled plugins (``karpenter_capi_describe_machine_template``, plugin order,
    first answer wins) what an infrastructure template makes: how ``generic_capi`` lets the
    native ``capa`` and ``capz`` plugins fill in shapes, zones and prices."""
    metrics: Metrics | None = None
    """The operator's metrics (``core.observability.metrics.Metrics``), for plugins that time
    their cloud API calls or add gauges to its registry; ``None`` when nothing exposes metrics
    (the CLI's one-shot commands, most tests)."""
    cluster_state: ClusterState = field(default_factory=ClusterState, repr=False, compare=False)
    """The state of the cluster this context serves, shared by every plugin of one ``Plugins``
    (read it through ``state``)."""

    def option(self, name: str, default: str | None = None) -> str | None:
        """One of this plugin's options, or ``default``."""
        return self.options.get(name, default)

    def state(self, key: type[_T], factory: Callable[[], _T]) -> _T:
        """The per-cluster ``key`` object, made by ``factory`` the first time it is asked for.

        ``ctx.state(OfferingCache, lambda: OfferingCache(ctx.clock))`` returns the same object
        to every hook call of every plugin serving this cluster, and another one for another
        cluster (see ``ClusterState``). Use it for what hooks of different objects (a module's
        functions, two plugins) must share; state of one plugin object can stay on ``self``.
        """
        return self.cluster_state.get(key, factory)


@dataclass(frozen=True)
class LaunchResult:
    """What ``karpenter_capi_create`` knows when it returns (launch is asynchronous).

    ``instance_type``, ``zone`` and ``capacity_type`` say which offering was chosen (they become
    the NodeClaim's ``node.kubernetes.io/instance-type``, ``topology.kubernetes.io/zone`` and
    ``karpenter.sh/capacity-type`` labels). ``provider_id`` is usually still ``None``: the
    Machine or VM exists only as intent, and the core learns the ID later through
    ``karpenter_capi_get``. ``labels`` and ``annotations`` are merged into the NodeClaim's
    metadata; a plugin records its intent there (which scalable resource, which request) so it
    can recognise the NodeClaim after a restart. ``capacity``/``allocatable`` override the
    instance type's when the plugin knows better.
    """

    instance_type: str
    capacity_type: str
    zone: str | None = None
    provider_id: str | None = None
    image_id: str | None = None
    capacity: ResourceList | None = None
    allocatable: ResourceList | None = None
    labels: Mapping[str, str] = field(default_factory=_frozen_empty)
    annotations: Mapping[str, str] = field(default_factory=_frozen_empty)


@dataclass(frozen=True)
class Instance:
    """A machine a plugin manages, as ``karpenter_capi_get`` and ``karpenter_capi_list`` see it.

    ``name`` identifies it within the plugin (a Machine name, an instance ID) even before it has
    a ``provider_id``. ``nodeclaim_name`` is the NodeClaim it is bound to, when the plugin knows;
    the garbage collector deletes instances that no NodeClaim claims. ``state`` is free text for
    humans (``pending``, ``running``, ``deleting``).
    """

    name: str
    provider_id: str | None = None
    instance_type: str | None = None
    zone: str | None = None
    capacity_type: str | None = None
    nodeclaim_name: str | None = None
    image_id: str | None = None
    created_at: datetime | None = None
    state: str | None = None
    labels: Mapping[str, str] = field(default_factory=_frozen_empty)


@dataclass(frozen=True)
class LaunchWatch:
    """A resource whose changes move launches forward, and which NodeClaims a change wakes.

    Returned by ``karpenter_capi_launch_watches``. The NodeClaim lifecycle controller keeps an
    informer on ``resource`` in ``cluster`` (``"management"``, where the Cluster API objects
    live, or ``"workload"``) and hands ``nodeclaims`` every object an event carries (added,
    updated: the old and the new one, deleted). It returns the names of the NodeClaims whose
    launch that object may have moved (their machine appeared or got its provider ID); the
    core calls ``karpenter_capi_create`` for each at once instead of at its next poll. It runs
    on the informer's thread for every event: keep it fast and thread-safe, do no I/O, and
    never raise (an exception is logged and the event wakes nobody).
    """

    resource: Resource
    nodeclaims: Callable[[Mapping[str, Any]], Iterable[str]]
    cluster: str = "management"


SPOT_INTERRUPTED: Final = "spot_interrupted"
REBALANCE_RECOMMENDATION: Final = "rebalance_recommendation"
SCHEDULED_CHANGE: Final = "scheduled_change"
INSTANCE_STOPPED: Final = "instance_stopped"
INSTANCE_TERMINATED: Final = "instance_terminated"
INTERRUPTION_KINDS: Final = frozenset(
    {
        SPOT_INTERRUPTED,
        REBALANCE_RECOMMENDATION,
        SCHEDULED_CHANGE,
        INSTANCE_STOPPED,
        INSTANCE_TERMINATED,
    }
)
"""The kinds of ``InterruptionNotice``, spelled as upstream Karpenter's AWS provider labels its
``karpenter_interruption_received_messages_total`` counter (``message_type``)."""


@dataclass(frozen=True)
class InterruptionNotice:
    """A machine is going away, or may: what ``karpenter_capi_interruptions`` returns.

    ``kind`` is one of ``INTERRUPTION_KINDS``: ``spot_interrupted`` (the two-minute spot warning),
    ``rebalance_recommendation`` (elevated risk, no action by default), ``scheduled_change``
    (maintenance), ``instance_stopped`` and ``instance_terminated`` (state changes).
    ``instance`` identifies the machine: its full provider ID (``aws:///us-east-1a/i-0abc``) or
    the provider ID's last path segment (``i-0abc``, what an EC2 event carries). ``deadline`` is
    when the machine goes, when the cloud says. ``receipt`` is the plugin's own handle for the
    notice (an SQS receipt handle); the core hands the notice back through
    ``karpenter_capi_interruptions_handled`` once it has acted. ``sent_at`` is when the cloud
    sent it; ``detail`` is text for people.
    """

    kind: str
    instance: str
    deadline: datetime | None = None
    receipt: str = ""
    sent_at: datetime | None = None
    detail: str = ""


@hookspec
def karpenter_capi_nodeclass_kinds() -> list[tuple[str, str]]:
    """The NodeClass kinds this plugin serves, as ``(API group, kind)`` pairs.

    Called once when the plugins are loaded, on every plugin. The core watches these kinds and
    accepts NodePools whose ``spec.template.spec.nodeClassRef`` points at one of them; several
    plugins may serve the same kind (``generic_capi`` and ``capa`` both serve
    ``("karpenter.cluster.x-k8s.io", "ClusterAPINodeClass")``).

    Returns a list (possibly empty) of ``(group, kind)`` tuples of strings.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def karpenter_capi_instance_types(
    nodeclass: NodeClass, nodepool: NodePool, ctx: PluginContext
) -> list[InstanceType] | None:
    """The instance types a NodePool can launch through ``nodeclass`` (the inventory).

    Called at every provisioning and consolidation round for each NodePool, so cache what is
    expensive (cloud API calls) and keep the call cheap; results feed the scheduling solver.
    firstresult: the first plugin (in plugin order) returning a list owns the inventory of that
    NodeClass; return ``None`` when this plugin does not serve it. An empty list means "served,
    but nothing can be launched now" (and the NodeClass should be marked not ready by raising
    ``NodeClassNotReadyError`` when there is a reason to tell the user).

    Returns ``list[InstanceType]`` with their offerings (zones, capacity types, prices,
    availability), or ``None``.
    """
    raise NotImplementedError


@hookspec
def karpenter_capi_price_offerings(
    instance_types: list[InstanceType],
    nodeclass: NodeClass,
    nodepool: NodePool,
    ctx: PluginContext,
) -> list[InstanceType] | None:
    """Enrich or override the offerings (prices, zones, availability) of an inventory.

    Called right after ``karpenter_capi_instance_types``, on every plugin, as a **chain** in
    plugin order: each plugin receives the list the previous one returned (the first receives
    the inventory), so the last plugin in the order has the last word on a price. Return the
    new list (``InstanceType.with_offerings`` helps), or ``None`` to pass it on unchanged.
    Never mutate the input (instance types are frozen). Removing an instance type from the list
    removes it from consideration.

    Returns ``list[InstanceType]`` or ``None``.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def karpenter_capi_create(
    nodeclaim: NodeClaim,
    instance_types: list[InstanceType],
    nodeclass: NodeClass,
    ctx: PluginContext,
) -> LaunchResult | None:
    """Start launching one node for ``nodeclaim``, choosing among ``instance_types``.

    Called by the NodeClaim lifecycle controller for a new NodeClaim, and again every few
    seconds until the returned ``LaunchResult`` carries a ``provider_id`` (and after a
    ``RetryableCreateError``): a repeat call is how the core learns that a pending launch got
    its machine, so it must answer from the work already done, never launch twice.
    ``instance_types`` are the types the solver found compatible,
    cheapest first, each restricted to the offerings compatible with the NodeClaim's
    requirements. **Asynchronous**: record the intent (raise a replica count, submit a fleet
    request) and return at once; never wait for the machine. Must be idempotent: after a crash
    the same NodeClaim may be created again, so recognise work already done (for example by an
    annotation written through ``LaunchResult.annotations``).

    firstresult: return ``None`` when this plugin does not serve ``nodeclass``. Raise
    ``InsufficientCapacityError`` when no offering can be launched, ``NodeClassNotReadyError``
    when the NodeClass is unusable, ``RetryableCreateError`` for transient failures.

    Returns a ``LaunchResult`` or ``None``.
    """
    raise NotImplementedError


@hookspec
def karpenter_capi_launch_watches(ctx: PluginContext) -> list[LaunchWatch] | None:
    """The resources whose events should wake a launch under way, instead of its next poll.

    Called once, when the NodeClaim lifecycle controller is built (the API is reachable then),
    on every plugin; the watches of all plugins are kept. A launch that ``karpenter_capi_create``
    answered without a provider ID is asked again every few seconds (the poll); a watch lets
    the plugin say which NodeClaims an event concerns, so that the next ``create`` for them
    comes as soon as their machine appears or gets its ID. The poll stays as the fallback, so
    waking too few NodeClaims only costs time, and waking one for nothing costs one call.
    If the hook raises, the controller logs why and polls.

    Returns a list (possibly empty) of ``LaunchWatch``, or ``None``.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def karpenter_capi_delete(nodeclaim: NodeClaim, ctx: PluginContext) -> bool | None:
    """Start removing the machine behind ``nodeclaim`` (asynchronous, like create).

    Called by the termination controller after the node is drained, and again on every
    reconcile until the plugin raises ``InstanceNotFoundError``, which tells the core the
    machine is gone and the NodeClaim's finalizer may be removed. Must be idempotent.

    firstresult: return ``True`` when this plugin owns the NodeClaim and deletion is under way,
    ``None`` when the NodeClaim is not this plugin's.

    Returns ``True`` or ``None``; raises ``InstanceNotFoundError`` once the machine is gone.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def karpenter_capi_get(provider_id: str, ctx: PluginContext) -> Instance | None:
    """Look up one machine by its ``providerID`` (``aws:///us-east-1a/i-0abc``...).

    Called by the lifecycle controllers while a NodeClaim launches and registers, and by
    liveness checks. firstresult: return ``None`` when the ID is not this plugin's (for example
    another provider's URI scheme); raise ``InstanceNotFoundError`` when it is this plugin's but
    the machine no longer exists.

    Returns an ``Instance`` or ``None``.
    """
    raise NotImplementedError


@hookspec
def karpenter_capi_list(ctx: PluginContext) -> list[Instance]:
    """Every machine this plugin manages, including ones still without a provider ID.

    Called periodically (minutes apart) by the garbage collector on every plugin; the results
    are concatenated. A machine that no NodeClaim claims for long enough is deleted, so list
    only machines this plugin launched (never foreign capacity).

    Returns a list (possibly empty) of ``Instance``.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def karpenter_capi_is_drifted(
    nodeclaim: NodeClaim, nodeclass: NodeClass, ctx: PluginContext
) -> str | None:
    """Why ``nodeclaim`` no longer matches ``nodeclass``, or ``None`` when it still does.

    Called by the disruption controller for each launched NodeClaim when its NodeClass changes
    and periodically. The core already detects NodePool template drift itself; a plugin reports
    provider-side drift (a new image, a changed machine template, a subnet removed).
    firstresult: the first non-``None`` reason wins.

    Returns a short reason (becomes the ``Drifted`` condition's reason, e.g. ``"ImageDrift"``)
    or ``None``.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def karpenter_capi_describe_machine_template(
    template: Mapping[str, Any], owner: Mapping[str, Any], ctx: PluginContext
) -> MachineTemplateDescription | None:
    """Describe the nodes an infrastructure machine template makes: shape, zones, prices.

    ``template`` is the infrastructure template as read from the management cluster (a JSON
    dict: an ``AWSMachineTemplate``, an ``AzureMachineTemplate``, ...); ``owner`` is the
    scalable resource (MachineDeployment, MachineSet or MachinePool) whose
    ``spec.template.spec.infrastructureRef`` points at it, from which a plugin finds the
    ``Cluster`` and its infrastructure cluster (region, location, subscription). Called by the
    plugin that owns the inventory (``generic_capi``) through ``ctx.describe_machine_template``
    at every inventory round, so answer from caches and refresh them in the background of the
    call's clock. Precedence is the caller's: explicit annotations on the scalable resource win
    over this description, which wins over the template's ``status.capacity``.

    firstresult: return ``None`` for templates of kinds this plugin does not know. Raise
    ``NodeClassNotReadyError`` when the template is this plugin's but cannot be described (no
    region, unknown instance type); the message reaches the NodeClass's Ready condition.

    Returns a ``MachineTemplateDescription`` or ``None``.
    """
    raise NotImplementedError


@hookspec
def karpenter_capi_disruption_blocked(
    nodeclaims: list[NodeClaim], ctx: PluginContext
) -> dict[str, str] | None:
    """Which of ``nodeclaims`` the provider cannot remove now, if all of them were removed.

    Called by the disruption controller before it disrupts nodes voluntarily (consolidation,
    emptiness, drift; never for expiration), once per pass with every candidate in the order
    it prefers them, and again with exactly the nodes of a command before acting; in both
    calls the NodeClaims a command already holds (tainted, not yet deleting) come first, so a
    plugin counts them as leaving. Answer for
    the NodeClaims this plugin launched: ``generic_capi`` keeps a MachineDeployment, MachineSet
    or MachinePool at its ``cluster-api-autoscaler-node-group-min-size``, keeping the first
    NodeClaims of the list removable and blocking the rest. Not firstresult: the answers of
    all plugins are merged.

    Returns ``{nodeclaim name: why}`` (empty or ``None`` when nothing is blocked).
    """
    raise NotImplementedError


@hookspec
def karpenter_capi_interruptions(ctx: PluginContext) -> list[InterruptionNotice] | None:
    """Interruption notices the cloud sent since the last call (spot warnings, maintenance).

    Called by the interruption controller on its own thread, one call after another, on every
    plugin: a call may block on a long poll (an SQS ``ReceiveMessage`` of up to 20 s), but must
    return what it has when it has something. Return each notice until it is handed back through
    ``karpenter_capi_interruptions_handled``: a notice the core could not act on (the API server
    was unreachable) is simply returned again later, as an SQS message becomes visible again.
    Parse what you can; drop (and acknowledge) what you cannot, logging it once.

    Returns a list (possibly empty) of ``InterruptionNotice``, or ``None`` (no queue).
    """
    raise NotImplementedError


@hookspec
def karpenter_capi_interruptions_handled(
    notices: list[InterruptionNotice], ctx: PluginContext
) -> None:
    """Forget ``notices``: the core acted on them (or found no NodeClaim they concern).

    Called with notices this plugin returned from ``karpenter_capi_interruptions``, and only
    on this plugin, once every NodeClaim they concern has the notice recorded on it (or is
    deleting, or got its rebalance Event), so a crash before that leaves them to be returned
    again.
    A plugin deletes the queue messages here. Errors are logged and the notices come back.

    Returns ``None``.
    """
    raise NotImplementedError


# Every hook, in the order this module declares them: what the loader validates plugins against
# and what the facade must cover (tests/core/plugin_host checks both), so a new hookspec is one
# edit here.
HOOK_NAMES: Final[tuple[str, ...]] = tuple(
    name
    for name, value in list(globals().items())
    if name.startswith(f"{PROJECT_NAME}_") and hasattr(value, f"{PROJECT_NAME}_spec")
)
