"""Fleet mode: one controller for every workload cluster of a Cluster API management cluster.

``Fleet`` (``core.fleet.fleet``) discovers the Clusters to serve, reaches each through its
kubeconfig Secret and runs a whole ``Operator`` per cluster; see that module for the public
surface. The pieces: ``discovery`` (Clusters and kubeconfig Secrets), ``kubeconfigs`` (reading
a Secret), ``scoped`` (the management cluster as one Cluster may see it), ``members`` (one
served cluster), ``metrics`` (one endpoint, a ``cluster`` label), ``stepped`` (virtual time),
``building`` (members built off the sync thread), ``reports`` (Events on Clusters, once per
change), ``guard`` (a NodeClass launches into its own Cluster), ``lookup`` (one Cluster by name);
``sharding`` and ``fencing`` share the clusters among replicas through Leases.
"""

from karpenter_capi.core.fleet.discovery import ObservedCluster, cluster_key
from karpenter_capi.core.fleet.fleet import Connect, Fleet, FleetOptions, ServeEverything
from karpenter_capi.core.fleet.kubeconfigs import Kubeconfig, KubeconfigProblem, secret_name
from karpenter_capi.core.fleet.members import Member
from karpenter_capi.core.fleet.metrics import CLUSTER, FleetMetrics
from karpenter_capi.core.fleet.scoped import CLUSTER_NAME_LABEL, ScopedClient
from karpenter_capi.core.fleet.stepped import SteppedFleet

__all__ = [
    "CLUSTER",
    "CLUSTER_NAME_LABEL",
    "Connect",
    "Fleet",
    "FleetMetrics",
    "FleetOptions",
    "Kubeconfig",
    "KubeconfigProblem",
    "Member",
    "ObservedCluster",
    "ScopedClient",
    "ServeEverything",
    "SteppedFleet",
    "cluster_key",
    "secret_name",
]
