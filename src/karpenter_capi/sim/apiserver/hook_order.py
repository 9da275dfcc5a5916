"""The in-memory API server's write hooks, in the order they run: the one place to read it.

Every write the engine commits is handed to these hooks in this order (and every other phase,
admission and deletion, consults them in the same order; see ``write_hook``). A hook's own
writes go through the engine too, so they run the whole list again, depth first.
"""

from __future__ import annotations

from karpenter_capi.sim.apiserver.apiextensions import CustomResourceDefinitions
from karpenter_capi.sim.apiserver.capa_webhooks import CapaAwsMachineWebhooks
from karpenter_capi.sim.apiserver.crd_cleanup import CrdCleanup
from karpenter_capi.sim.apiserver.disruption_budgets import DisruptionBudgets
from karpenter_capi.sim.apiserver.garbage_collector import GarbageCollector
from karpenter_capi.sim.apiserver.namespace_lifecycle import NamespaceLifecycle
from karpenter_capi.sim.apiserver.pool_admission import PoolAdmission
from karpenter_capi.sim.apiserver.write_hook import HookFactory

# Why this order:
# - CustomResourceDefinitions first: a CRD written is served (or a deleted one unserved, its
#   leftover objects dropped) before anything else reacts to the write, and its admission of
#   custom objects runs before any other hook prepares them.
# - CAPA's AWSMachine webhooks right after: kube-apiserver calls admission webhooks on the
#   object the schema admitted, before anything reacts to the write.
# - DisruptionBudgets before the garbage collector: a pod's change shows in its budgets'
#   status before the cascade it may start deletes more pods, so watchers see budget updates
#   in the order the pods changed.
# - GarbageCollector before NamespaceLifecycle: an object's dependents in a terminating
#   namespace go first, so the namespace is removed (last) only once the cascade has emptied it.
# - PoolAdmission (CAPI's defaulting and validating webhooks, CAPZ's validating one) right
#   after CustomResourceDefinitions: its defaults apply to the object the schema admitted and
#   converted to v1beta2 (the version CAPI's webhooks are registered for), and kube calls
#   validating webhooks after schema validation, before the object is stored.
# - CrdCleanup last: a terminating CRD lets go only once its last object's deletion, and
#   whatever that cascaded, is complete.
WRITE_HOOKS: tuple[HookFactory, ...] = (
    CustomResourceDefinitions,
    PoolAdmission,
    CapaAwsMachineWebhooks,
    DisruptionBudgets,
    GarbageCollector,
    NamespaceLifecycle,
    CrdCleanup,
)
