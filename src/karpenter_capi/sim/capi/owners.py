"""A Machine's scalable resource, for settings that are written on the resource, not the Machine.

Delays, failure injection and the node shape (scale-from-zero annotations) are annotations of
the MachineDeployment, MachineSet or MachinePool a user writes, while the Machine controller
and the kubelet stand-in act on Machines. This module walks from a Machine to its owners
through the informer caches: its controlling MachineSet, that set's MachineDeployment (by
controller reference, else the ``cluster.x-k8s.io/deployment-name`` label), or its
MachinePool; and back, from an owner's event to the Machines it concerns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from karpenter_capi.core.kube.cache import make_key
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.indexes import BY_MACHINE_DEPLOYMENT
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.core.runtime.controller import MANAGEMENT, Caches, Key, Watch
from karpenter_capi.sim.capi.objects import (
    LABEL_DEPLOYMENT_NAME,
    annotations_of,
    capi_resources,
    controlled_by,
    controller_key,
    key_of,
    labels_of,
    namespace_of,
)
from karpenter_capi.sim.capi.settings import SIM_DOMAIN


class Owners:
    """Owner lookups over the caches of the CAPI resources at one served ``version``."""

    def __init__(self, caches: Caches, version: str) -> None:
        self.caches = caches
        self.deployments, self.machine_sets, self.machines, self.machine_pools = capi_resources(
            version
        )

    def _get(self, resource: Resource, key: str | None) -> JsonObject | None:
        if key is None:
            return None
        return self.caches.store(resource, MANAGEMENT).get(key)

    def of(self, machine: Mapping[str, Any]) -> list[JsonObject]:
        """The Machine's owners, most specific first: MachineSet, MachineDeployment; or
        MachinePool."""
        found: list[JsonObject] = []
        ms = self._get(self.machine_sets, controller_key(machine, "MachineSet"))
        if ms is not None:
            found.append(ms)
        md_key = controller_key(ms, "MachineDeployment") if ms is not None else None
        if md_key is None:
            deployment = labels_of(machine).get(LABEL_DEPLOYMENT_NAME)
            if deployment:
                md_key = make_key(deployment, namespace_of(machine) or None)
        md = self._get(self.deployments, md_key)
        if md is not None:
            found.append(md)
        mp = self._get(self.machine_pools, controller_key(machine, "MachinePool"))
        if mp is not None:
            found.append(mp)
        return found

    def watches(self, *, only_sim_annotations: bool) -> list[Watch]:
        """Watches that wake a Machine controller when one of its owners changes.

        With ``only_sim_annotations`` an owner's event is mapped only when the owner carries an
        annotation of the emulation (both sides of an update are mapped, so adding and removing
        one both count): other changes of an owner do not concern its Machines' lifecycle.
        """

        def relevant(obj: Mapping[str, Any]) -> bool:
            if not only_sim_annotations:
                return True
            return any(k.startswith(SIM_DOMAIN) for k in annotations_of(obj))

        def controlled(owner: JsonObject) -> Iterable[Key]:
            if not relevant(owner):
                return []
            store = self.caches.store(self.machines, MANAGEMENT)
            return [key_of(m) for m in controlled_by(store, owner)]

        def by_deployment(md: JsonObject) -> Iterable[Key]:
            if not relevant(md):
                return []
            store = self.caches.store(self.machines, MANAGEMENT)
            try:
                machines = store.by_index(BY_MACHINE_DEPLOYMENT, key_of(md))
            except KeyError:
                name = key_of(md).rpartition("/")[2]
                machines = [
                    m
                    for m in store.list()
                    if labels_of(m).get(LABEL_DEPLOYMENT_NAME) == name
                    and namespace_of(m) == namespace_of(md)
                ]
            return [key_of(m) for m in machines]

        return [
            Watch(self.machine_sets, to_keys=controlled, cluster=MANAGEMENT),
            Watch(self.deployments, to_keys=by_deployment, cluster=MANAGEMENT),
            Watch(self.machine_pools, to_keys=controlled, cluster=MANAGEMENT),
        ]
