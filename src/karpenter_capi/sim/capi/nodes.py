"""A minimal kubelet stand-in: a Node for each provisioned Machine or MachinePool instance.

Registration, initialization and everything after them in the autoprovisioner start from a
Node with the right providerID, labels, capacity and taints. Until the kubelet emulation exists
(a later piece of the simulator), these controllers make that Node, and nothing more:

* **when**: as soon as a Machine has a providerID (and is neither failed nor being deleted), or
  a MachinePool lists one, a Node named after the Machine (or instance) is created, with
  ``Ready=False``; after the boot delay (``sim.karpenter.cluster.x-k8s.io/boot-delay`` on the
  Machine or its scalable resource, else ``EmulationSettings.boot_delay``) it turns
  ``Ready=True``. A Node deleted while its Machine still runs is created again, as a kubelet
  re-registers. Deleting Nodes is CAPI's business (``machine.py``, ``machinepool.py``);
* **capacity**: the scale-from-zero annotations of the scalable resource
  (``capacity.cluster-autoscaler.kubernetes.io/cpu``, ``memory``, ``maxPods`` (default 110),
  ``ephemeral-disk``, ``gpu-count`` with ``gpu-type``); without them the Node only has
  ``pods: 110``. The kubeadm bootstrap config's ``max-pods`` replaces ``pods``;
* **allocatable**: capacity minus what a kubeadm kubelet keeps, from the ``KubeadmConfigTemplate``
  (or a pool's ``KubeadmConfig``) the owner's template references (``kubeletconfig``): its
  kube-reserved, system-reserved and eviction-hard, else only the kubelet's default hard
  eviction thresholds (memory 100Mi, 10% of ephemeral storage);
* **labels**: ``kubernetes.io/hostname``, ``kubernetes.io/os=linux``,
  ``kubernetes.io/arch=amd64``, ``topology.kubernetes.io/zone`` from the Machine's
  ``spec.failureDomain``, ``node.kubernetes.io/instance-type`` from the Machine's (template)
  labels, then everything in the ``capacity.../labels`` annotation (which wins), and the
  Machine's ``node-role.kubernetes.io/*``, ``node-restriction.kubernetes.io/*`` and
  ``node.cluster.x-k8s.io/*`` labels, which CAPI syncs to Nodes;
* **taints**: the ``capacity.../taints`` annotation and the kubeadm config's
  ``joinConfiguration.nodeRegistration.taints``, plus ``karpenter.sh/unregistered:NoExecute``
  when the Machine or its scalable resource is labelled
  ``node.cluster.x-k8s.io/karpenter-member`` (Karpenter's registration removes it);
* **annotations**: ``cluster.x-k8s.io/machine``, ``cluster-name``, ``cluster-namespace`` as
  CAPI writes them, and ``sim.karpenter.cluster.x-k8s.io/kubelet: "true"``, which marks the Nodes
  this module owns (only those are made Ready).

Not emulated: heartbeats, NotReady after a failure, the ``node.kubernetes.io/not-ready`` taint,
pod admission or capacity accounting, CSINodes, addresses beyond the hostname.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import Clock, format_timestamp
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import AlreadyExists, ApiError, NotFound
from karpenter_capi.core.kube.indexes import BY_PROVIDER_ID, BY_PROVIDER_ID_LIST
from karpenter_capi.core.kube.resources import NODES, Resource
from karpenter_capi.core.runtime.controller import (
    DONE,
    MANAGEMENT,
    WORKLOAD,
    Caches,
    Key,
    Result,
    Watch,
)
from karpenter_capi.core.values.quantity import QuantityError, parse_quantity
from karpenter_capi.core.values.taints import Taint, TaintError
from karpenter_capi.sim.capi.kubeletconfig import (
    BOOTSTRAP_GROUP,
    KUBEADM_KINDS,
    kubelet_status,
    registration_taints,
)
from karpenter_capi.sim.capi.machine import node_is_ready
from karpenter_capi.sim.capi.objects import (
    annotations_of,
    controller_key,
    created_at,
    is_deleting,
    is_paused,
    key_of,
    labels_of,
    name_of,
    namespace_of,
    nested,
)
from karpenter_capi.sim.capi.owners import Owners
from karpenter_capi.sim.capi.settings import (
    ANNOTATION_BOOT_DELAY,
    ANNOTATION_KUBELET,
    EmulationSettings,
    delay_from,
    handled_by_capa,
)
from karpenter_capi.sim.capi.shapes import failure_of

_log = logging.getLogger(__name__)

DEFAULT_MAX_PODS: Final = "110"
KUBELET_VERSION: Final = "v1.31.0"
_SYNCED_LABEL_PREFIXES: Final = (
    "node-role.kubernetes.io/",
    "node-restriction.kubernetes.io/",
    "node.cluster.x-k8s.io/",
)
_CAPACITY_ANNOTATIONS: Final = (
    (wellknown.ANNOTATION_CAPACITY_CPU, "cpu"),
    (wellknown.ANNOTATION_CAPACITY_MEMORY, "memory"),
    (wellknown.ANNOTATION_CAPACITY_MAX_PODS, "pods"),
    (wellknown.ANNOTATION_CAPACITY_EPHEMERAL_DISK, "ephemeral-storage"),
)


def _shape_source(sources: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The annotations of the first source that describes a node shape."""
    for obj in sources:
        annotations = annotations_of(obj)
        if any(k.startswith(wellknown.CAPACITY_ANNOTATION_PREFIX) for k in annotations):
            return annotations
    return {}


def _quantity(annotations: Mapping[str, str], key: str) -> str | None:
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        parse_quantity(raw.strip())
    except QuantityError as err:
        _log.warning("ignoring annotation %s=%r: %s", key, raw, err)
        return None
    return raw.strip()


def node_capacity(annotations: Mapping[str, str]) -> dict[str, str]:
    """Capacity from the scale-from-zero annotations (malformed ones are skipped)."""
    capacity = {"pods": DEFAULT_MAX_PODS}
    for annotation, resource in _CAPACITY_ANNOTATIONS:
        value = _quantity(annotations, annotation)
        if value is not None:
            capacity[resource] = value
    gpus = _quantity(annotations, wellknown.ANNOTATION_CAPACITY_GPU_COUNT)
    gpu_type = annotations.get(wellknown.ANNOTATION_CAPACITY_GPU_TYPE, "").strip()
    if gpus is not None and gpu_type:
        capacity[gpu_type] = gpus
    return capacity


def _pairs(raw: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            pairs[key.strip()] = value.strip()
        else:
            _log.warning("ignoring label %r of %s", item, wellknown.ANNOTATION_CAPACITY_LABELS)
    return pairs


def _taints(raw: str) -> list[JsonObject]:
    taints: list[JsonObject] = []
    for item in filter(None, (part.strip() for part in raw.split(","))):
        try:
            taints.append(dict(Taint.parse(item).to_dict()))
        except TaintError as err:
            _log.warning(
                "ignoring taint %r of %s: %s", item, wellknown.ANNOTATION_CAPACITY_TAINTS, err
            )
    return taints


def build_node(
    name: str,
    provider_id: str,
    *,
    machine: Mapping[str, Any] | None,
    owners: Sequence[Mapping[str, Any]],
    boot_delay: float,
    now: str,
    bootstrap: Mapping[str, Any] | None = None,
) -> JsonObject:
    """The Node a kubelet would register for ``machine`` (or a MachinePool instance, when
    ``machine`` is None and ``owners`` is the pool), configured by the kubeadm ``bootstrap``
    config; see the module docstring."""
    sources = [*([machine] if machine is not None else []), *owners]
    # The deployment before its set: the set's copy of the deployment's annotations may lag,
    # and the deployment is what the autoprovisioner read the shape from.
    shape = _shape_source([*sources[: len(sources) - len(owners)], *reversed(owners)])
    machine_labels = labels_of(machine) if machine is not None else {}
    labels = {
        wellknown.LABEL_HOSTNAME: name,
        wellknown.LABEL_OS: "linux",
        wellknown.LABEL_ARCH: wellknown.ARCH_AMD64,
    }
    instance_type = machine_labels.get(wellknown.LABEL_INSTANCE_TYPE) or nested(
        owners[0] if owners else {},
        "spec",
        "template",
        "metadata",
        "labels",
        wellknown.LABEL_INSTANCE_TYPE,
    )
    if instance_type:
        labels[wellknown.LABEL_INSTANCE_TYPE] = str(instance_type)
    failure_domain = nested(machine, "spec", "failureDomain") if machine is not None else None
    if not failure_domain and owners:
        failure_domain = nested(owners[0], "spec", "template", "spec", "failureDomain")
    if failure_domain:
        labels[wellknown.LABEL_TOPOLOGY_ZONE] = str(failure_domain)
    labels.update(_pairs(shape.get(wellknown.ANNOTATION_CAPACITY_LABELS, "")))
    labels.update({k: v for k, v in machine_labels.items() if k.startswith(_SYNCED_LABEL_PREFIXES)})
    taints = _taints(shape.get(wellknown.ANNOTATION_CAPACITY_TAINTS, ""))
    taints += [t for t in registration_taints(bootstrap) if t not in taints]
    member = any(wellknown.LABEL_KARPENTER_MEMBER in labels_of(obj) for obj in sources)
    if member and not any(t.get("key") == wellknown.TAINT_UNREGISTERED_KEY for t in taints):
        taints.append(
            {"key": wellknown.TAINT_UNREGISTERED_KEY, "effect": wellknown.TAINT_UNREGISTERED_EFFECT}
        )
    capacity, allocatable = kubelet_status(node_capacity(shape), bootstrap)
    owner = machine if machine is not None else (owners[0] if owners else {})
    annotations = {
        ANNOTATION_KUBELET: "true",
        ANNOTATION_BOOT_DELAY: f"{boot_delay:g}",
        "cluster.x-k8s.io/cluster-namespace": namespace_of(owner),
    }
    if machine is not None:
        annotations["cluster.x-k8s.io/machine"] = name_of(machine)
    cluster = nested(owner, "spec", "clusterName")
    if cluster:
        annotations["cluster.x-k8s.io/cluster-name"] = str(cluster)
    version = (nested(machine, "spec", "version") if machine is not None else None) or nested(
        owners[0] if owners else {}, "spec", "template", "spec", "version"
    )
    spec: JsonObject = {"providerID": provider_id}
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": spec,
        "status": {
            "capacity": dict(capacity),
            "allocatable": allocatable,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "KubeletNotReady",
                    "message": "simulated kubelet is starting",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [{"type": "Hostname", "address": name}],
            "nodeInfo": {
                "kubeletVersion": str(version or KUBELET_VERSION),
                "architecture": labels[wellknown.LABEL_ARCH],
                "operatingSystem": labels[wellknown.LABEL_OS],
                "containerRuntimeVersion": "containerd://1.7.0",
            },
        },
    }


class _NodeCreator:
    """What both creators share: the Node cache, and creating a Node once."""

    _primary_attribute = "machines"  # which of ``Owners``' resources is the primary one

    def __init__(
        self,
        management: KubeClient,
        workload: KubeClient,
        caches: Caches,
        clock: Clock,
        settings: EmulationSettings | None,
    ) -> None:
        self.client = management
        self.workload = workload
        self.caches = caches
        self.clock = clock
        self.settings = settings or EmulationSettings()
        self.owners = Owners(caches, self.settings.version)
        self.primary: Resource = getattr(self.owners, self._primary_attribute)

    def _bootstrap_config(self, owners: Sequence[Mapping[str, Any]]) -> JsonObject | None:
        """The kubeadm config the most specific owner's template names, as the kubelet of a
        new Machine gets it; ``None`` when there is none to read (defaults apply)."""
        for owner in owners:
            ref = nested(owner, "spec", "template", "spec", "bootstrap", "configRef")
            if not isinstance(ref, Mapping) or ref.get("kind") not in KUBEADM_KINDS:
                continue
            group = str(ref.get("apiGroup") or str(ref.get("apiVersion") or "").partition("/")[0])
            if group and group != BOOTSTRAP_GROUP:
                continue
            kind, name = str(ref["kind"]), str(ref.get("name") or "")
            try:
                versions = self.client.served_versions(BOOTSTRAP_GROUP)
            except ApiError:
                return None
            for version in versions:
                resource = Resource(BOOTSTRAP_GROUP, version, kind.lower() + "s", kind, True)
                try:
                    return self.client.get(resource, name, namespace_of(owner) or None)
                except ApiError:
                    continue
            return None
        return None

    def _has_node(self, provider_id: str) -> bool:
        return bool(self.caches.store(NODES, WORKLOAD).by_index(BY_PROVIDER_ID, provider_id))

    def _create(
        self,
        name: str,
        provider_id: str,
        machine: Mapping[str, Any] | None,
        owners: Sequence[Mapping[str, Any]],
    ) -> None:
        sources = [*([machine] if machine is not None else []), *owners]
        boot = delay_from(sources, ANNOTATION_BOOT_DELAY, self.settings.boot_delay)
        node = build_node(
            name,
            provider_id,
            machine=machine,
            owners=owners,
            boot_delay=boot,
            now=format_timestamp(self.clock.now()),
            bootstrap=self._bootstrap_config(owners),
        )
        try:
            self.workload.create(NODES, node)
        except AlreadyExists:
            # Usually our own earlier create, not in the cache yet; a clash is worth a word.
            try:
                existing = self.workload.get(NODES, name)
            except NotFound:
                return
            if nested(existing, "spec", "providerID") != provider_id:
                _log.warning("Node %s exists for another provider ID; not replacing it", name)


class MachineNodeCreator(_NodeCreator):
    """A Node per provisioned Machine (MachinePool Machines excepted)."""

    name = "sim.kubelet.machine-nodes"
    primary_cluster = MANAGEMENT
    _primary_attribute = "machines"

    def watches(self) -> Sequence[Watch]:
        return [Watch(NODES, to_keys=self._node_to_machines, cluster=WORKLOAD)]

    def reads(self) -> Sequence[tuple[Any, str]]:
        return [
            (self.owners.machine_sets, MANAGEMENT),
            (self.owners.deployments, MANAGEMENT),
            (self.owners.machine_pools, MANAGEMENT),
        ]

    def _node_to_machines(self, node: JsonObject) -> Iterable[Key]:
        provider_id = nested(node, "spec", "providerID")
        if not isinstance(provider_id, str) or not provider_id:
            return []
        store = self.caches.store(self.primary, MANAGEMENT)
        return [key_of(m) for m in store.by_index(BY_PROVIDER_ID, provider_id)]

    def reconcile(self, key: Key) -> Result:
        machine = self.caches.store(self.primary, MANAGEMENT).get(key)
        if machine is None or is_deleting(machine) or is_paused(machine):
            return DONE
        provider_id = nested(machine, "spec", "providerID")
        if not isinstance(provider_id, str) or not provider_id or failure_of(machine):
            return DONE
        if controller_key(machine, "MachinePool") is not None or self._has_node(provider_id):
            return DONE
        if handled_by_capa(self.settings, machine):
            return DONE  # the CAPA emulation registers it, sized from EC2 (capa.py)
        self._create(name_of(machine), provider_id, machine, self.owners.of(machine))
        return DONE


class MachinePoolNodeCreator(_NodeCreator):
    """A Node per instance a MachinePool lists, named after the instance."""

    name = "sim.kubelet.machinepool-nodes"
    primary_cluster = MANAGEMENT
    _primary_attribute = "machine_pools"

    def watches(self) -> Sequence[Watch]:
        return [Watch(NODES, to_keys=self._node_to_pools, cluster=WORKLOAD)]

    def reads(self) -> Sequence[tuple[Any, str]]:
        return [(self.owners.machines, MANAGEMENT)]

    def _node_to_pools(self, node: JsonObject) -> Iterable[Key]:
        provider_id = nested(node, "spec", "providerID")
        if not isinstance(provider_id, str) or not provider_id:
            return []
        store = self.caches.store(self.primary, MANAGEMENT)
        return [key_of(mp) for mp in store.by_index(BY_PROVIDER_ID_LIST, provider_id)]

    def reconcile(self, key: Key) -> Result:
        pool = self.caches.store(self.primary, MANAGEMENT).get(key)
        if pool is None or is_deleting(pool) or is_paused(pool):
            return DONE
        ids = nested(pool, "spec", "providerIDList")
        machines = self.caches.store(self.owners.machines, MANAGEMENT)
        for provider_id in ids if isinstance(ids, list) else []:
            if not isinstance(provider_id, str) or self._has_node(provider_id):
                continue
            machine = next(iter(machines.by_index(BY_PROVIDER_ID, provider_id)), None)
            if machine is not None and is_deleting(machine):
                continue
            self._create(provider_id.rpartition("/")[2], provider_id, machine, [pool])
        return DONE


class NodeReadiness:
    """Turns the stand-in's Nodes ``Ready`` once their boot delay has passed."""

    name = "sim.kubelet.node-ready"
    primary = NODES
    primary_cluster = WORKLOAD

    def __init__(
        self, workload: KubeClient, caches: Caches, clock: Clock, settings: EmulationSettings
    ) -> None:
        self.workload = workload
        self.caches = caches
        self.clock = clock
        self.settings = settings

    def watches(self) -> Sequence[Watch]:
        return []

    def reads(self) -> Sequence[tuple[Any, str]]:
        return []

    def reconcile(self, key: Key) -> Result:
        node = self.caches.store(NODES, WORKLOAD).get(key)
        if node is None or is_deleting(node) or node_is_ready(node):
            return DONE
        if annotations_of(node).get(ANNOTATION_KUBELET) != "true":
            return DONE
        now = self.clock.now()
        boot = delay_from([node], ANNOTATION_BOOT_DELAY, self.settings.boot_delay)
        ready_at = (created_at(node) or now) + timedelta(seconds=boot)
        if now < ready_at:
            return Result(requeue_after=(ready_at - now).total_seconds())
        stamp = format_timestamp(now)
        conditions = [
            dict(c)
            for c in nested(node, "status", "conditions") or []
            if isinstance(c, Mapping) and c.get("type") != "Ready"
        ]
        conditions.append(
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "simulated kubelet is posting ready status",
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
            }
        )
        # No resourceVersion: only this stand-in writes Node conditions in the simulator, and a
        # conflict with a label write by registration would only delay the Node.
        patch = {"status": {"conditions": conditions}}
        try:
            self.workload.patch(NODES, name_of(node), patch, subresource="status")
        except NotFound:
            return DONE
        return DONE
