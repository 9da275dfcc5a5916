"""Topology spread, pod affinity and pod anti-affinity, as the scheduling simulator honours them.

The solver decides where pods go before any node exists, so it cannot ask kube-scheduler whether a
placement keeps a ``topologySpreadConstraint`` or a required pod (anti-)affinity term. If it guessed
differently from kube-scheduler the pods it provisioned for would stay Pending (or land on nodes
that break the constraint), so this package answers the question the way Karpenter's
``pkg/controllers/provisioning/scheduling/topology.go`` does: every constraint becomes a *topology
group* that counts matching pods per domain (``SELECT count(*) ... GROUP BY <topologyKey>``), and a
placement narrows the node's requirements to the domains the counts still allow.

What is enforced, and how:

* ``topologySpreadConstraints`` with ``whenUnsatisfiable: DoNotSchedule`` (the default), on any
  topology key: ``labelSelector`` plus ``matchLabelKeys``, ``maxSkew``, ``minDomains`` (fewer
  eligible domains than ``minDomains`` makes the global minimum 0), ``nodeAffinityPolicy`` (Honor,
  the default: only domains the pod's requirements allow count toward the global minimum, where
  those are the ``pod_requirements`` passed in, i.e. the node-affinity term being tried, as in
  Karpenter; and only pods on nodes matching the pod's ``nodeSelector`` and any of its required
  node-affinity terms are counted) and
  ``nodeTaintsPolicy`` (Honor: domains whose nodes all carry taints the pod does not tolerate do
  not count toward the minimum, and pods on such nodes are not counted). Only pods in the pod's own
  namespace count. For ``kubernetes.io/hostname`` the global minimum is always 0, because the
  solver can always open a new node.
* Required pod affinity: a domain is allowed when it already holds a selected pod; when no selected
  pod exists anywhere the pod may bootstrap the group only if its own term selects it.
* Required pod anti-affinity, both ways: a pod may not enter a domain holding a pod its term
  selects, and may not enter a domain holding a pod (existing, or placed earlier in this solve)
  whose required anti-affinity term selects it.

Every key the pod's own constraints use comes back pinned to one domain (the least loaded by its
spreads, then by name), because a placement counts only where its domain is known.

Preferences are enforced as requirements until the solver gives them up: ``ScheduleAnyway``
spreads count like ``DoNotSchedule`` ones and preferred pod (anti-)affinity terms like required
ones (``PodSpec.strict_affinity``), as Karpenter's topology counts them. The solver owns
relaxation (``preferences.relax``), which hands over a new ``PodSpec`` without the preference;
:func:`schedule_anyway_constraints` lists the soft spreads. A group first seen mid-solve (a
relaxed pod's) is counted from the existing pods and every placement recorded so far.

A pod is given as a parsed ``PodSpec`` (``core.scheduling.podspec``), whose typed terms and
``topology_signature`` string (its namespace, labels and constraints) were made once when it was
parsed; existing pods too. Identical constraints shared by many pods (the replicas of a
Deployment) are one group with one set of counts, and a pod's view of the groups is cached by
that key, so the per-pod cost is a few dictionary look-ups.

The package is split as upstream splits its scheduler's topology: ``_domains`` (which domain a
node is in), ``_filter`` (which nodes a spread counts), ``_group`` (the counts per domain, and a
pod shape's view of the groups), ``_narrowing`` (the domains each kind of constraint allows) and
``_topology`` (the :class:`Topology` the solver talks to).
"""

from karpenter_capi.core.scheduling.topology._domains import NodeInfo
from karpenter_capi.core.scheduling.topology._existing import ExistingPods
from karpenter_capi.core.scheduling.topology._topology import Topology, schedule_anyway_constraints
from karpenter_capi.core.values.refusal import Refusal

__all__ = [
    "ExistingPods",
    "NodeInfo",
    "Refusal",
    "Topology",
    "schedule_anyway_constraints",
]
