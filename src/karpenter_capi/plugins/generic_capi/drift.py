"""Drift: a bound Machine no longer matches what its scalable resource would make today.

Karpenter replaces a drifted node by launching a new one and deleting the old, so a Machine
is drifted when its resource's Machine template changed after the Machine was made. What is
compared, first difference wins (the reason becomes the NodeClaim's ``Drifted`` reason):

- ``VersionDrift``: the Machine's ``spec.version`` differs from the template's;
- ``InfrastructureTemplateDrift``: the infrastructure template the Machine was made from is
  not the template's ``infrastructureRef`` any more;
- ``BootstrapConfigDrift``: likewise for the bootstrap config template (or data secret);
- ``MachineSetDrift``: a MachineDeployment's Machine sits in a MachineSet of an older revision
  (any other template change).

For a MachineDeployment the Machine's own MachineSet holds the template it was made from (CAPI
makes a new MachineSet for every template change), so one read of that MachineSet answers. A
standalone MachineSet or a MachinePool changes its template in place; there the infrastructure
machine's and bootstrap config's ``cluster.x-k8s.io/cloned-from-name`` annotations say which
template made them.

Where the plugin's mirrors follow watches (a real API server), the Machine, its resource and its
MachineSet are read from them (``ClusterMirrors``), not fetched for every check: a template change
shows once its watch event arrives. Drift is checked again at every disruption pass, so that lag
only delays a verdict, as upstream Karpenter's cached reads do. What a copy does not hold is
fetched.

Who replaces drifted Machines is the NodeClass's choice, annotation
``karpenter.cluster.x-k8s.io/drift-remediation`` (or plugin option
``generic_capi.drift_remediation``):

- ``Karpenter`` (default): this hook reports drift and Karpenter's disruption replaces the node
  (launch first, then a targeted delete). The MachineDeployment must not roll out on its own:
  with ``RollingUpdate`` CAPI would replace the same Machines behind Karpenter's back at the
  first template change. Use ``OnDelete``; ``rollout_warnings`` names the MachineDeployments
  that do not, for the NodeClass status.
- ``ClusterAPI``: this hook never reports drift and CAPI's rollout replaces Machines as the
  MachineDeployment's strategy says. The NodeClaims of replaced Machines are garbage-collected
  once their Machine is gone, and the replacement Machines are ordinary CAPI capacity that
  Karpenter does not consolidate.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from karpenter_capi.plugin_api import KubeClient, NodeClaim, PluginContext, Resource
from karpenter_capi.plugin_api.karpenter import NodeClass
from karpenter_capi.plugin_api.kube import (
    SET_NAME_LABEL,
    ApiError,
    CapiResources,
    JsonObject,
    NotFound,
)
from karpenter_capi.plugins.generic_capi.binding import (
    ClaimFacts,
    MachineFacts,
    claim_facts,
    machine_facts,
)
from karpenter_capi.plugins.generic_capi.instances import MachineCache
from karpenter_capi.plugins.generic_capi.inventory import raw_nodeclass
from karpenter_capi.plugins.generic_capi.mirror import ClusterMirrors
from karpenter_capi.plugins.generic_capi.scaling import (
    ANNOTATION_REVISION,
    STRATEGY_ON_DELETE,
    ResourceRef,
    owner_of,
    rollout_strategy,
)
from karpenter_capi.plugins.generic_capi.selection import (
    MACHINE_DEPLOYMENT,
    ResourceProblem,
)

log = logging.getLogger(__name__)

DRIFT_REMEDIATION_ANNOTATION: Final = "karpenter.cluster.x-k8s.io/drift-remediation"
DRIFT_REMEDIATION_OPTION: Final = "drift_remediation"
REMEDIATION_KARPENTER: Final = "Karpenter"
REMEDIATION_CLUSTER_API: Final = "ClusterAPI"

REASON_VERSION: Final = "VersionDrift"
REASON_INFRASTRUCTURE: Final = "InfrastructureTemplateDrift"
REASON_BOOTSTRAP: Final = "BootstrapConfigDrift"
REASON_MACHINE_SET: Final = "MachineSetDrift"
REASON_ROLLOUT_STRATEGY: Final = "RolloutStrategyNotOnDelete"

ANNOTATION_CLONED_FROM_NAME: Final = "cluster.x-k8s.io/cloned-from-name"
ANNOTATION_CLONED_FROM_GROUPKIND: Final = "cluster.x-k8s.io/cloned-from-groupkind"


def remediation(nodeclass: NodeClass | Mapping[str, Any], options: Mapping[str, str]) -> str:
    """Who replaces drifted Machines: the NodeClass annotation, else the plugin option, else
    Karpenter. An unknown value is logged and means the default."""
    raw = raw_nodeclass(nodeclass)
    annotations = (raw.get("metadata") or {}).get("annotations") or {}
    value = str(
        annotations.get(DRIFT_REMEDIATION_ANNOTATION)
        or options.get(DRIFT_REMEDIATION_OPTION)
        or REMEDIATION_KARPENTER
    )
    for known in (REMEDIATION_KARPENTER, REMEDIATION_CLUSTER_API):
        if value.lower() == known.lower():
            return known
    log.warning(
        "unknown %s %r (expected %s or %s); using %s",
        DRIFT_REMEDIATION_ANNOTATION,
        value,
        REMEDIATION_KARPENTER,
        REMEDIATION_CLUSTER_API,
        REMEDIATION_KARPENTER,
    )
    return REMEDIATION_KARPENTER


def rollout_warnings(
    nodeclass: NodeClass | Mapping[str, Any],
    options: Mapping[str, str],
    deployments: Sequence[tuple[str, str, Mapping[str, Any]]],
) -> list[ResourceProblem]:
    """One notice per selected MachineDeployment (``(namespace, name, object)``) that would
    roll out on its own while Karpenter replaces drifted nodes."""
    if remediation(nodeclass, options) != REMEDIATION_KARPENTER:
        return []
    notices = []
    for namespace, name, obj in deployments:
        strategy = rollout_strategy(obj)
        if strategy == STRATEGY_ON_DELETE:
            continue
        notices.append(
            ResourceProblem(
                MACHINE_DEPLOYMENT,
                namespace,
                name,
                REASON_ROLLOUT_STRATEGY,
                f"rollout strategy {strategy}: a template change makes CAPI replace the "
                f"Machines Karpenter manages; set the strategy to OnDelete so that Karpenter "
                f"replaces drifted nodes, or annotate the NodeClass "
                f"{DRIFT_REMEDIATION_ANNOTATION}={REMEDIATION_CLUSTER_API}",
            )
        )
    return notices


def _ref(obj: Any) -> tuple[str, str, str]:
    """``(group, kind, name)`` of a v1beta1 or v1beta2 object reference."""
    if not isinstance(obj, Mapping):
        return ("", "", "")
    group = str(obj.get("apiGroup") or "")
    if not group:
        api_version = str(obj.get("apiVersion") or "")
        group = api_version.rpartition("/")[0]
    return (group, str(obj.get("kind") or ""), str(obj.get("name") or ""))


def _template_spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = (obj.get("spec") or {}).get("template") or {}
    found = spec.get("spec") if isinstance(spec, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _bootstrap(spec: Mapping[str, Any]) -> tuple[tuple[str, str, str], str]:
    bootstrap = spec.get("bootstrap") or {}
    if not isinstance(bootstrap, Mapping):
        return (("", "", ""), "")
    return _ref(bootstrap.get("configRef")), str(bootstrap.get("dataSecretName") or "")


def compare_templates(
    machine_spec: Mapping[str, Any], made_from: Mapping[str, Any], wanted: Mapping[str, Any]
) -> str | None:
    """Drift between the template a Machine was made from and the wanted one (both are
    Machine template specs), plus the Machine's own version."""
    wanted_version = str(wanted.get("version") or "")
    version = str(machine_spec.get("version") or made_from.get("version") or "")
    if wanted_version and version and wanted_version != version:
        return REASON_VERSION
    if _ref(made_from.get("infrastructureRef"))[1:] != _ref(wanted.get("infrastructureRef"))[1:]:
        return REASON_INFRASTRUCTURE
    made_ref, made_secret = _bootstrap(made_from)
    wanted_ref, wanted_secret = _bootstrap(wanted)
    if made_ref[1:] != wanted_ref[1:] or made_secret != wanted_secret:
        return REASON_BOOTSTRAP
    return None


class DriftDetector:
    """The ``karpenter_capi_is_drifted`` logic for one management cluster."""

    def __init__(
        self,
        ctx: PluginContext,
        capi: CapiResources,
        cache: MachineCache,
        mirrors: ClusterMirrors | None = None,
    ) -> None:
        self._ctx = ctx
        self._client: KubeClient = ctx.management
        self._capi = capi
        self._cache = cache
        self._mirrors = mirrors if mirrors is not None and mirrors.watched else None

    def is_drifted(self, nodeclaim: NodeClaim, nodeclass: NodeClass) -> str | None:
        if remediation(nodeclass, self._ctx.options) != REMEDIATION_KARPENTER:
            return None
        claim = claim_facts(nodeclaim)
        machine: MachineFacts | None = None
        if claim.machine_ref is not None:
            machine = self._machine(claim, *claim.machine_ref)
            if machine is not None:
                self._cache.observe(machine)
        elif claim.provider_id:
            machine = self._cache.by_provider_id(claim.provider_id)
        if machine is None or machine.deleting or not machine.bound_to(claim):
            return None
        owner = owner_of(machine)
        if owner is None:
            return None
        resource = self._mirrors.scalable(owner) if self._mirrors is not None else None
        if resource is None:
            resource = self._get_raw(owner.resource(self._capi), owner.namespace, owner.name)
        if resource is None:
            return None
        try:
            if owner.kind == MACHINE_DEPLOYMENT:
                return self._deployment_drift(machine, owner, resource)
            return self._template_drift(machine, resource)
        except ApiError as exc:
            log.warning("cannot check drift of Machine %s: %s", machine.key, exc)
            return None

    def _deployment_drift(
        self, machine: MachineFacts, owner: ResourceRef, deployment: Mapping[str, Any]
    ) -> str | None:
        machine_spec = machine.raw.get("spec") or {}
        wanted = _template_spec(deployment)
        set_name = machine.labels.get(SET_NAME_LABEL, "")
        machine_set = None
        if set_name and self._mirrors is not None:
            machine_set = self._mirrors.machine_set(owner.namespace, set_name)
        if set_name and machine_set is None:
            machine_set = self._get_raw(self._capi.machine_sets, owner.namespace, set_name)
        if machine_set is None:
            return compare_templates(machine_spec, machine_spec, wanted)
        reason = compare_templates(machine_spec, _template_spec(machine_set), wanted)
        if reason is not None:
            return reason
        ms_revision = _annotation_int(machine_set, ANNOTATION_REVISION)
        md_revision = _annotation_int(deployment, ANNOTATION_REVISION)
        if ms_revision is not None and md_revision is not None and ms_revision < md_revision:
            return REASON_MACHINE_SET
        return None

    def _machine(self, claim: ClaimFacts, namespace: str, name: str) -> MachineFacts | None:
        """The NodeClaim's recorded Machine: from the mirror of the resource it waits on when
        that mirror holds it (a moment's lag only delays a verdict: drift is checked again),
        else from the API."""
        ref = ResourceRef.parse(claim.intent) if claim.intent else None
        if self._mirrors is not None and ref is not None:
            held = self._mirrors.machine(ref, namespace, name)
            if held is not None:
                return held
        raw = self._get_raw(self._capi.machines, namespace, name)
        return machine_facts(raw) if raw is not None else None

    def _template_drift(self, machine: MachineFacts, resource: Mapping[str, Any]) -> str | None:
        spec = machine.raw.get("spec") or {}
        wanted = _template_spec(resource)
        wanted_version = str(wanted.get("version") or "")
        version = str(spec.get("version") or "")
        if wanted_version and version and wanted_version != version:
            return REASON_VERSION
        infra = self._cloned_from(machine.namespace, spec.get("infrastructureRef"))
        if infra is not None and infra[1:] != _ref(wanted.get("infrastructureRef"))[1:]:
            return REASON_INFRASTRUCTURE
        bootstrap = spec.get("bootstrap") or {}
        wanted_ref, wanted_secret = _bootstrap(wanted)
        if bootstrap.get("configRef"):
            config = self._cloned_from(machine.namespace, bootstrap.get("configRef"))
            if config is not None and config[1:] != wanted_ref[1:]:
                return REASON_BOOTSTRAP
        elif wanted_ref[1] or str(bootstrap.get("dataSecretName") or "") != wanted_secret:
            return REASON_BOOTSTRAP
        return None

    def _cloned_from(self, namespace: str, ref: Any) -> tuple[str, str, str] | None:
        """``(group, kind, name)`` of the template an infrastructure machine or bootstrap
        config was cloned from (its ``cloned-from`` annotations); ``None`` when unknown."""
        group, kind, name = _ref(ref)
        if not isinstance(ref, Mapping) or not kind or not name or not group:
            return None
        obj = self._referenced(group, kind, ref, str(ref.get("namespace") or namespace), name)
        if obj is None:
            return None
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        cloned = annotations.get(ANNOTATION_CLONED_FROM_NAME)
        if not cloned:
            return None
        groupkind = str(annotations.get(ANNOTATION_CLONED_FROM_GROUPKIND) or "")
        template_kind, _, template_group = groupkind.partition(".")
        return (template_group or group, template_kind or f"{kind}Template", str(cloned))

    def _referenced(
        self, group: str, kind: str, ref: Mapping[str, Any], namespace: str, name: str
    ) -> JsonObject | None:
        """The object a reference names, at its own version or any the group serves (the
        plural is the lower-cased kind plus ``s``, as every provider's CRDs are named)."""
        api_version = str(ref.get("apiVersion") or "")
        versions = [api_version.rpartition("/")[2]] if "/" in api_version else []
        with contextlib.suppress(ApiError):
            versions += self._client.served_versions(group)
        for version in dict.fromkeys(versions):
            resource = Resource(group, version, kind.lower() + "s", kind, True)
            found = self._get_raw(resource, namespace, name)
            if found is not None:
                return found
        return None

    def _get_raw(self, resource: Resource, namespace: str, name: str) -> JsonObject | None:
        try:
            return self._client.get(resource, name, namespace)
        except NotFound:
            return None


def _annotation_int(obj: Mapping[str, Any], key: str) -> int | None:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    try:
        return int(str(annotations.get(key, "")).strip())
    except ValueError:
        return None
