"""Wiring: the emulated Cluster API controllers, added to a ``Manager`` in one call.

Tests of the autoprovisioner (the ``generic_capi`` plugin above all) want CAPI to answer their
scale subresource writes with Machines, providerIDs and Nodes, under the stepped driver, without
knowing which controllers that takes or which caches they need. ``add_capi_emulation`` adds
them all, in the order a pass should run them (deployments before sets before Machines), and
registers the owner index the set lookups use.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from typing import Any

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.indexes import BY_OWNER_UID, by_owner_uid
from karpenter_capi.core.runtime.controller import MANAGEMENT, Caches, Controller
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.sim.capi.bootstrap import KubeadmBootstrapController
from karpenter_capi.sim.capi.machine import MachineController
from karpenter_capi.sim.capi.machinedeployment import MachineDeploymentController
from karpenter_capi.sim.capi.machinepool import MachinePoolController
from karpenter_capi.sim.capi.machineset import MachineSetController
from karpenter_capi.sim.capi.nodes import MachineNodeCreator, MachinePoolNodeCreator, NodeReadiness
from karpenter_capi.sim.capi.objects import capi_resources
from karpenter_capi.sim.capi.settings import EmulationSettings
from karpenter_capi.sim.capi.topology import TopologyController


def capi_controllers(
    management: KubeClient,
    workload: KubeClient,
    caches: Caches,
    clock: Clock,
    settings: EmulationSettings | None = None,
) -> list[Controller]:
    """The emulation's controllers, in run order, for a caller that adds them itself.

    ``management`` is where the Cluster API objects live, ``workload`` where the Nodes do (the
    same client for a single cluster). The topology controller (``topology.py``) always
    runs, as in Cluster API; it only acts on Clusters with ``spec.topology``. With
    ``settings.nodes`` the kubelet stand-in (``nodes.py``) is included; with
    ``settings.kubeadm_bootstrap`` the bootstrap step (``bootstrap.py``), with
    ``settings.aws_ec2`` stock CAPA (``capa.py``).
    """
    settings = settings or EmulationSettings()
    # One seeded generator per controller: names do not depend on which controller ran first.
    seed = settings.seed
    controllers: list[Controller] = [
        # First: a ClusterClass Cluster's replicas win before the deployment acts on another.
        TopologyController(management, caches, clock, settings),
        MachineDeploymentController(management, caches, clock, settings),
        MachineSetController(management, caches, clock, settings, rand=random.Random(seed)),
        MachineController(management, workload, caches, clock, settings),
        MachinePoolController(
            management,
            workload,
            caches,
            clock,
            settings,
            rand=random.Random(None if seed is None else seed + 1),
        ),
    ]
    if settings.kubeadm_bootstrap:
        controllers.append(KubeadmBootstrapController(management, caches, clock, settings))
    if settings.aws_ec2 is not None:
        from karpenter_capi.sim.capi.capa import CapaMachineController

        controllers.append(CapaMachineController(management, workload, caches, clock, settings))
    if settings.nodes:
        controllers += [
            MachineNodeCreator(management, workload, caches, clock, settings),
            MachinePoolNodeCreator(management, workload, caches, clock, settings),
            NodeReadiness(workload, caches, clock, settings),
        ]
    return controllers


def add_capi_emulation(
    manager: Manager, settings: EmulationSettings | None = None, **overrides: Any
) -> list[Controller]:
    """Add the emulated CAPI controllers to ``manager`` (before a driver takes it) and return
    them.

    CAPI objects are read and written through ``manager.management``, Nodes through
    ``manager.client``. ``overrides`` are ``EmulationSettings`` fields, for the common case::

        add_capi_emulation(manager, provision_delay=30, nodes=True)
    """
    settings = dataclasses.replace(settings or EmulationSettings(), **overrides)
    controllers = capi_controllers(
        manager.management, manager.client, manager, manager.clock, settings
    )
    _, machine_sets, _, _ = capi_resources(settings.version)
    # Another controller may have registered the same index on the shared cache already.
    with contextlib.suppress(ValueError):
        manager.add_indexer(machine_sets, BY_OWNER_UID, by_owner_uid, MANAGEMENT)
    manager.add(*controllers)
    return controllers
