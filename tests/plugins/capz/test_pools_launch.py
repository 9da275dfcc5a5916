"""The ``CAPZMachinePool`` launch mode: pools created lazily, scaled one VM at a time, bound,
deleted by ``delete-machine``, fallen back from, and tidied up.

The management cluster runs the CAPI emulation with stock CAPZ's MachinePool behaviour
(MachinePool Machines, AzureMachinePoolMachines, ``delete-machine`` first); Azure's catalog and
prices are the fake transport's.
"""

from __future__ import annotations

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodeclaim import NodeClaim
from karpenter_capi.core.errors import (
    InstanceNotFoundError,
    InsufficientCapacityError,
    RetryableCreateError,
)
from karpenter_capi.core.kube import MACHINE_POOLS, NODECLAIMS, Resource
from karpenter_capi.core.kube.errors import Conflict, NotFound, ServiceUnavailable
from karpenter_capi.plugins.capz.plugin import CapzHooks
from karpenter_capi.plugins.capz.pools import (
    ANNOTATION_EMPTY_SINCE,
    AZURE_MACHINE_POOL_MACHINES,
    kubeadm_configs,
)
from karpenter_capi.sim.capi import ANNOTATION_VM_FAILURE
from tests.plugins.capz.pools_env import NAMESPACE, new_env

AZURE_MACHINE_TEMPLATES = Resource(
    "infrastructure.cluster.x-k8s.io",
    "v1beta1",
    "azuremachinetemplates",
    "AzureMachineTemplate",
    True,
)
D4S = "Standard_D4s_v5"
D2PS = "Standard_D2ps_v5"


def test_inventory_offers_every_priced_size_by_zone_and_priority() -> None:
    env = new_env()
    nodeclass, nodepool = env.models()
    types = {t.name: t for t in env.plugins.instance_types(nodeclass, nodepool)}
    # B2s is on-demand only (not LowPriorityCapable); M416 is restricted; NC6 is in zones 1, 3.
    assert "Standard_M416ms_v2" not in types
    offerings = {(o.zone, o.capacity_type): o.price for o in types[D4S].offerings}
    assert offerings == {
        **{(f"eastus-{z}", "on-demand"): 0.192 for z in "123"},
        **{(f"eastus-{z}", "spot"): 0.0384 for z in "123"},
    }
    assert {o.capacity_type for o in types["Standard_B2s"].offerings} == {"on-demand"}
    assert {o.zone for o in types["Standard_E4s_v5"].offerings} == {"eastus-1", "eastus-3"}
    assert types[D2PS].requirements[wellknown.LABEL_ARCH] == frozenset({"arm64"})
    assert str(types[D4S].capacity["memory"]) == "16Gi"
    # Nothing exists in the cluster until a launch needs it.
    assert env.pools() == {}


def test_first_launch_creates_the_cheapest_pool_and_scales_it_to_one() -> None:
    env = new_env()
    env.nodeclaim("a", zones=("eastus-2",))
    result = env.launch("a")
    assert (result.instance_type, result.zone, result.capacity_type) == (
        D4S,
        "eastus-2",
        "on-demand",
    )
    assert result.provider_id is None
    pool = env.pool_of("a")
    name = pool["metadata"]["name"]
    assert name.startswith("azure-d4s-v5-od-z2-")
    assert pool["spec"]["replicas"] == 1
    assert pool["spec"]["failureDomains"] == ["2"]
    assert pool["spec"]["clusterName"] == "prod"
    template = pool["spec"]["template"]["spec"]
    assert template["version"] == "v1.31.0"
    assert template["infrastructureRef"]["kind"] == "AzureMachinePool"
    assert template["infrastructureRef"]["name"] == name
    assert template["bootstrap"]["configRef"]["kind"] == "KubeadmConfig"
    labels = pool["metadata"]["labels"]
    assert labels["karpenter.cluster.x-k8s.io/nodeclass"] == "azure"
    assert labels[wellknown.LABEL_CAPI_CLUSTER_NAME] == "prod"
    assert wellknown.LABEL_KARPENTER_MEMBER not in labels  # no selector can take it
    azure_pool = env.azure_pool(name)["spec"]
    assert azure_pool["orchestrationMode"] == "Flexible"
    assert azure_pool["location"] == "eastus"
    assert azure_pool["template"]["vmSize"] == D4S  # the template's B2s replaced
    assert azure_pool["template"]["osDisk"]["diskSizeGB"] == 128
    assert "spotVMOptions" not in azure_pool["template"]
    # Written at v1beta2, the version the template was read at (its spec's shape), so the
    # schema admits it; at v1beta1 it reads back converted, as CAPI's webhook converts it.
    kubeadm = env.api.get(kubeadm_configs("v1beta2"), name, NAMESPACE)
    registration = kubeadm["spec"]["joinConfiguration"]["nodeRegistration"]
    assert registration["kubeletExtraArgs"] == [{"name": "cloud-provider", "value": "external"}]
    old = env.kubeadm_config(name)["spec"]["joinConfiguration"]["nodeRegistration"]
    assert old["kubeletExtraArgs"] == {"cloud-provider": "external"}
    assert template["bootstrap"]["configRef"] == {
        "apiGroup": "bootstrap.cluster.x-k8s.io",
        "kind": "KubeadmConfig",
        "name": name,
    }
    assert result.annotations["karpenter.cluster.x-k8s.io/launch"] == "CAPZMachinePool"


def test_spot_pool_carries_spot_vm_options() -> None:
    env = new_env()
    env.nodeclaim("s", capacity_types=("spot", "on-demand"), zones=("eastus-1",))
    result = env.launch("s")
    assert (result.capacity_type, result.zone) == ("spot", "eastus-1")
    name = env.pool_of("s")["metadata"]["name"]
    # Delete, not Azure's default Deallocate: an evicted VM must not keep its replica.
    assert env.azure_pool(name)["spec"]["template"]["spotVMOptions"] == {"evictionPolicy": "Delete"}


def test_spot_eviction_policy_of_the_template_is_kept() -> None:
    env = new_env()
    env.api.patch(
        AZURE_MACHINE_TEMPLATES,
        "workers",
        {"spec": {"template": {"spec": {"spotVMOptions": {
            "evictionPolicy": "Deallocate", "maxPrice": "0.5"}}}}},
        NAMESPACE,
    )  # fmt: skip
    env.nodeclaim("s", capacity_types=("spot",), zones=("eastus-1",))
    env.launch("s")
    name = env.pool_of("s")["metadata"]["name"]
    assert env.azure_pool(name)["spec"]["template"]["spotVMOptions"] == {
        "evictionPolicy": "Deallocate",
        "maxPrice": "0.5",
    }


def test_launch_binds_the_new_pool_machine_and_learns_its_azure_provider_id() -> None:
    env = new_env()
    env.nodeclaim("a", zones=("eastus-2",))
    env.launch_all(["a"])
    provider_id = env.provider_id("a")
    assert provider_id.startswith("azure:///subscriptions/")
    [machine] = env.machines()
    assert machine["spec"]["providerID"] == provider_id
    assert env.bindings() == {"a": [machine["metadata"]["name"]]}
    ampm = env.api.get(AZURE_MACHINE_POOL_MACHINES, machine["metadata"]["name"], NAMESPACE)
    assert ampm["spec"]["providerID"] == provider_id
    # The pool was written once (created) and scaled once.
    assert env.pool_of("a")["spec"]["replicas"] == 1
    # generic_capi's get answers for it (a bound pool Machine is a member Machine).
    instance = env.plugins.get(provider_id)
    assert instance is not None
    assert instance.nodeclaim_name == "a"


def test_two_claims_share_one_pool_each_with_its_own_machine() -> None:
    env = new_env()
    for name in ("a", "b", "c"):
        env.nodeclaim(name, zones=("eastus-3",))
    env.launch_all(["a", "b", "c"])
    assert len(env.pools()) == 1
    assert env.pool_of("a")["spec"]["replicas"] == 3
    bound = env.bindings()
    assert sorted(bound) == ["a", "b", "c"]
    assert all(len(m) == 1 for m in bound.values())
    assert len({m[0] for m in bound.values()}) == 3


def test_scale_uses_a_resource_version_precondition() -> None:
    env = new_env()
    env.nodeclaim("a", zones=("eastus-2",))
    env.launch("a")
    pool = env.pool_of("a")
    stale = pool["metadata"]["resourceVersion"]
    env.api.patch(MACHINE_POOLS, pool["metadata"]["name"], {"metadata": {"labels": {"x": "y"}}},
                  NAMESPACE)  # fmt: skip
    with pytest.raises(Conflict):
        env.api.patch(
            MACHINE_POOLS,
            pool["metadata"]["name"],
            {"metadata": {"resourceVersion": stale}, "spec": {"replicas": 5}},
            NAMESPACE,
            subresource="scale",
        )
    # The plugin's own write after someone else's: re-read, decided again, still one replica.
    env.launch("a")
    assert env.pool_of("a")["spec"]["replicas"] == 1


def test_delete_marks_the_machine_and_lowers_the_pool() -> None:
    env = new_env()
    for name in ("a", "b"):
        env.nodeclaim(name, zones=("eastus-2",))
    env.launch_all(["a", "b"])
    [machine_a] = env.bindings()["a"]
    assert env.delete("a") is True
    pool = env.pool_of("b")
    assert pool["spec"]["replicas"] == 1
    marked = {
        m["metadata"]["name"]
        for m in env.machines(live=False)
        if wellknown.ANNOTATION_CAPI_DELETE_MACHINE in (m["metadata"].get("annotations") or {})
    }
    assert marked == {machine_a}
    env.driver.advance(30)
    # CAPZ removed exactly the marked Machine; b's stays.
    assert [m["metadata"]["name"] for m in env.machines()] == env.bindings()["b"]
    with pytest.raises(InstanceNotFoundError):
        env.delete("a")


def test_a_pool_without_capacity_falls_back_to_the_next_offering() -> None:
    env = new_env(unavailable=frozenset({f"{D4S}@2"}), options={"machine_timeout": "10m"})
    env.nodeclaim("a", instance_types=(D4S, "Standard_E4s_v5"), zones=("eastus-2", "eastus-3"))
    first = env.launch("a")
    assert (first.instance_type, first.zone) == (D4S, "eastus-2")
    failed = env.pool_of("a")["metadata"]["name"]
    env.driver.advance(15)  # CAPZ tried: Azure refused the scale set's VM
    # CAPZ retries an allocation failure: the MachinePool is not failed, only the
    # AzureMachinePool says so; the launch reads it there, well before machine_timeout.
    assert env.pools()[failed]["status"]["phase"] != "Failed"
    status = env.azure_pool(failed)["status"]
    assert status["provisioningState"] == "Failed"
    bootstrap = {c["type"]: c for c in status["conditions"]}["BootstrapSucceeded"]
    assert (bootstrap["status"], bootstrap["reason"], bootstrap["severity"]) == (
        "False",
        "Failed",
        "Error",
    )
    assert "ERROR CODE: ZonalAllocationFailed" in bootstrap["message"]
    second = env.launch("a")
    assert (second.instance_type, second.zone) == (D4S, "eastus-3")
    # The failed pool got its replica back; the offering is unavailable for the solver.
    assert env.pools()[failed]["spec"]["replicas"] == 0
    nodeclass, nodepool = env.models()
    [d4s] = [t for t in env.plugins.instance_types(nodeclass, nodepool) if t.name == D4S]
    available = {(o.zone, o.capacity_type): o.available for o in d4s.offerings}
    assert available[("eastus-2", "on-demand")] is False
    assert available[("eastus-3", "on-demand")] is True
    env.launch_all(["a"])
    assert env.pool_of("a")["metadata"]["name"] != failed


def test_no_machine_within_the_timeout_falls_back_and_gives_the_replica_back() -> None:
    env = new_env(options={"machine_timeout": "60s"})
    env.nodeclaim("a", instance_types=(D4S, "Standard_E4s_v5"), zones=("eastus-1",))
    env.launch("a")
    stuck = env.pool_of("a")["metadata"]["name"]
    # A scale set that takes the request and never makes the VM object.
    env.api.patch(
        MACHINE_POOLS, stuck,
        {"metadata": {"annotations": {"sim.karpenter.cluster.x-k8s.io/never-provision": "true"}}},
        NAMESPACE,
    )  # fmt: skip
    env.driver.advance(30)
    assert env.launch("a").instance_type == D4S  # still within the timeout: waits
    env.driver.advance(35)
    result = env.launch("a")
    assert (result.instance_type, result.zone) == ("Standard_E4s_v5", "eastus-1")
    assert env.pools()[stuck]["spec"]["replicas"] == 0
    assert env.pool_of("a")["metadata"]["name"] != stuck
    env.launch_all(["a"])
    assert env.bindings()["a"][0].startswith(env.pool_of("a")["metadata"]["name"])


def test_when_every_offering_fails_the_claim_gets_insufficient_capacity() -> None:
    env = new_env(unavailable=frozenset({D4S}))
    env.nodeclaim("a", zones=("eastus-2",))
    env.launch("a")
    env.driver.advance(15)
    with pytest.raises(InsufficientCapacityError):
        env.launch("a")


def test_empty_pools_are_deleted_after_the_grace_period() -> None:
    env = new_env(options={"pool_grace": "5m"})
    env.nodeclaim("a", zones=("eastus-2",))
    env.launch_all(["a"])
    name = env.pool_of("a")["metadata"]["name"]
    env.sweep()
    assert ANNOTATION_EMPTY_SINCE not in (env.pools()[name]["metadata"].get("annotations") or {})
    env.delete("a")
    env.driver.advance(30)
    env.sweep()  # first seen empty
    assert ANNOTATION_EMPTY_SINCE in env.pools()[name]["metadata"]["annotations"]
    env.driver.advance(200)
    env.sweep()
    assert name in env.pools()
    env.driver.advance(120)
    env.sweep()
    env.driver.advance(10)
    assert name not in env.pools()
    with pytest.raises(NotFound):
        env.azure_pool(name)
    with pytest.raises(NotFound):
        env.kubeadm_config(name)


def test_a_pool_a_claim_waits_on_is_never_swept() -> None:
    env = new_env(options={"pool_grace": "1s"})
    env.nodeclaim("a", zones=("eastus-2",))
    env.launch("a")
    for _ in range(3):
        env.world.clock.advance(10)
        env.sweep()
    assert env.pool_of("a")["spec"]["replicas"] == 1


def test_a_replica_nobody_waits_for_is_scaled_back() -> None:
    env = new_env()
    env.nodeclaim("a", zones=("eastus-2",))
    env.launch("a")
    name = env.pool_of("a")["metadata"]["name"]
    # The NodeClaim went before its VM came, and its delete hook never ran (a crash).
    env.api.delete(NODECLAIMS, "a")
    env.api.patch(NODECLAIMS, "a", {"metadata": {"finalizers": None}})
    env.restart()
    env.sweep()
    assert env.pools()[name]["spec"]["replicas"] == 0


def test_other_nodeclasses_are_left_to_generic_capi() -> None:
    env = new_env()
    nodeclass, _nodepool = env.models()
    plain = nodeclass.model_copy(
        update={"spec": nodeclass.spec.model_copy(update={"launch": None})}
    )
    hooks = env.plugins.plugin("capz")
    assert isinstance(hooks, CapzHooks)
    assert hooks.karpenter_capi_instance_types(plain) is None
    assert hooks.karpenter_capi_create(None, [], plain) is None


def test_changed_templates_make_new_pools_and_drift_the_old_nodes() -> None:
    env = new_env()
    env.nodeclaim("a", zones=("eastus-2",))
    env.launch_all(["a"])
    old = env.pool_of("a")["metadata"]["name"]
    nodeclass, _ = env.models()
    claim = NodeClaim.model_validate(env.claim("a"))
    assert env.plugins.is_drifted(claim, nodeclass) is None
    template = env.api.get(AZURE_MACHINE_TEMPLATES, "workers", NAMESPACE)
    template["spec"]["template"]["spec"]["image"] = {"marketplace": {"version": "2.0.0"}}
    env.api.update(AZURE_MACHINE_TEMPLATES, template)
    assert env.plugins.is_drifted(claim, nodeclass) == "NodeClassDrift"
    env.nodeclaim("b", zones=("eastus-2",))
    env.launch_all(["b"])
    new = env.pool_of("b")["metadata"]["name"]
    assert new != old
    assert env.azure_pool(new)["spec"]["template"]["image"] == {"marketplace": {"version": "2.0.0"}}
    assert "image" not in env.azure_pool(old)["spec"]["template"]  # never edited


def test_the_machine_pool_is_created_before_its_azure_machine_pool() -> None:
    """CAPZ's webhook refuses a Flexible AzureMachinePool whose MachinePool does not exist
    (the emulation runs it); a launch whose AzureMachinePool create failed leaves the
    MachinePool, and the next launch completes the pool instead of making another."""
    env = new_env()
    env.nodeclaim("a", zones=("eastus-2",))
    env.api.faults.fail("create", "azuremachinepools", ServiceUnavailable("webhook timeout"))
    with pytest.raises(RetryableCreateError, match="webhook timeout"):
        env.launch("a")
    [name] = env.pools()
    with pytest.raises(NotFound):
        env.azure_pool(name)
    env.launch_all(["a"])
    assert list(env.pools()) == [name]
    assert env.azure_pool(name)["spec"]["orchestrationMode"] == "Flexible"
    assert env.pools()[name]["spec"]["replicas"] == 1
    assert len(env.machines()) == 1


def test_a_failed_vm_fails_the_launch_at_once_and_marks_the_offering() -> None:
    """A scale set VM Azure could not provision (its AzureMachinePoolMachine in provisioning
    state ``Failed``) never joins: the launch gives up on the pool when CAPZ reports it, not
    after ``machine_timeout`` or the core's registration timeout."""
    env = new_env(options={"machine_timeout": "10m"})
    env.nodeclaim("a", instance_types=(D4S, "Standard_E4s_v5"), zones=("eastus-2",))
    first = env.launch("a")
    assert first.provider_id is None
    failed = env.pool_of("a")["metadata"]["name"]
    error = "OSProvisioningTimedOut: OS Provisioning for VM did not finish in the allotted time."
    env.api.patch(
        MACHINE_POOLS, failed, {"metadata": {"annotations": {ANNOTATION_VM_FAILURE: error}}},
        NAMESPACE,
    )  # fmt: skip
    env.driver.advance(15)  # the VM object exists, its Machine has the VM's provider ID
    [machine] = env.machines()
    assert machine["spec"]["providerID"].startswith("azure:///")
    with pytest.raises(InsufficientCapacityError) as refused:
        env.launch("a")
    assert f"VM {machine['metadata']['name']} of MachinePool/{NAMESPACE}/{failed}" in str(
        refused.value
    )
    assert f"failed: scalesetvms failed to create or update. err: {error}" in str(refused.value)
    nodeclass, nodepool = env.models()
    [d4s] = [t for t in env.plugins.instance_types(nodeclass, nodepool) if t.name == D4S]
    available = {(o.zone, o.capacity_type): o.available for o in d4s.offerings}
    assert available[("eastus-2", "on-demand")] is False


def test_a_vm_still_being_made_is_not_launched_yet() -> None:
    env = new_env()
    env.nodeclaim("a", zones=("eastus-2",))
    env.launch_all(["a"])
    [machine] = env.machines()
    name = machine["metadata"]["name"]
    env.api.patch(
        AZURE_MACHINE_POOL_MACHINES, name, {"status": {"provisioningState": "Creating"}},
        NAMESPACE, subresource="status",
    )  # fmt: skip
    assert env.launch("a").provider_id is None
    env.api.patch(
        AZURE_MACHINE_POOL_MACHINES, name, {"status": {"provisioningState": "Succeeded"}},
        NAMESPACE, subresource="status",
    )  # fmt: skip
    assert env.launch("a").provider_id == machine["spec"]["providerID"]


def test_a_nodeclaim_deleted_before_the_core_recorded_its_pool_gives_its_replica_back() -> None:
    # As generic_capi's delete does: the pool this process sent the NodeClaim to is passed on,
    # or a NodeClaim deleted before the core wrote its intent left its replica standing (a
    # Node nobody waits for).
    env = new_env()
    env.nodeclaim("a", zones=("eastus-2",))
    env.launch("a", record=False)  # the pool is raised; the core's write has not landed
    [pool] = env.pools().values()
    assert pool["spec"]["replicas"] == 1
    with pytest.raises(InstanceNotFoundError):
        env.delete("a")
    assert env.pools()[pool["metadata"]["name"]]["spec"]["replicas"] == 0
