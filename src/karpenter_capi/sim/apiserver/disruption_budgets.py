"""PodDisruptionBudget status: kube-controller-manager's disruption controller, as a write hook.

The eviction subresource trusts a budget's ``status`` (``disruptionsAllowed``), and ``kubectl
get pdb`` shows it, so it must reflect the pods as they are now. Kube's disruption controller
recomputes it asynchronously whenever a selected pod, the budget itself, or the scale of the
pods' controllers changes; this hook does the same synchronously, inside the write, with the
arithmetic of ``eviction.pdb_status``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from karpenter_capi.core.kube.client import WatchEventType
from karpenter_capi.sim.apiserver.eviction import pdb_selects, pdb_status
from karpenter_capi.sim.apiserver.objects import get_path
from karpenter_capi.sim.apiserver.store import Table
from karpenter_capi.sim.apiserver.write_hook import WriteHook

if TYPE_CHECKING:
    from karpenter_capi.sim.apiserver.engine import Engine

JsonObject = dict[str, Any]


def in_namespace(table: Table, namespace: str) -> list[JsonObject]:
    """The objects of a namespaced table that live in ``namespace``."""
    prefix = f"{namespace}/"
    return [obj for key, obj in table.objects.items() if key.startswith(prefix)]


def budgets_in(engine: Engine, namespace: str) -> list[JsonObject]:
    """The PodDisruptionBudgets stored in ``namespace`` (none if the kind is not served)."""
    budgets_table = engine.table_of("policy", "poddisruptionbudgets")
    return [] if budgets_table is None else in_namespace(budgets_table, namespace)


class DisruptionBudgets(WriteHook):
    """Keeps every PodDisruptionBudget's ``status`` current as pods and scales change."""

    def after_commit(
        self, table: Table, event_type: WatchEventType, stored: JsonObject, prev: JsonObject | None
    ) -> None:
        definition = table.definition
        if definition.group == "" and definition.plural == "pods":
            changed = [stored] if prev is None else [stored, prev]
            self._refresh_budgets(str(stored["metadata"]["namespace"]), changed)
        elif (
            definition.group == "policy"
            and definition.plural == "poddisruptionbudgets"
            and event_type != "DELETED"
            and (prev is None or prev.get("spec") != stored.get("spec"))
        ):
            self._refresh_budget(table, stored)
        elif definition.has_scale and definition.namespaced and event_type == "MODIFIED":
            # A controller's replicas are the expected pod count of the budgets over its pods.
            self._refresh_budgets(str(stored["metadata"]["namespace"]), None)

    def _refresh_budgets(self, namespace: str, changed_pods: list[JsonObject] | None) -> None:
        budgets_table = self.engine.table_of("policy", "poddisruptionbudgets")
        if budgets_table is None or not budgets_table.objects:
            return  # no budget anywhere (every pod write of a cluster without one): no scan
        for budget in in_namespace(budgets_table, namespace):
            if changed_pods is None or any(pdb_selects(budget, pod) for pod in changed_pods):
                self._refresh_budget(budgets_table, budget)

    def _refresh_budget(self, budgets_table: Table, budget: JsonObject) -> None:
        engine = self.engine
        pods_table = engine.store.tables["pods"]
        namespace = str(budget["metadata"]["namespace"])
        status = pdb_status(
            budget, in_namespace(pods_table, namespace), self._expected_scale, engine.now()
        )
        if status != budget.get("status"):
            engine.commit(budgets_table, "MODIFIED", {**budget, "status": status}, budget)

    def _expected_scale(self, pods: list[JsonObject]) -> int | None:
        """Sum of the desired replicas of the pods' controllers (None if a pod has none)."""
        scales: dict[str, int] = {}
        for pod in pods:
            controller = self._scalable_controller(pod)
            if controller is None:
                return None
            uid, replicas = controller
            scales[uid] = replicas
        return sum(scales.values())

    def _scalable_controller(self, obj: JsonObject) -> tuple[str, int] | None:
        """The topmost controller with a scale (a ReplicaSet's Deployment, a StatefulSet...)."""
        store = self.engine.store
        found: tuple[str, int] | None = None
        current = obj
        for _ in range(4):  # pod -> ReplicaSet -> Deployment is as deep as kube looks
            ref = next(
                (
                    r
                    for r in current["metadata"].get("ownerReferences") or []
                    if r.get("controller")
                ),
                None,
            )
            if ref is None:
                return found
            owner = store.lookup_uid(str(ref.get("uid")))
            if owner is None:
                return found
            table = store.tables[store.by_uid[str(ref["uid"])][0]]
            if table.definition.has_scale:
                replicas = get_path(owner, table.definition.scale_spec_path)
                found = (str(ref["uid"]), int(replicas or 0))
            current = owner
        return found
