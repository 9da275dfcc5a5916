"""The ``scale`` and ``pods/binding`` subresources, and which subresources a request may name.

HorizontalPodAutoscalers, ``kubectl scale`` and CAPI's MachineDeployment scaling read and write
replicas through ``/scale`` as an ``autoscaling/v1`` Scale, whatever the kind stores them in
(``spec.replicas`` of a Deployment, a CRD's ``scale`` paths). The server verbs map between the
two here; the write itself is an ordinary update through the engine.

kube-scheduler binds a pod by creating a ``v1.Binding`` on ``pods/NAME/binding``, and the API
server's binding storage sets ``spec.nodeName`` and ``PodScheduled=True`` in one stored write
(``bind_pod``), where a pod update may not set ``spec.nodeName`` at all. The deprecated
``bindings`` collection (``BINDINGS``: ``POST /api/v1/namespaces/NS/bindings``, the official
client's ``create_namespaced_binding``) is the same bind, the pod named by the Binding alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from karpenter_capi.core.kube.errors import BadRequest, Conflict, InternalError, NotFound
from karpenter_capi.core.values.selectors import selector_to_string
from karpenter_capi.sim.apiserver import messages
from karpenter_capi.sim.apiserver.definitions import ResourceDefinition
from karpenter_capi.sim.apiserver.engine import Engine, precondition_of
from karpenter_capi.sim.apiserver.objects import copy_object, get_path, set_path
from karpenter_capi.sim.apiserver.store import Table

JsonObject = dict[str, Any]


BINDINGS = ResourceDefinition(
    group="",
    versions=("v1",),
    plural="bindings",
    singular="binding",
    kind="Binding",
    namespaced=True,
)
"""The deprecated ``bindings`` collection of core/v1: only created, nothing stored. kube
registers ``LegacyBindingREST`` as ``bindings`` (``pkg/registry/core/rest/storage_core.go``:
``NewRESTStorage``), whose ``Create`` (``pkg/registry/core/pod/storage/storage.go``) is
``BindingREST.Create`` with the Binding's own ``metadata.name`` as the pod's."""

_OWN_VERBS = frozenset({"eviction", "binding"})
"""Subresources that are only created, each through its own server method (``evict``,
``bind``): get, update and patch do not reach them."""


def check_subresource(definition: ResourceDefinition, subresource: str | None) -> None:
    """404 for a subresource the resource does not have (eviction and binding have their own
    verbs)."""
    if subresource is None:
        return
    if subresource not in definition.subresources or subresource in _OWN_VERBS:
        raise NotFound(
            f"the server could not find the requested resource ({definition.plural}/{subresource})"
        )


def scale_of(definition: ResourceDefinition, stored: JsonObject) -> JsonObject:
    """``stored`` seen through its scale subresource (an ``autoscaling/v1`` Scale)."""
    meta = stored["metadata"]
    scale_meta = {
        key: meta[key]
        for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
        if key in meta
    }
    status: JsonObject = {"replicas": int(get_path(stored, definition.scale_status_path) or 0)}
    if definition.scale_selector_path:
        selector = get_path(stored, definition.scale_selector_path)
        if isinstance(selector, dict):
            selector = selector_to_string(selector)
        if selector:
            status["selector"] = selector
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": scale_meta,
        "spec": {"replicas": int(get_path(stored, definition.scale_spec_path) or 0)},
        "status": status,
    }


def write_scale(
    engine: Engine,
    definition: ResourceDefinition,
    table: Table,
    stored: JsonObject,
    scale: JsonObject,
) -> JsonObject:
    """Set the replicas a Scale asks for on ``stored``; returns the Scale as written."""
    name = str(stored["metadata"]["name"])
    replicas = (scale.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise messages.invalid(
            definition,
            name,
            [
                messages.invalid_value(
                    "spec.replicas", replicas, "must be greater than or equal to 0"
                )
            ],
            kind="Scale.autoscaling",
        )
    meta = scale.get("metadata") or {}
    new = copy_object(stored)
    set_path(new, definition.scale_spec_path, replicas)
    written = engine.update_object(table, stored, new, precondition=precondition_of(meta))
    return scale_of(definition, written)


@runtime_checkable
class PodBinder(Protocol):
    """A client that can create ``pods/binding`` (the in-memory server, or a wrapper of one):
    what a scheduler needs beyond ``KubeClient``, which the controller's clients never have."""

    def bind(self, binding: JsonObject, namespace: str, name: str | None = None) -> None:
        """Bind the pod ``binding`` names to its target node; ``name``: the URL's, if any."""
        ...


def binding_name(binding: Any) -> str | None:
    """The pod a ``v1.Binding`` names (``metadata.name``), if it names one."""
    meta = binding.get("metadata") if isinstance(binding, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return str(name) if name else None


def _check_binding(binding: Any, namespace: str, name: str | None) -> tuple[str, str, JsonObject]:
    """(pod name, node name, annotations) of a well-formed Binding, or what kube answers.

    ``BindingREST.Create`` (``pkg/registry/core/pod/storage/storage.go``): 400 when the URL's
    name is not the Binding's; ``ValidatePodBinding`` (``pkg/apis/core/validation``) wants a
    ``target.name`` and a ``target.kind`` of ``Node`` or none, and its error list is no
    ``Status``, so kube-apiserver answers it as a 500. The request's namespace check
    (``rest.EnsureObjectNamespaceMatchesRequestNamespace``) comes first. A Binding without a
    name (possible only without a URL name: the ``bindings`` collection's, or in process) gets
    as far as the storage key, whose ``NamespaceKeyFunc`` (``k8s.io/apiserver``'s
    ``registry/generic/registry/store.go``) answers 400 ``Name parameter required.``
    """
    if not isinstance(binding, dict):
        raise BadRequest("the Binding must be a JSON object")
    meta = binding.get("metadata") or {}
    if meta.get("namespace", namespace) != namespace:
        raise BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    pod_name = binding_name(binding)
    if name is not None and name != pod_name:
        raise BadRequest("name in URL does not match name in Binding object")
    target = binding.get("target") or {}
    kind, node = target.get("kind") or "", target.get("name") or ""
    errors = []
    if kind and kind != "Node":
        errors.append(
            f'target.kind: Unsupported value: "{kind}": supported values: "Node", "<empty>"'
        )
    if not node:
        errors.append("target.name: Required value")
    if errors:
        raise InternalError(errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]", reason="")
    if pod_name is None:
        raise BadRequest("Name parameter required.")
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, Mapping) or not all(
        isinstance(v, str) for v in annotations.values()
    ):
        raise BadRequest("metadata.annotations of a Binding must map strings to strings")
    return pod_name, str(node), dict(annotations)


def _binding_refused(name: str, why: str) -> Conflict:
    """``assignPod``: a refusal of the update function is a 409 on ``pods/binding``."""
    return Conflict(
        f'Operation cannot be fulfilled on pods/binding "{name}": {why}',
        details={"name": name, "group": "", "kind": "pods/binding"},
    )


def _scheduled(conditions: list[JsonObject], now: str) -> list[JsonObject]:
    """``conditions`` with ``PodScheduled=True``, as ``podutil.UpdatePodCondition`` sets it:
    the condition replaced where it stands (reason and message gone), its transition time
    kept when its status was already True."""
    condition: JsonObject = {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}
    for index, current in enumerate(conditions):
        if isinstance(current, dict) and current.get("type") == "PodScheduled":
            if current.get("status") == "True" and current.get("lastTransitionTime"):
                condition["lastTransitionTime"] = current["lastTransitionTime"]
            return [*conditions[:index], condition, *conditions[index + 1 :]]
    return [*conditions, condition]


def bind_pod(
    engine: Engine,
    check_fault: Callable[[str, ResourceDefinition, str | None, str | None], None],
    binding: Any,
    namespace: str,
    name: str | None,
    *,
    collection: bool = False,
) -> None:
    """Bind the pod a ``v1.Binding`` names to its ``target`` node, in one stored write (one
    resourceVersion, one MODIFIED event). ``check_fault``: the server's request count and fault
    check, as a ``create`` on ``pods/binding``, or on ``bindings`` for the ``collection``;
    ``name``: the URL's, when the Binding came over HTTP to ``pods/NAME/binding``.

    kube's ``BindingREST`` (``pkg/registry/core/pod/storage/storage.go``: ``Create``,
    ``assignPod``, ``setPodNodeAndMetadata``) updates the stored pod directly, not through the
    pod's update strategy: the Binding's ``uid`` and ``resourceVersion``, when given, are
    preconditions (409 on the pod); a pod being deleted, already bound or still gated
    (``spec.schedulingGates``) is refused with 409 on ``pods/binding``; then ``spec.nodeName``
    is set, ``status.nominatedNodeName`` cleared (KEP-5278's
    ``ClearingNominatedNodeNameAfterBinding``), the Binding's annotations copied onto the pod
    and ``PodScheduled`` set True.
    """
    pods = engine.served[("", "pods")]
    if collection:
        check_fault("create", BINDINGS, binding_name(binding), None)
    else:
        check_fault("create", pods, name or binding_name(binding), "binding")
    with engine.lock:
        _bind(engine, pods, binding, namespace, name)


def _bind(
    engine: Engine, pods: ResourceDefinition, binding: Any, namespace: str, name: str | None
) -> None:
    """``setPodNodeAndMetadata`` on the stored pod (``bind_pod``). Lock must be held."""
    pod_name, node, annotations = _check_binding(binding, namespace, name)
    table = engine.store.tables["pods"]
    stored = engine.get_stored(pods, table, pod_name, namespace)
    meta = stored["metadata"]
    wanted = binding.get("metadata") or {}
    for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
        if wanted.get(field) and str(wanted[field]) != meta.get(field):
            raise messages.conflict(
                pods,
                pod_name,
                f"Precondition failed: {label} in precondition: {wanted[field]}, {label} in "
                f"object meta: {meta.get(field)}",
            )
    spec, status = stored.get("spec") or {}, stored.get("status") or {}
    if meta.get("deletionTimestamp"):
        raise _binding_refused(
            pod_name, f"pod {pod_name} is being deleted, cannot be assigned to a host"
        )
    if spec.get("nodeName"):
        raise _binding_refused(
            pod_name, f'pod {pod_name} is already assigned to node "{spec["nodeName"]}"'
        )
    if spec.get("schedulingGates"):
        raise _binding_refused(pod_name, f"pod {pod_name} has non-empty .spec.schedulingGates")
    new_meta = dict(meta)
    if annotations:
        new_meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    new_status = {k: v for k, v in status.items() if k != "nominatedNodeName"}
    new_status["conditions"] = _scheduled(list(status.get("conditions") or []), engine.now())
    new = {**stored, "metadata": new_meta, "spec": {**spec, "nodeName": node}, "status": new_status}
    engine.commit(table, "MODIFIED", new, stored)
