"""The CustomResourceDefinitions of Cluster API (core), the infrastructure kinds plugins use and
kubeadm's bootstrap kinds.

The simulated cluster serves CAPI through the same path a real cluster does: these CRDs are
created like any other object, which makes their resources served. They mirror the upstream
CRDs where the controller can tell the difference (names, scope, short names, categories,
served versions, status and scale subresources with CAPI's paths, printer columns). Their
schemas are open (``x-kubernetes-preserve-unknown-fields``) except where a version's shape is
one the plugins can get wrong: kubeadm's bootstrap kinds have a schema per version and convert
between them through CAPI's conversion webhook, run in process (``kubeadm_versions``), and
CAPZ's AzureMachinePool and AzureMachinePoolMachine and CAPA's AWSMachine and
AWSMachineTemplate (v1beta2) have their CRDs' fields (``capz_schemas``, ``capa_schemas``).
CAPA's kinds are served at v1beta2 only: cluster-api-provider-aws config/crd/bases lists their
v1beta1 with ``served: false`` (``+kubebuilder:storageversion`` on v1beta2).

The core kinds are served as v1beta2 (storage) and v1beta1: an object is stored once and shown
at the version asked for. Machine, MachineSet, MachineDeployment and MachinePool convert through
CAPI's core conversion webhook, run in process (``capi_core_versions``); the kinds with no
webhook have only ``apiVersion`` rewritten.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from karpenter_capi.sim.apiserver import (
    capa_schemas,
    capi_core_versions,
    capz_schemas,
    kubeadm_versions,
)
from karpenter_capi.sim.apiserver.conversion import webhook as conversion_webhook

JsonObject = dict[str, Any]

CAPI_GROUP = "cluster.x-k8s.io"
INFRASTRUCTURE_GROUP = "infrastructure.cluster.x-k8s.io"
BOOTSTRAP_GROUP = "bootstrap.cluster.x-k8s.io"

_OPEN_SCHEMA: JsonObject = {
    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
}
_AGE: JsonObject = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
_CLUSTER: JsonObject = {
    "name": "Cluster",
    "type": "string",
    "jsonPath": ".spec.clusterName",
    "description": "Cluster",
}
_PHASE: JsonObject = {"name": "Phase", "type": "string", "jsonPath": ".status.phase"}
_DESIRED: JsonObject = {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"}
_REPLICAS: JsonObject = {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas"}
_READY: JsonObject = {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"}
_TEMPLATE_VERSION: JsonObject = {
    "name": "Version",
    "type": "string",
    "jsonPath": ".spec.template.spec.version",
}
_SCALE: JsonObject = {
    "specReplicasPath": ".spec.replicas",
    "statusReplicasPath": ".status.replicas",
    "labelSelectorPath": ".status.selector",
}


def crd(
    group: str,
    kind: str,
    plural: str,
    versions: tuple[str, ...],
    *,
    namespaced: bool = True,
    short_names: tuple[str, ...] = (),
    categories: tuple[str, ...] = ("cluster-api",),
    status: bool = True,
    scale: JsonObject | None = None,
    columns: tuple[JsonObject, ...] = (_AGE,),
    schemas: Mapping[str, JsonObject] | None = None,
    conversion: JsonObject | None = None,
    unserved: tuple[str, ...] = (),
) -> JsonObject:
    """A ``CustomResourceDefinition``; the first version is the storage version. ``schemas``
    gives a version its own ``openAPIV3Schema`` (others stay open); ``conversion`` is the
    CRD's ``spec.conversion`` (default: strategy ``None``); ``unserved`` versions are listed
    with ``served: false``, as upstream keeps a retired version in its CRD."""
    subresources: JsonObject = {}
    if status:
        subresources["status"] = {}
    if scale is not None:
        subresources["scale"] = dict(scale)
    names: JsonObject = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
    }
    if short_names:
        names["shortNames"] = list(short_names)
    if categories:
        names["categories"] = list(categories)
    spec: JsonObject = {
        "group": group,
        "names": names,
        "scope": "Namespaced" if namespaced else "Cluster",
        "versions": [
            {
                "name": version,
                "served": True,
                "storage": index == 0,
                "schema": (
                    {"openAPIV3Schema": schemas[version]}
                    if schemas and version in schemas
                    else _OPEN_SCHEMA
                ),
                "subresources": subresources,
                "additionalPrinterColumns": [dict(c) for c in columns],
            }
            for index, version in enumerate(versions)
        ]
        + [
            {"name": version, "served": False, "storage": False, "schema": _OPEN_SCHEMA}
            for version in unserved
        ],
    }
    if conversion is not None:
        spec["conversion"] = conversion
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": spec,
    }


_CORE_VERSIONS = ("v1beta2", "v1beta1")
_KUBEADM_CONVERSION = conversion_webhook(*kubeadm_versions.WEBHOOK_SERVICE)
_CORE_CONVERSION = conversion_webhook(*capi_core_versions.WEBHOOK_SERVICE)


def cluster_api_crds() -> list[JsonObject]:
    """The CRDs ``register_cluster_api`` creates: CAPI core, AWS, Azure, Docker and kubeadm
    bootstrap kinds."""
    return [
        crd(
            CAPI_GROUP,
            "Cluster",
            "clusters",
            _CORE_VERSIONS,
            short_names=("cl",),
            columns=(
                _PHASE,
                _AGE,
                {"name": "Version", "type": "string", "jsonPath": ".spec.topology.version"},
            ),
        ),
        crd(
            CAPI_GROUP,
            "Machine",
            "machines",
            _CORE_VERSIONS,
            conversion=_CORE_CONVERSION,
            short_names=("ma",),
            columns=(
                _CLUSTER,
                {"name": "NodeName", "type": "string", "jsonPath": ".status.nodeRef.name"},
                {"name": "ProviderID", "type": "string", "jsonPath": ".spec.providerID"},
                _PHASE,
                _AGE,
                {"name": "Version", "type": "string", "jsonPath": ".spec.version"},
            ),
        ),
        crd(
            CAPI_GROUP,
            "MachineSet",
            "machinesets",
            _CORE_VERSIONS,
            conversion=_CORE_CONVERSION,
            short_names=("ms",),
            scale=_SCALE,
            columns=(
                _CLUSTER,
                _DESIRED,
                _REPLICAS,
                _READY,
                {
                    "name": "Available",
                    "type": "integer",
                    "jsonPath": ".status.availableReplicas",
                },
                _AGE,
                _TEMPLATE_VERSION,
            ),
        ),
        crd(
            CAPI_GROUP,
            "MachineDeployment",
            "machinedeployments",
            _CORE_VERSIONS,
            conversion=_CORE_CONVERSION,
            short_names=("md",),
            scale=_SCALE,
            columns=(
                _CLUSTER,
                _DESIRED,
                _REPLICAS,
                _READY,
                {"name": "Updated", "type": "integer", "jsonPath": ".status.updatedReplicas"},
                {
                    "name": "Unavailable",
                    "type": "integer",
                    "jsonPath": ".status.unavailableReplicas",
                },
                _PHASE,
                _AGE,
                _TEMPLATE_VERSION,
            ),
        ),
        crd(
            CAPI_GROUP,
            "MachinePool",
            "machinepools",
            _CORE_VERSIONS,
            conversion=_CORE_CONVERSION,
            short_names=("mp",),
            scale=_SCALE,
            columns=(_CLUSTER, _DESIRED, _REPLICAS, _PHASE, _AGE, _TEMPLATE_VERSION),
        ),
        crd(
            INFRASTRUCTURE_GROUP,
            "AWSCluster",
            "awsclusters",
            ("v1beta2",),
            unserved=("v1beta1",),
            categories=("cluster-api", "capa"),
        ),
        crd(
            INFRASTRUCTURE_GROUP,
            "AWSMachineTemplate",
            "awsmachinetemplates",
            ("v1beta2",),
            unserved=("v1beta1",),
            short_names=("awsmt",),
            categories=("cluster-api", "capa"),
            schemas={"v1beta2": capa_schemas.aws_machine_template()},
        ),
        crd(
            INFRASTRUCTURE_GROUP,
            "AWSMachine",
            "awsmachines",
            ("v1beta2",),
            unserved=("v1beta1",),
            short_names=("awsm",),
            categories=("cluster-api", "capa"),
            schemas={"v1beta2": capa_schemas.aws_machine()},
        ),
        crd(
            INFRASTRUCTURE_GROUP,
            "AzureCluster",
            "azureclusters",
            ("v1beta1",),
            categories=("cluster-api", "capz"),
        ),
        crd(
            INFRASTRUCTURE_GROUP,
            "AzureMachineTemplate",
            "azuremachinetemplates",
            ("v1beta1",),
            short_names=("amt",),
            categories=("cluster-api", "capz"),
            status=False,
            schemas={"v1beta1": capz_schemas.azure_machine_template()},
        ),
        crd(
            INFRASTRUCTURE_GROUP,
            "AzureMachinePool",
            "azuremachinepools",
            ("v1beta1",),
            short_names=("amp",),
            categories=("cluster-api", "capz"),
            schemas={"v1beta1": capz_schemas.azure_machine_pool()},
        ),
        crd(
            INFRASTRUCTURE_GROUP,
            "AzureMachinePoolMachine",
            "azuremachinepoolmachines",
            ("v1beta1",),
            short_names=("ampm",),
            categories=("cluster-api", "capz"),
            schemas={"v1beta1": capz_schemas.azure_machine_pool_machine()},
        ),
        crd(
            INFRASTRUCTURE_GROUP,
            "DockerMachinePool",
            "dockermachinepools",
            ("v1beta1",),
            categories=("cluster-api", "capd"),
        ),
        crd(
            INFRASTRUCTURE_GROUP,
            "DockerMachineTemplate",
            "dockermachinetemplates",
            ("v1beta1",),
            categories=("cluster-api", "capd"),
        ),
        # kubeadm bootstrap: what the emulated kubelet reserves comes from these.
        crd(
            BOOTSTRAP_GROUP,
            "KubeadmConfigTemplate",
            "kubeadmconfigtemplates",
            _CORE_VERSIONS,
            categories=("cluster-api", "kubeadm"),
            status=False,
            schemas=kubeadm_versions.template_schemas(),
            conversion=_KUBEADM_CONVERSION,
        ),
        crd(
            BOOTSTRAP_GROUP,
            "KubeadmConfig",
            "kubeadmconfigs",
            _CORE_VERSIONS,
            categories=("cluster-api", "kubeadm"),
            schemas=kubeadm_versions.config_schemas(),
            conversion=_KUBEADM_CONVERSION,
        ),
    ]
