"""Wiring: the workload controllers, added to a ``Manager`` in one call.

Simulations and tests want Deployments, DaemonSets and pods to behave as in a cluster (pods
created, started, stopped, replaced) without knowing which controllers that takes, which
caches they need or in which order a pass should run them: owners first (Deployments make
ReplicaSets, which create pods), then the kubelet stand-in (which starts them). Mirrors
``sim.capi.add_capi_emulation``.

PodDisruptionBudget status needs no controller here: the in-memory API server keeps every
budget's ``currentHealthy``/``desiredHealthy``/``disruptionsAllowed`` current inside each pod,
budget and scalable-controller write (``sim.apiserver.disruption_budgets``), from Ready pods,
as kube's disruption controller does.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.indexes import BY_OWNER_UID, by_owner_uid
from karpenter_capi.core.kube.resources import PODS, REPLICASETS
from karpenter_capi.core.runtime.controller import WORKLOAD, Caches, Controller
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.sim.workloads.daemonsets import DaemonSetController
from karpenter_capi.sim.workloads.deployments import DeploymentController
from karpenter_capi.sim.workloads.kubelet import PodKubelet
from karpenter_capi.sim.workloads.replicasets import ReplicaSetController
from karpenter_capi.sim.workloads.settings import WorkloadSettings


def workload_controllers(
    client: KubeClient,
    caches: Caches,
    clock: Clock,
    settings: WorkloadSettings | None = None,
) -> list[Controller]:
    """The workload controllers, in run order, for a caller that adds them itself."""
    settings = settings or WorkloadSettings()
    return [
        DeploymentController(client, caches, clock, settings),
        ReplicaSetController(client, caches, clock, settings),
        DaemonSetController(client, caches, clock, settings),
        PodKubelet(client, caches, clock, settings),
    ]


def add_workload_emulation(
    manager: Manager, settings: WorkloadSettings | None = None, **overrides: Any
) -> list[Controller]:
    """Add the workload controllers to ``manager`` (before a driver takes it) and return them.

    Everything lives in the workload cluster (``manager.client``). ``overrides`` are
    ``WorkloadSettings`` fields::

        add_workload_emulation(manager, start_delay=5)
    """
    settings = dataclasses.replace(settings or WorkloadSettings(), **overrides)
    controllers = workload_controllers(manager.client, manager, manager.clock, settings)
    manager.add(*controllers)
    # Owner lookups go through this index; another component may have registered it already.
    for resource in (PODS, REPLICASETS):
        with contextlib.suppress(ValueError):
            manager.add_indexer(resource, BY_OWNER_UID, by_owner_uid, WORKLOAD)
    return controllers
