"""Which selected workers a ClusterClass topology owns the replicas of, for both kinds and both
Cluster layouts (the operator-level behaviour is in ``test_topology.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.plugins.generic_capi.selection import select
from karpenter_capi.plugins.generic_capi.topology import (
    REASON_TOPOLOGY_MANAGED_REPLICAS,
    leave_out_topology_managed,
)
from tests.plugins.generic_capi.inventory_builders import MEMBER, add, new_env, scalable

FIELDS = {"MachineDeployment": "machineDeployments", "MachinePool": "machinePools"}
NAME_LABELS = {
    "MachineDeployment": "topology.cluster.x-k8s.io/deployment-name",
    "MachinePool": "topology.cluster.x-k8s.io/pool-name",
}


def _cluster(shape: str, workers: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    topology: dict[str, Any] = {"version": "v1.31.0", "workers": workers}
    if shape == "v1beta2":
        topology["classRef"] = {"name": "quick-start"}
    else:
        topology["class"] = "quick-start"
    return {
        "apiVersion": f"cluster.x-k8s.io/{shape}",
        "kind": "Cluster",
        "metadata": {"name": "prod", "namespace": "default", "uid": "uid-prod"},
        "spec": {"topology": topology},
    }


def _owned(kind: str, name: str, worker: str) -> dict[str, Any]:
    labels = {
        **MEMBER,
        "cluster.x-k8s.io/cluster-name": "prod",
        "topology.cluster.x-k8s.io/owned": "",
        NAME_LABELS[kind]: worker,
    }
    return scalable(kind, name, labels=labels)


@pytest.mark.parametrize("shape", ["v1beta1", "v1beta2"])
@pytest.mark.parametrize("kind", ["MachineDeployment", "MachinePool"])
def test_only_workers_whose_topology_sets_replicas_are_left_out_naming_the_field(
    shape: str, kind: str
) -> None:
    server, _, _, capi = new_env()
    workers = {
        FIELDS[kind]: [
            {"class": "default-worker", "name": "fixed", "replicas": 3},
            {"class": "default-worker", "name": "autoscaled"},
        ]
    }
    server.apply_manifests([_cluster(shape, workers)])
    add(
        server,
        capi,
        _owned(kind, "prod-fixed-abcde", "fixed"),
        _owned(kind, "prod-autoscaled-fghij", "autoscaled"),
        scalable(kind, "hand-made"),
    )

    selection = select(server, capi, {})
    leave_out_topology_managed(selection)

    kept = sorted(obj["metadata"]["name"] for _, obj in selection.selected)
    assert kept == ["hand-made", "prod-autoscaled-fghij"]
    (problem,) = selection.problems
    field = f"spec.topology.workers.{FIELDS[kind]}[name=fixed].replicas"
    assert (problem.kind, problem.name, problem.reason) == (
        kind,
        "prod-fixed-abcde",
        REASON_TOPOLOGY_MANAGED_REPLICAS,
    )
    assert problem.message == (
        f"Cluster default/prod sets {field} to 3: Cluster API's topology controller reverts "
        f"every other replica change, so it is not scaled; remove {field} from the Cluster to "
        f"let karpenter-capi scale this {kind}"
    )
    # The Warning Event goes on the Cluster too, where the field is.
    assert [o["kind"] for o in problem.also] == ["Cluster"]
    assert problem.also[0]["metadata"]["name"] == "prod"


def test_a_worker_the_topology_no_longer_lists_is_scaled_as_any_other() -> None:
    server, _, _, capi = new_env()
    server.apply_manifests([_cluster("v1beta2", {"machineDeployments": []})])
    add(server, capi, _owned("MachineDeployment", "prod-gone-abcde", "gone"))

    selection = select(server, capi, {})
    leave_out_topology_managed(selection)

    assert [obj["metadata"]["name"] for _, obj in selection.selected] == ["prod-gone-abcde"]
    assert selection.problems == []
