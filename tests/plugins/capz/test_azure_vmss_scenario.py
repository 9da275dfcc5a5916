"""The shipped scenario ``azure-vmss``, as a user runs it (``karpenter-capi simulate
azure-vmss``): the capz plugin's ``CAPZMachinePool`` launch mode over the simulator's Azure
(eastus's catalog and retail prices), stock CAPZ emulated.

Pods are bound on nodes of real VM sizes, priced from Azure's retail prices; the cheapest size
has no capacity in zone 1 of the simulated Azure, so its pool fails and the launch falls back to
zone 2; after the batch pods go, consolidation replaces nodes through the pool path
(``delete-machine`` and a lower replica count).
"""

from __future__ import annotations

import io
import json
import sys

import pytest

from karpenter_capi.cli import main
from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube import MACHINE_POOLS, MACHINES, NODECLAIMS, NODES
from karpenter_capi.plugins.capz.pools import AZURE_MACHINE_POOLS
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.scenario.runner import run
from karpenter_capi.sim.scenario.schema import load_scenario, shipped_scenarios


def test_azure_vmss_scenario_binds_on_real_sizes_falls_back_and_consolidates() -> None:
    assert "azure-vmss" in shipped_scenarios()
    servers: list[InMemoryAPIServer] = []
    # Only generic_capi named, as `simulate` enables by default: the scenario's `azure:` adds capz.
    result = run(load_scenario("azure-vmss"), until=900, on_cluster=servers.append)
    [server] = servers
    assert result.errors == []
    assert result.pods_bound == result.pods_total == 2
    # Two 3-CPU batch pods needed two D4s_v5 (4 vCPU) at eastus's retail 0.192 USD/h each.
    assert result.cost_per_hour_peak == pytest.approx(2 * 0.192)
    peak = max(result.samples, key=lambda s: s.cost_per_hour)
    assert peak.nodes_by_instance_type == {"Standard_D4s_v5": 2}
    pools = {p["metadata"]["name"]: p for p in server.list(MACHINE_POOLS, "default").items}
    replicas = {name.rsplit("-", 1)[0]: p["spec"]["replicas"] for name, p in pools.items()}
    # The B2s pool of zone 1 had no capacity: its replica was given back and zone 2 served.
    assert replicas == {"azure-b2s-od-z1": 0, "azure-b2s-od-z2": 1, "azure-d4s-v5-od-z1": 0}
    # What `kubectl get azuremachinepools -w` showed meanwhile: that pool's scale set failed
    # (CAPZ reports Azure's allocation failure there and retries; no MachinePool failed).
    history = server.watch(AZURE_MACHINE_POOLS, "default", resource_version="1", timeout_seconds=0)
    failed = {
        event.object["metadata"]["name"].rsplit("-", 1)[0]
        for event in history
        if (event.object.get("status") or {}).get("provisioningState") == "Failed"
    }
    assert failed == {"azure-b2s-od-z1"}
    history = server.watch(MACHINE_POOLS, "default", resource_version="1", timeout_seconds=0)
    assert not [e for e in history if (e.object.get("status") or {}).get("phase") == "Failed"]
    # Consolidation replaced the D4s_v5 nodes, through delete-machine and the pool's scale.
    assert result.disruptions.get("Underutilized", 0) >= 1
    assert result.api_requests["patch/scale"] >= 4
    assert [(row.instance_type, row.price_per_hour) for row in result.capacity] == [
        ("Standard_B2s", pytest.approx(0.0416))
    ]
    assert result.cost_per_hour == pytest.approx(0.0416)
    [node] = server.list(NODES).items
    [claim] = server.list(NODECLAIMS).items
    labels = node["metadata"]["labels"]
    assert labels[wellknown.LABEL_INSTANCE_TYPE] == "Standard_B2s"
    assert labels[wellknown.LABEL_TOPOLOGY_ZONE] == "eastus-2"
    assert claim["metadata"]["labels"][wellknown.LABEL_TOPOLOGY_ZONE] == "eastus-2"
    assert node["spec"]["providerID"].startswith("azure:///subscriptions/")
    [machine] = [
        m
        for m in server.list(MACHINES, "default").items
        if not m["metadata"].get("deletionTimestamp")
    ]
    assert machine["spec"]["providerID"] == node["spec"]["providerID"]
    assert machine["metadata"]["labels"]["cluster.x-k8s.io/pool-name"].startswith("azure-b2s-od-z2")
    # The controller's own writes: three pools (D4s_v5 z1, B2s z1 that failed, B2s z2), each a
    # KubeadmConfig, an AzureMachinePool and a MachinePool; three nodes launched.
    writes = result.controller_writes
    assert writes["machine_pools_created"] == 3
    assert writes["by_request"]["create azuremachinepools"] == 3
    assert writes["by_request"]["create kubeadmconfigs"] == 3
    assert writes["launched_nodes"] == 3
    assert writes["per_launched_node"] == pytest.approx(writes["total"] / 3, abs=0.01)


def test_simulate_azure_vmss_from_the_command_line_reports_pools_and_writes() -> None:
    out = io.StringIO()
    assert main(["simulate", "azure-vmss", "--until", "15m", "--json"], out=out) == 0
    result = json.loads(out.getvalue())
    assert result["errors"] == []
    assert [(r["instance_type"], r["count"]) for r in result["capacity"]] == [("Standard_B2s", 1)]
    assert result["controller_writes"]["machine_pools_created"] == 3
    text = io.StringIO()
    assert main(["simulate", "azure-vmss", "--until", "2m"], out=text) == 0
    # Two minutes in: the batch pods' two D4s_v5, launched from one pool.
    rows = [line.split() for line in text.getvalue().splitlines()]
    assert ["Standard_D4s_v5", "on-demand", "2", "$0.1920", "$0.3840"] in rows
    assert "(2 launched); 1 MachinePool created" in text.getvalue()


def test_simulate_azure_vmss_without_the_azure_sdk_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The Azure SDK unimportable (None in sys.modules), the capz modules forgotten so that
    # loading the entry point imports them afresh.
    for name in [m for m in sys.modules if m.startswith("karpenter_capi.plugins.capz")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "azure.mgmt.compute", None)
    assert main(["simulate", "azure-vmss"]) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "plugin 'capz'" in line
    assert "pip install 'karpenter-capi[azure]'" in line
