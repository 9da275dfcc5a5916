"""Workload emulation for the simulated cluster: Deployments, ReplicaSets, DaemonSets, a kubelet.

The in-memory API server runs no workload controller, so a Deployment there is only an object
and a bound pod stays Pending forever. These controllers (run by ``core.runtime``, stepped on a
``FakeClock`` in tests) make workloads behave as the autoprovisioner expects of a real
cluster: pods created and replaced by their owners, started on Ready Nodes, finished when
deleted, removed with their Node.
"""

from karpenter_capi.sim.workloads.daemonsets import DaemonSetController
from karpenter_capi.sim.workloads.deployments import DeploymentController
from karpenter_capi.sim.workloads.emulation import add_workload_emulation, workload_controllers
from karpenter_capi.sim.workloads.kubelet import PodKubelet
from karpenter_capi.sim.workloads.replicasets import ReplicaSetController
from karpenter_capi.sim.workloads.settings import ANNOTATION_START_DELAY, WorkloadSettings

__all__ = [
    "ANNOTATION_START_DELAY",
    "DaemonSetController",
    "DeploymentController",
    "PodKubelet",
    "ReplicaSetController",
    "WorkloadSettings",
    "add_workload_emulation",
    "workload_controllers",
]
