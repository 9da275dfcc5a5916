"""Which Cluster API scalable resources a ClusterAPINodeClass selects, and why others are not.

The selection follows the Go provider (kubernetes-sigs/karpenter-provider-cluster-api): the
NodeClass's ``spec.scalableResourceSelector`` ANDed with the opt-in label
``node.cluster.x-k8s.io/karpenter-member``, matched against the labels of MachineDeployments,
MachineSets and MachinePools in every namespace of the management cluster. The opt-in label is
what keeps a broad selector (or an empty one, which matches everything) from handing a
hand-managed MachineDeployment to the autoscaler; the API server filters, so a large management
cluster is not listed in full.

Selected but left out, each with a ``ResourceProblem`` that the NodeClass status reports:

- a resource annotated ``cluster.x-k8s.io/paused`` (or a MachineDeployment with
  ``spec.paused``): CAPI does not reconcile it, so a replica change would produce no Machine;
- a resource being deleted;
- a resource whose ``spec.clusterName`` names a Cluster that does not exist (CAPI would make
  no Machine for it).

Left out silently: a MachineSet owned by a MachineDeployment, because the MachineDeployment
stands for it (scaling the MachineSet would be undone by the MachineDeployment). When only the
MachineSet carries the opt-in label (CAPI copies a MachineDeployment's template labels to its
MachineSets, so this happens), that is reported, since the user most likely meant the
MachineDeployment.

A kind the management cluster does not serve (MachinePools are optional in older CAPI releases)
selects nothing rather than failing the whole NodeClass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from karpenter_capi.plugin_api import KubeClient, Resource
from karpenter_capi.plugin_api.karpenter import (
    label_value_problems,
    qualified_name_problems,
    wellknown,
)
from karpenter_capi.plugin_api.kube import (
    EVERYTHING,
    ApiError,
    CapiResources,
    CompiledSelector,
    NotFound,
    SelectorError,
    compile_selector,
    selector_to_string,
)

log = logging.getLogger(__name__)

MACHINE_DEPLOYMENT: Final = "MachineDeployment"
MACHINE_SET: Final = "MachineSet"
MACHINE_POOL: Final = "MachinePool"

# Problem reasons (CamelCase: they become Event reasons and appear in the Ready condition).
REASON_PAUSED: Final = "Paused"
REASON_DELETING: Final = "Deleting"
REASON_OWNED_BY_MACHINE_DEPLOYMENT: Final = "OwnedByMachineDeployment"
REASON_CLUSTER_NOT_FOUND: Final = "ClusterNotFound"

# Reasons for which a resource is deliberately out of play: reported as Normal Events, not
# Warnings.
INFORMATIONAL_REASONS: Final = frozenset(
    {REASON_PAUSED, REASON_DELETING, REASON_OWNED_BY_MACHINE_DEPLOYMENT}
)


def resource_key(kind: str, namespace: str, name: str) -> str:
    """The identity of a scalable resource across the plugin: ``Kind/namespace/name``.

    The inventory, the availability cache and the launch code all key resources this way, so a
    launch failure recorded for ``MachineDeployment/default/md-a`` marks exactly that offering.
    """
    return f"{kind}/{namespace}/{name}"


@dataclass(frozen=True)
class ResourceProblem:
    """Why one scalable resource is not (or not fully) part of the inventory.

    ``reason`` is a CamelCase identifier (the Event reason), ``message`` says what to fix.
    """

    kind: str
    namespace: str
    name: str
    reason: str
    message: str
    uid: str = field(default="", compare=False)
    """The resource's uid and apiVersion when known: its own Events need them (``kubectl
    describe`` matches Events by uid)."""
    api_version: str = field(default="", compare=False)
    also: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)
    """Other objects the problem's Warning Event also goes on (``involvedObject`` shapes):
    where the setting to fix lives, such as a topology Cluster."""

    @property
    def key(self) -> str:
        return resource_key(self.kind, self.namespace, self.name)

    def involved(self) -> dict[str, Any] | None:
        """The resource as an Event's ``involvedObject``, or ``None`` without its uid."""
        if not self.uid:
            return None
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid},
        }

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}: {self.message}"


ClusterKey = tuple[str, str]
"""A Cluster's ``(namespace, name)``."""


@dataclass
class Selection:
    """The usable candidates a selector found, and the selected resources left out.

    ``clusters`` are the Cluster objects read to judge them (empty when none was needed or
    they could not be listed), for further checks without another list request."""

    selected: list[tuple[Resource, dict[str, Any]]] = field(default_factory=list)
    problems: list[ResourceProblem] = field(default_factory=list)
    clusters: dict[ClusterKey, dict[str, Any]] = field(default_factory=dict)


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _owner_machine_deployment(obj: Mapping[str, Any]) -> str | None:
    for ref in _metadata(obj).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") == MACHINE_DEPLOYMENT:
            return str(ref.get("name") or "")
    return None


def problem_of(kind: str, obj: Mapping[str, Any], reason: str, message: str) -> ResourceProblem:
    """A ``ResourceProblem`` of ``obj``, carrying what an Event on it needs."""
    meta = _metadata(obj)
    return ResourceProblem(
        kind,
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        reason,
        message,
        uid=str(meta.get("uid") or ""),
        api_version=str(obj.get("apiVersion") or ""),
    )


def why_out_of_play(kind: str, obj: Mapping[str, Any]) -> ResourceProblem | None:
    """Why a selected resource must not be scaled (paused, being deleted), or ``None``."""
    meta = _metadata(obj)
    annotations = meta.get("annotations") or {}
    if wellknown.ANNOTATION_CAPI_PAUSED in annotations:
        return problem_of(
            kind, obj, REASON_PAUSED, f"paused ({wellknown.ANNOTATION_CAPI_PAUSED}); not scaled"
        )
    if kind == MACHINE_DEPLOYMENT and (obj.get("spec") or {}).get("paused") is True:
        return problem_of(kind, obj, REASON_PAUSED, "paused (spec.paused); not scaled")
    if meta.get("deletionTimestamp"):
        return problem_of(kind, obj, REASON_DELETING, "being deleted; not scaled")
    return None


def _check_labels(selector: Mapping[str, Any]) -> None:
    """Refuse keys and values the API server would refuse, naming them: its answer (a
    BadRequest on every list) would otherwise fail the whole inventory as an API error."""
    pairs = [
        (f"matchLabels[{k}]", str(k), [str(v)])
        for k, v in (selector.get("matchLabels") or {}).items()
    ]
    for index, expression in enumerate(selector.get("matchExpressions") or []):
        values = [str(v) for v in (expression.get("values") or [])]
        pairs.append((f"matchExpressions[{index}]", str(expression.get("key") or ""), values))
    for where, key, values in pairs:
        problems = [f"key {key!r}: {p}" for p in qualified_name_problems(key)] if key else []
        for value in values:
            problems += [f"value {value!r}: {p}" for p in label_value_problems(value)]
        if problems:
            raise SelectorError(f"{where}: {problems[0]}")


def label_selector(selector: Mapping[str, Any] | None) -> str:
    """The server-side selector: the NodeClass's selector ANDed with the opt-in label.

    Raises ``SelectorError`` (a ``ValueError``) for a selector Kubernetes would reject.
    """
    if selector:
        _check_labels(selector)
    return ",".join(filter(None, (selector_to_string(selector), wellknown.LABEL_KARPENTER_MEMBER)))


def _compiled(selector: Mapping[str, Any] | None) -> CompiledSelector:
    """``label_selector``'s selector, compiled to match labels here as the API server would."""
    member = (wellknown.LABEL_KARPENTER_MEMBER, "Exists", frozenset[str]())
    return compile_selector(selector or {}, nil_matches=True, extra=(member,))


Lister = Callable[[Resource, CompiledSelector], list[dict[str, Any]]]
"""What a list of ``resource`` with a label selector returns now (``mirror.WatchedLists``)."""


def _list(
    client: KubeClient,
    resource: Resource,
    selector: str,
    lister: Lister | None = None,
    compiled: CompiledSelector | None = None,
) -> list[dict[str, Any]]:
    try:
        if lister is not None and compiled is not None:
            return lister(resource, compiled)
        return client.list(resource, label_selector=selector).items
    except NotFound:
        # The kind is not served (e.g. no MachinePool CRD): it contributes nothing.
        log.debug("%s is not served; selecting none", resource.group_resource)
        return []


def select(
    client: KubeClient,
    capi: CapiResources,
    selector: Mapping[str, Any] | None,
    *,
    lister: Lister | None = None,
) -> Selection:
    """Opted-in scalable resources matching a NodeClass selector, filtered by the server;
    ``lister`` (if given) answers the lists instead of ``client``.

    Raises ``SelectorError`` for an invalid selector; API errors other than an unserved kind
    propagate (a transient failure must not look like "nothing selected").
    """
    string = label_selector(selector)
    compiled = _compiled(selector) if lister is not None else None
    selection = Selection()
    deployments = _list(client, capi.machine_deployments, string, lister, compiled)
    deployment_keys = {
        (str(_metadata(md).get("namespace") or ""), str(_metadata(md).get("name") or ""))
        for md in deployments
    }
    sets = _list(client, capi.machine_sets, string, lister, compiled)
    pools = _list(client, capi.machine_pools, string, lister, compiled)
    for resource, objects in (
        (capi.machine_deployments, deployments),
        (capi.machine_sets, sets),
        (capi.machine_pools, pools),
    ):
        for obj in objects:
            kind = resource.kind
            owner = _owner_machine_deployment(obj) if kind == MACHINE_SET else None
            if owner is not None:
                namespace = str(_metadata(obj).get("namespace") or "")
                if (namespace, owner) not in deployment_keys:
                    selection.problems.append(
                        problem_of(
                            kind,
                            obj,
                            REASON_OWNED_BY_MACHINE_DEPLOYMENT,
                            f"owned by MachineDeployment {namespace}/{owner}, which is not "
                            f"selected; label and select the MachineDeployment instead",
                        )
                    )
                continue
            out = why_out_of_play(kind, obj)
            if out is not None:
                selection.problems.append(out)
                continue
            selection.selected.append((resource, obj))
    _leave_out_clusterless(client, capi, selection, lister)
    return selection


def _leave_out_clusterless(
    client: KubeClient, capi: CapiResources, selection: Selection, lister: Lister | None = None
) -> None:
    """Move resources whose ``spec.clusterName`` names no Cluster to the problems: Cluster API
    makes no Machine for them, so a replica given to one would wait forever (and leak).

    Only judged when the Clusters can be listed and some exist: a management cluster that
    shows none (a view without access to them) cannot tell a mistake from a blind spot.
    """
    if not selection.selected:
        return
    try:
        clusters = lister(capi.clusters, EVERYTHING) if lister else client.list(capi.clusters).items
    except ApiError:
        return
    if not clusters:
        return
    known = {
        (str(_metadata(c).get("namespace") or ""), str(_metadata(c).get("name") or "")): c
        for c in clusters
    }
    selection.clusters = known
    kept = []
    for resource, obj in selection.selected:
        namespace = str(_metadata(obj).get("namespace") or "")
        name = (obj.get("spec") or {}).get("clusterName")
        if name and (namespace, str(name)) not in known:
            selection.problems.append(
                problem_of(
                    resource.kind,
                    obj,
                    REASON_CLUSTER_NOT_FOUND,
                    f"spec.clusterName {name}: Cluster {namespace}/{name} does not exist, so "
                    "Cluster API would make no Machine for it; fix spec.clusterName or create "
                    "the Cluster",
                )
            )
        else:
            kept.append((resource, obj))
    selection.selected = kept


def select_resources(
    client: KubeClient, capi: CapiResources, selector: Mapping[str, Any] | None
) -> list[tuple[Resource, dict[str, Any]]]:
    """The usable selected resources only (``select`` also says why others are left out)."""
    return select(client, capi, selector).selected
