"""The Cluster API objects of a fleet-launched node, shaped so that stock CAPA adopts it.

Per NodeClaim, all named after it in the launch's namespace (so every step can be repeated
after a crash and find what an earlier attempt made):

* a ``Machine``: ``bootstrap.configRef`` to the KubeadmConfig, ``infrastructureRef`` to an
  ``AWSMachine`` that does not exist yet (CAPI waits for it, "Could not find
  InfrastructureMachine"), the ``cluster.x-k8s.io/cluster-name`` and ``karpenter.sh/nodepool``
  labels, and the plugin's own labels. It has no owner: it is the node's record in
  ``kubectl get machines``, and deleting it is how the node is removed.
* a ``KubeadmConfig`` copied from the KubeadmConfigTemplate, owned by the Machine (CAPI would
  set that owner too), with the NodeClaim's taints and ``karpenter.sh/unregistered`` added to
  ``joinConfiguration.nodeRegistration.taints`` so the node registers the way Karpenter
  expects. Cluster API's kubeadm bootstrap provider turns it into the bootstrap secret and CAPI
  copies that secret's name into ``Machine.spec.bootstrap.dataSecretName``.
* an ``AWSMachine``, created **only after the fleet returned the instance**: it carries
  ``providerID aws:///<zone>/<id>`` and ``instanceID``, so CAPA's ``findInstance`` reads that
  instance instead of calling RunInstances. Created earlier, without a provider ID, it would
  make CAPA launch a second instance. ``cloudInit.secretPrefix`` and ``secretCount`` name the
  Secrets Manager secrets holding the node's bootstrap data (``bootstrap_secret``), which CAPA
  deletes once the node registered; market fields that do not fit the launched instance are
  left out, because CAPA's validating webhook refuses them together
  (``sim/apiserver/capa_webhooks.py`` emulates it).

The Machine is created first and the KubeadmConfig second (owned by it), so a crash between
them leaves nothing that deleting the Machine does not clean up.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from karpenter_capi.plugin_api import Resource
from karpenter_capi.plugin_api.karpenter import wellknown
from karpenter_capi.plugin_api.kube import CAPI_INFRASTRUCTURE_GROUP, CapiResources, JsonObject
from karpenter_capi.plugins.capa import bootstrap_secret
from karpenter_capi.plugins.capa.fleet import LaunchedInstance
from karpenter_capi.plugins.capa.fleet_target import BOOTSTRAP_GROUP, FleetTarget

LABEL_LAUNCH: Final = "karpenter.cluster.x-k8s.io/launch"
LAUNCH_VALUE: Final = "capa-fleet"
LABEL_NODECLAIM: Final = "karpenter.sh/nodeclaim"
ANNOTATION_NODECLAIM_UID: Final = "karpenter.cluster.x-k8s.io/nodeclaim-uid"
ANNOTATION_MACHINE: Final = "karpenter.cluster.x-k8s.io/capa-machine"
"""On the NodeClaim: ``<namespace>/<name>`` of its Machine (and KubeadmConfig, AWSMachine)."""
SELECTOR: Final = f"{LABEL_LAUNCH}={LAUNCH_VALUE}"


def version_of(api_version: str, default: str) -> str:
    _, slash, version = api_version.rpartition("/")
    return version if slash and version else default


def aws_machines(target_api_version: str) -> Resource:
    return Resource(
        CAPI_INFRASTRUCTURE_GROUP,
        version_of(target_api_version, "v1beta2"),
        "awsmachines",
        "AWSMachine",
        True,
    )


def kubeadm_configs(target_api_version: str) -> Resource:
    return Resource(
        BOOTSTRAP_GROUP,
        version_of(target_api_version, "v1beta2"),
        "kubeadmconfigs",
        "KubeadmConfig",
        True,
    )


def _labels(target: FleetTarget, nodeclaim: str, nodepool: str | None) -> dict[str, str]:
    labels = {
        wellknown.LABEL_CAPI_CLUSTER_NAME: target.cluster,
        LABEL_LAUNCH: LAUNCH_VALUE,
        LABEL_NODECLAIM: nodeclaim,
    }
    if nodepool:
        labels[wellknown.LABEL_NODEPOOL] = nodepool
    return labels


def _ref(capi: CapiResources, api_version: str, kind: str, name: str, namespace: str) -> JsonObject:
    """A reference in the Machine's own version: v1beta2 names the group, v1beta1 the
    apiVersion and namespace."""
    group = api_version.rpartition("/")[0]
    if capi.version == "v1beta1":
        return {"apiVersion": api_version, "kind": kind, "name": name, "namespace": namespace}
    return {"apiGroup": group, "kind": kind, "name": name}


def machine(
    capi: CapiResources,
    target: FleetTarget,
    nodeclaim: str,
    uid: str,
    nodepool: str | None,
) -> JsonObject:
    """The node's Machine, before its AWSMachine exists."""
    bootstrap = kubeadm_configs(target.bootstrap_api_version)
    infra = aws_machines(target.machine_api_version)
    spec: JsonObject = {
        "clusterName": target.cluster,
        "bootstrap": {
            "configRef": _ref(
                capi, bootstrap.api_version, bootstrap.kind, nodeclaim, target.namespace
            )
        },
        "infrastructureRef": _ref(capi, infra.api_version, infra.kind, nodeclaim, target.namespace),
    }
    if target.version:
        spec["version"] = target.version
    return {
        "apiVersion": capi.api_version,
        "kind": "Machine",
        "metadata": {
            "name": nodeclaim,
            "namespace": target.namespace,
            "labels": _labels(target, nodeclaim, nodepool),
            "annotations": {ANNOTATION_NODECLAIM_UID: uid},
        },
        "spec": spec,
    }


def owner_reference(owner: Mapping[str, Any]) -> JsonObject:
    meta = owner.get("metadata") or {}
    return {
        "apiVersion": owner.get("apiVersion"),
        "kind": owner.get("kind"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _taint(raw: Mapping[str, Any]) -> JsonObject:
    taint = {"key": raw["key"], "effect": raw["effect"]}
    if raw.get("value"):
        taint["value"] = raw["value"]
    return taint


def kubeadm_config(
    target: FleetTarget,
    nodeclaim: Mapping[str, Any],
    owner: Mapping[str, Any],
    nodepool: str | None,
) -> JsonObject:
    """The node's KubeadmConfig: the template's, with the NodeClaim's taints added."""
    name = str((nodeclaim.get("metadata") or {}).get("name"))
    template = copy.deepcopy(dict(target.bootstrap_template))
    spec: JsonObject = dict(template.get("spec") or {})
    join = dict(spec.get("joinConfiguration") or {})
    registration = dict(join.get("nodeRegistration") or {})
    taints = [t for t in registration.get("taints") or [] if isinstance(t, Mapping)]
    claim_spec = nodeclaim.get("spec") or {}
    wanted = [
        *(claim_spec.get("taints") or []),
        *(claim_spec.get("startupTaints") or []),
        {"key": wellknown.TAINT_UNREGISTERED_KEY, "effect": wellknown.TAINT_UNREGISTERED_EFFECT},
    ]
    for raw in wanted:
        taint = _taint(raw)
        same = (t for t in taints if t.get("key") == taint["key"])
        if not any(t.get("effect") == taint["effect"] for t in same):
            taints.append(taint)
    registration["taints"] = taints
    join["nodeRegistration"] = registration
    spec["joinConfiguration"] = join
    meta = template.get("metadata") or {}
    labels = {**(meta.get("labels") or {}), **_labels(target, name, nodepool)}
    resource = kubeadm_configs(target.bootstrap_api_version)
    return {
        "apiVersion": resource.api_version,
        "kind": "KubeadmConfig",
        "metadata": {
            "name": name,
            "namespace": target.namespace,
            "labels": labels,
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [owner_reference(owner)],
        },
        "spec": spec,
    }


def _market(spec: JsonObject, *, spot: bool) -> None:
    """The market fields of the instance the fleet launched, in combinations CAPA's webhook
    admits (``validateInstanceMarketType``, ``validateCapacityReservation``): a template's
    ``marketType: OnDemand`` or ``CapacityReservationsOnly`` must not sit next to the
    ``spotMarketOptions`` of a spot instance, nor ``Spot`` on an on-demand one."""
    if spot:
        spec["spotMarketOptions"] = dict(spec.get("spotMarketOptions") or {})
        spec["marketType"] = "Spot"
        spec.pop("capacityReservationId", None)
        if spec.get("capacityReservationPreference") == "CapacityReservationsOnly":
            spec.pop("capacityReservationPreference")
        return
    spec.pop("spotMarketOptions", None)
    if spec.get("marketType") == "Spot":
        spec["marketType"] = "OnDemand"


def _bootstrap_delivery(spec: JsonObject, instance_id: str, secret_count: int) -> None:
    """Where the bootstrap data is: CAPA's Secrets Manager secrets named after the instance
    (``bootstrap_secret``), so CAPA deletes them once the node registered. A template's
    ``insecureSkipSecretsManager`` or other backend would contradict that
    (``validateCloudInitSecret``); ignition templates are refused earlier (``fleet_target``).
    """
    spec.pop("ignition", None)
    spec["cloudInit"] = {
        "secretPrefix": bootstrap_secret.prefix_for(instance_id),
        "secretCount": secret_count,
        "secureSecretsBackend": "secrets-manager",
    }


def aws_machine(
    target: FleetTarget,
    nodeclaim: str,
    owner: Mapping[str, Any],
    nodepool: str | None,
    instance: LaunchedInstance,
    *,
    secret_count: int,
) -> JsonObject:
    """The AWSMachine that makes CAPA adopt ``instance`` (never one without a provider ID)."""
    spec = copy.deepcopy(dict(target.machine_spec))
    spec["providerID"] = instance.provider_id
    spec["instanceID"] = instance.instance_id
    spec["instanceType"] = instance.instance_type
    spec["ami"] = {"id": instance.image_id or target.image_id}
    spec["instanceMetadataOptions"] = dict(target.metadata_options)
    if instance.subnet_id:
        spec["subnet"] = {"id": instance.subnet_id}
    _market(spec, spot=instance.capacity_type == wellknown.CAPACITY_TYPE_SPOT)
    _bootstrap_delivery(spec, instance.instance_id, secret_count)
    resource = aws_machines(target.machine_api_version)
    return {
        "apiVersion": resource.api_version,
        "kind": "AWSMachine",
        "metadata": {
            "name": nodeclaim,
            "namespace": target.namespace,
            "labels": _labels(target, nodeclaim, nodepool),
            "ownerReferences": [owner_reference(owner)],
        },
        "spec": spec,
    }


def data_secret_name(machine: Mapping[str, Any]) -> str | None:
    value = ((machine.get("spec") or {}).get("bootstrap") or {}).get("dataSecretName")
    return str(value) if value else None


def is_deleting(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))
