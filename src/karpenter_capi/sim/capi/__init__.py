"""Cluster API emulated over the in-memory API: the simulator's CAPI controllers.

``add_capi_emulation(manager, ...)`` adds the Cluster topology, MachineDeployment, MachineSet,
Machine and MachinePool controllers (and, with ``nodes=True``, a minimal kubelet stand-in) to a
``Manager``; run it with the stepped driver and a ``FakeClock``. See docs/capi-emulation.md.
"""

from karpenter_capi.sim.capi.emulation import add_capi_emulation, capi_controllers
from karpenter_capi.sim.capi.machine import MachineController, provider_id_for
from karpenter_capi.sim.capi.machinedeployment import MachineDeploymentController
from karpenter_capi.sim.capi.machinepool import MachinePoolController
from karpenter_capi.sim.capi.machineset import MachineSetController, delete_priority
from karpenter_capi.sim.capi.nodes import (
    MachineNodeCreator,
    MachinePoolNodeCreator,
    NodeReadiness,
    build_node,
)
from karpenter_capi.sim.capi.settings import (
    ANNOTATION_BOOT_DELAY,
    ANNOTATION_DELETE_DELAY,
    ANNOTATION_KUBELET,
    ANNOTATION_MACHINE_POOL_MACHINES,
    ANNOTATION_NEVER_PROVISION,
    ANNOTATION_OUT_OF_CAPACITY,
    ANNOTATION_PROVISION_DELAY,
    ANNOTATION_SHAPE,
    ANNOTATION_VM_FAILURE,
    PROVIDER_ID_SCHEME,
    EmulationSettings,
)
from karpenter_capi.sim.capi.topology import TopologyController

__all__ = [
    "ANNOTATION_BOOT_DELAY",
    "ANNOTATION_DELETE_DELAY",
    "ANNOTATION_KUBELET",
    "ANNOTATION_MACHINE_POOL_MACHINES",
    "ANNOTATION_NEVER_PROVISION",
    "ANNOTATION_OUT_OF_CAPACITY",
    "ANNOTATION_PROVISION_DELAY",
    "ANNOTATION_SHAPE",
    "ANNOTATION_VM_FAILURE",
    "PROVIDER_ID_SCHEME",
    "EmulationSettings",
    "MachineController",
    "MachineDeploymentController",
    "MachineNodeCreator",
    "MachinePoolController",
    "MachinePoolNodeCreator",
    "MachineSetController",
    "NodeReadiness",
    "TopologyController",
    "add_capi_emulation",
    "build_node",
    "capi_controllers",
    "delete_priority",
    "provider_id_for",
]
