"""Every well-known label, annotation, taint and finalizer name, in one place.

The controller, the plugins and the simulator must agree byte for byte on these strings, and most
of them are shared with upstream Karpenter (``pkg/apis/v1/labels.go``), Kubernetes
(``k8s.io/api/core/v1`` well-known labels), Cluster API and the cluster-autoscaler's
scale-from-zero annotations. A typo in one copy would silently split the contract, so every other
module imports the constant from here instead of spelling it out.

The restricted-domain rules mirror Karpenter's ``IsRestrictedLabel`` (upstream v1.9 and later): a
NodePool may not set or require labels in the domain Karpenter reserves (``karpenter.sh``), except
the well-known labels it understands, nor ``kubernetes.io/hostname``.
"""

from __future__ import annotations

from typing import Final

# --- API groups ---------------------------------------------------------------------------------

KARPENTER_GROUP: Final = "karpenter.sh"
KARPENTER_VERSION: Final = "v1"
KARPENTER_API_VERSION: Final = f"{KARPENTER_GROUP}/{KARPENTER_VERSION}"
NODECLASS_GROUP: Final = "karpenter.cluster.x-k8s.io"
NODECLASS_VERSION: Final = "v1alpha1"
NODECLASS_API_VERSION: Final = f"{NODECLASS_GROUP}/{NODECLASS_VERSION}"
NODECLASS_KIND: Final = "ClusterAPINodeClass"
CAPI_GROUP: Final = "cluster.x-k8s.io"

# --- Kubernetes well-known node labels ----------------------------------------------------------

LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
LABEL_ARCH: Final = "kubernetes.io/arch"
LABEL_OS: Final = "kubernetes.io/os"
LABEL_INSTANCE_TYPE: Final = "node.kubernetes.io/instance-type"
LABEL_TOPOLOGY_ZONE: Final = "topology.kubernetes.io/zone"
LABEL_TOPOLOGY_REGION: Final = "topology.kubernetes.io/region"
LABEL_WINDOWS_BUILD: Final = "node.kubernetes.io/windows-build"

# Deprecated beta aliases that older manifests and pods still use.
LABEL_ARCH_BETA: Final = "beta.kubernetes.io/arch"
LABEL_OS_BETA: Final = "beta.kubernetes.io/os"
LABEL_INSTANCE_TYPE_BETA: Final = "beta.kubernetes.io/instance-type"
LABEL_ZONE_FAILURE_DOMAIN_BETA: Final = "failure-domain.beta.kubernetes.io/zone"
LABEL_REGION_FAILURE_DOMAIN_BETA: Final = "failure-domain.beta.kubernetes.io/region"

# Pod requirements written against an alias are translated to the stable label before solving,
# exactly like Karpenter's ``NormalizedLabels``.
NORMALIZED_LABELS: Final[dict[str, str]] = {
    LABEL_ZONE_FAILURE_DOMAIN_BETA: LABEL_TOPOLOGY_ZONE,
    LABEL_REGION_FAILURE_DOMAIN_BETA: LABEL_TOPOLOGY_REGION,
    LABEL_ARCH_BETA: LABEL_ARCH,
    LABEL_OS_BETA: LABEL_OS,
    LABEL_INSTANCE_TYPE_BETA: LABEL_INSTANCE_TYPE,
}

ARCH_AMD64: Final = "amd64"
ARCH_ARM64: Final = "arm64"

# --- Karpenter labels ---------------------------------------------------------------------------

LABEL_NODEPOOL: Final = "karpenter.sh/nodepool"
LABEL_CAPACITY_TYPE: Final = "karpenter.sh/capacity-type"
LABEL_REGISTERED: Final = "karpenter.sh/registered"
LABEL_INITIALIZED: Final = "karpenter.sh/initialized"

CAPACITY_TYPE_ON_DEMAND: Final = "on-demand"
CAPACITY_TYPE_SPOT: Final = "spot"
CAPACITY_TYPE_RESERVED: Final = "reserved"
CAPACITY_TYPES: Final = (CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, CAPACITY_TYPE_RESERVED)

# --- Karpenter annotations, taints, finalizer ---------------------------------------------------

ANNOTATION_DO_NOT_DISRUPT: Final = "karpenter.sh/do-not-disrupt"
ANNOTATION_NODEPOOL_HASH: Final = "karpenter.sh/nodepool-hash"
ANNOTATION_NODEPOOL_HASH_VERSION: Final = "karpenter.sh/nodepool-hash-version"
ANNOTATION_DO_NOT_SYNC_TAINTS: Final = "karpenter.sh/do-not-sync-taints"
ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP: Final = "karpenter.sh/nodeclaim-termination-timestamp"

TAINT_UNREGISTERED_KEY: Final = "karpenter.sh/unregistered"
TAINT_UNREGISTERED_EFFECT: Final = "NoExecute"
TAINT_DISRUPTED_KEY: Final = "karpenter.sh/disrupted"
TAINT_DISRUPTED_EFFECT: Final = "NoSchedule"

FINALIZER_TERMINATION: Final = "karpenter.sh/termination"

# This project's own: the pending pods a NodeClaim was launched for (``namespace/name``, comma
# separated), so a restarted controller sends them back to it instead of launching again.
ANNOTATION_NOMINATED_PODS: Final = "karpenter.cluster.x-k8s.io/nominated-pods"
# On a NodeClaim whose machine the cloud announced it will take (core.interruption): the notice's
# kind, and when the machine goes (RFC 3339, empty when the notice gave no time). Kept on the
# object so a restarted controller still knows the deadline and keeps its pods provisioned for.
ANNOTATION_INTERRUPTION: Final = "karpenter.cluster.x-k8s.io/interruption"
ANNOTATION_INTERRUPTION_DEADLINE: Final = "karpenter.cluster.x-k8s.io/interruption-deadline"
# Also this project's own: the round a NodeClaim was created in and its place in that round's
# plan (``<plan id>/<index>/<count>``), and on the round's first NodeClaim the rest of the plan
# (JSON: ``[[nodepool, "ns/pod,ns/pod"], ...]`` for indexes 1 on), so a controller killed part
# way through creating a round's NodeClaims is followed by one that creates the missing ones
# instead of solving their pods afresh.
ANNOTATION_PLAN: Final = "karpenter.cluster.x-k8s.io/plan"
ANNOTATION_PLAN_REST: Final = "karpenter.cluster.x-k8s.io/plan-rest"
PROVISIONER_NOTES: Final = frozenset(
    {ANNOTATION_NOMINATED_PODS, ANNOTATION_PLAN, ANNOTATION_PLAN_REST}
)
"""The annotations the provisioner writes on a NodeClaim for itself: not copied to its Node."""

# --- Cluster API --------------------------------------------------------------------------------

ANNOTATION_CAPI_DELETE_MACHINE: Final = "cluster.x-k8s.io/delete-machine"
ANNOTATION_CAPI_PAUSED: Final = "cluster.x-k8s.io/paused"
LABEL_CAPI_CLUSTER_NAME: Final = "cluster.x-k8s.io/cluster-name"
# Opts a MachineDeployment/MachineSet/MachinePool into being scaled by us.
LABEL_KARPENTER_MEMBER: Final = "node.cluster.x-k8s.io/karpenter-member"
ANNOTATION_AUTOSCALER_MIN_SIZE: Final = (
    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
)
ANNOTATION_AUTOSCALER_MAX_SIZE: Final = (
    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
)

# cluster-autoscaler scale-from-zero annotations: the node shape of a scalable resource that has
# no Machine yet to look at.
CAPACITY_ANNOTATION_PREFIX: Final = "capacity.cluster-autoscaler.kubernetes.io/"
ANNOTATION_CAPACITY_CPU: Final = CAPACITY_ANNOTATION_PREFIX + "cpu"
ANNOTATION_CAPACITY_MEMORY: Final = CAPACITY_ANNOTATION_PREFIX + "memory"
ANNOTATION_CAPACITY_EPHEMERAL_DISK: Final = CAPACITY_ANNOTATION_PREFIX + "ephemeral-disk"
ANNOTATION_CAPACITY_MAX_PODS: Final = CAPACITY_ANNOTATION_PREFIX + "maxPods"
ANNOTATION_CAPACITY_GPU_COUNT: Final = CAPACITY_ANNOTATION_PREFIX + "gpu-count"
ANNOTATION_CAPACITY_GPU_TYPE: Final = CAPACITY_ANNOTATION_PREFIX + "gpu-type"
ANNOTATION_CAPACITY_LABELS: Final = CAPACITY_ANNOTATION_PREFIX + "labels"
ANNOTATION_CAPACITY_TAINTS: Final = CAPACITY_ANNOTATION_PREFIX + "taints"

# --- Restricted label domains -------------------------------------------------------------------

# Karpenter reserves its own domain; since v1.9 upstream no longer restricts kubernetes.io/k8s.io.
RESTRICTED_LABEL_DOMAINS: Final = frozenset({KARPENTER_GROUP})
# Labels in restricted domains that Karpenter understands and lets NodePools constrain.
WELL_KNOWN_LABELS: Final = frozenset(
    {
        LABEL_NODEPOOL,
        LABEL_TOPOLOGY_ZONE,
        LABEL_TOPOLOGY_REGION,
        LABEL_INSTANCE_TYPE,
        LABEL_ARCH,
        LABEL_OS,
        LABEL_CAPACITY_TYPE,
        LABEL_WINDOWS_BUILD,
    }
)
# Labels that would break provisioning if a NodePool set them.
RESTRICTED_LABELS: Final = frozenset({LABEL_HOSTNAME})
# Requirements on these labels must name at least one value Karpenter knows.
WELL_KNOWN_VALUES: Final[dict[str, frozenset[str]]] = {
    LABEL_CAPACITY_TYPE: frozenset(CAPACITY_TYPES),
}


def label_domain(key: str) -> str:
    """The prefix of a qualified label key (``""`` when the key has no ``/``)."""
    prefix, slash, _ = key.partition("/")
    return prefix if slash else ""


def restricted_label_reason(key: str) -> str | None:
    """Why a NodePool may not use ``key`` as a label or requirement, or None when it may.

    Upstream's ``IsRestrictedLabel``: well-known labels pass; keys in (a sub-domain of) a
    restricted domain and the restricted labels do not.
    """
    if key in WELL_KNOWN_LABELS:
        return None
    domain = label_domain(key)
    in_restricted_domain = any(
        domain == restricted or domain.endswith("." + restricted)
        for restricted in RESTRICTED_LABEL_DOMAINS
    )
    if in_restricted_domain or key in RESTRICTED_LABELS:
        known = ", ".join(sorted(WELL_KNOWN_LABELS))
        domains = ", ".join(sorted(RESTRICTED_LABEL_DOMAINS))
        return (
            f"using label {key} is not allowed as it might interfere with the internal "
            f"provisioning logic; specify a well known label: [{known}], or a custom label that "
            f"does not use a restricted domain: [{domains}]"
        )
    return None
