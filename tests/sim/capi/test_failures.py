"""Failure injection: Machines that never get a providerID, and Machines out of capacity."""

from __future__ import annotations

import logging

import pytest

from karpenter_capi.core.kube import MACHINE_DEPLOYMENTS, MACHINES
from karpenter_capi.sim.capi import (
    ANNOTATION_NEVER_PROVISION,
    ANNOTATION_OUT_OF_CAPACITY,
    ANNOTATION_PROVISION_DELAY,
)
from tests.sim.capi.harness import SHAPES, machine_deployment, new_sim


@pytest.mark.parametrize("shape", SHAPES)
def test_never_provision_keeps_machines_provisioning_until_it_is_removed(shape: str) -> None:
    sim = new_sim(provision_delay=10, nodes=True)
    annotations = {ANNOTATION_NEVER_PROVISION: "true"}
    sim.create(machine_deployment("workers", shape, replicas=2, annotations=annotations))
    sim.advance(3600)
    machines = sim.machines()
    assert [m["spec"].get("providerID") for m in machines] == [None, None]
    assert {m["status"]["phase"] for m in machines} == {"Provisioning"}
    assert sim.nodes() == []

    sim.annotate(MACHINE_DEPLOYMENTS, "workers", {ANNOTATION_NEVER_PROVISION: None})
    sim.settle()  # the delay has long passed
    assert all(m["spec"]["providerID"] for m in sim.machines())


@pytest.mark.parametrize("shape", SHAPES)
def test_out_of_capacity_machines_fail_in_their_layout(shape: str) -> None:
    sim = new_sim(provision_delay=10, nodes=True)
    annotations = {ANNOTATION_OUT_OF_CAPACITY: "true"}
    sim.create(machine_deployment("workers", shape, replicas=1, annotations=annotations))
    sim.advance(9)
    [machine] = sim.machines()
    assert machine["status"]["phase"] == "Provisioning"

    sim.advance(1)
    [machine] = sim.machines()
    status = machine["status"]
    assert status["phase"] == "Failed"
    assert "providerID" not in machine["spec"]
    if shape == "v1beta1":
        assert status["failureReason"] == "InsufficientResources"
        assert "out of capacity" in status["failureMessage"]
        assert status["infrastructureReady"] is False
        conditions = status["v1beta2"]["conditions"]
    else:
        assert "failureReason" not in status
        deprecated = status["deprecated"]["v1beta1"]
        assert deprecated["failureReason"] == "InsufficientResources"
        assert status["initialization"]["infrastructureProvisioned"] is False
        conditions = status["conditions"]
    [infra] = [c for c in conditions if c["type"] == "InfrastructureReady"]
    assert (infra["status"], infra["reason"]) == ("False", "InsufficientResources")

    sim.advance(3600)
    assert sim.nodes() == []
    assert sim.get(MACHINE_DEPLOYMENTS, "workers")["status"]["readyReplicas"] == 0


@pytest.mark.parametrize("shape", SHAPES)
def test_a_failed_machine_is_the_first_to_go_on_scale_down(shape: str) -> None:
    sim = new_sim(provision_delay=10, boot_delay=1, delete_delay=0, nodes=True)
    sim.create(machine_deployment("workers", shape, replicas=2))
    sim.advance(30)
    healthy = sim.machine_names()
    sim.annotate(MACHINE_DEPLOYMENTS, "workers", {ANNOTATION_OUT_OF_CAPACITY: "true"})
    sim.scale(MACHINE_DEPLOYMENTS, "workers", 3)
    sim.advance(30)
    [failed] = [m for m in sim.machines() if m["status"]["phase"] == "Failed"]
    sim.scale(MACHINE_DEPLOYMENTS, "workers", 2)
    sim.settle()
    assert sim.machine_names() == healthy
    assert failed["metadata"]["name"] not in sim.machine_names()


@pytest.mark.parametrize("shape", SHAPES)
def test_an_annotation_on_the_machine_wins_over_its_deployment(shape: str) -> None:
    sim = new_sim(provision_delay=10)
    annotations = {ANNOTATION_NEVER_PROVISION: "true"}
    sim.create(machine_deployment("workers", shape, replicas=2, annotations=annotations))
    sim.settle()
    chosen = sim.machine_names()[0]
    sim.annotate(MACHINES, chosen, {ANNOTATION_NEVER_PROVISION: "false"})
    sim.advance(10)
    provided = {m["metadata"]["name"]: m["spec"].get("providerID") for m in sim.machines()}
    assert [name for name, pid in provided.items() if pid] == [chosen]


def test_a_malformed_delay_falls_back_to_the_default(caplog: pytest.LogCaptureFixture) -> None:
    sim = new_sim(provision_delay=10)
    annotations = {ANNOTATION_PROVISION_DELAY: "soon"}
    sim.create(machine_deployment("workers", "v1beta2", replicas=1, annotations=annotations))
    with caplog.at_level(logging.WARNING):
        sim.advance(10)
    assert sim.machines()[0]["spec"]["providerID"]
    assert "provision-delay" in caplog.text
