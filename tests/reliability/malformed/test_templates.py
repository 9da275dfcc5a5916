"""Scalable resources whose templates point at infrastructure or bootstrap objects that are
missing, unreadable or malformed, next to a good MachineDeployment.

What the user reads depends on whether the resource is still usable: one whose shape the
annotations give keeps launching with a caveat on the NodeClass (a Normal Event for a missing
infrastructure template, a Warning one for kubelet settings the kubelet would refuse); one left
with no shape is left out, with a Warning naming the reference. Either way the good resource is
scaled in the same round. A missing bootstrap config is not among them: Cluster API reports it
on the MachineSet, and clusters (the simulator's catalogs among them) that declare no kubeadm
config at all are common, so the kubelet defaults apply without a word.
"""

from __future__ import annotations

from typing import Any

import pytest

from .world import BOOTSTRAP, CA, INFRA, NAMESPACE, NODECLASS, PRICE, World

DOCKER = "DockerMachineTemplate"
KUBEADM = "KubeadmConfigTemplate"
NO_SHAPE = {CA + "cpu": None, CA + "memory": None}


def _infra(kind: str = DOCKER, name: str = "missing", **extra: Any) -> dict[str, Any]:
    return {"infrastructureRef": {"apiGroup": INFRA, "kind": kind, "name": name, **extra}}


def _bootstrap(name: str = "missing", kind: str = KUBEADM) -> dict[str, Any]:
    return {"bootstrap": {"configRef": {"apiGroup": BOOTSTRAP, "kind": kind, "name": name}}}


def _docker_template(name: str, status: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{INFRA}/v1beta1",
        "kind": DOCKER,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"template": {"spec": {}}},
        "status": status,
    }


def _kubeadm_template(name: str, kubelet_args: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": f"{BOOTSTRAP}/v1beta2",
        "kind": KUBEADM,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "template": {
                "spec": {
                    "joinConfiguration": {
                        "nodeRegistration": {
                            "kubeletExtraArgs": [
                                {"name": k, "value": v} for k, v in kubelet_args.items()
                            ]
                        }
                    }
                }
            }
        },
    }


# (id, objects to create first, template spec, annotations, usable?, event reason, words)
Case = tuple[
    str, list[dict[str, Any]], dict[str, Any], dict[str, str | None], bool, str, tuple[str, ...]
]
CASES: list[Case] = [
    (
        "infrastructure-missing-with-annotations",
        [],
        _infra(),
        {},
        True,
        "InfrastructureTemplateNotFound",
        (f"infrastructure template {DOCKER} default/missing not found", "annotations only"),
    ),
    (
        "infrastructure-missing-without-annotations",
        [],
        _infra(),
        NO_SHAPE,
        False,
        "InfrastructureTemplateNotFound",
        ("no cpu capacity", f"{DOCKER} default/missing not found"),
    ),
    (
        "infrastructure-kind-not-served",
        [],
        _infra(kind="FooMachineTemplate"),
        NO_SHAPE,
        False,
        "InfrastructureTemplateNotServed",
        ("FooMachineTemplate",),
    ),
    (
        "infrastructure-ref-without-name",
        [],
        {"infrastructureRef": {"apiGroup": INFRA, "kind": DOCKER}},
        NO_SHAPE,
        False,
        "InvalidInfrastructureRef",
        ("spec.template.spec.infrastructureRef needs a kind and a name",),
    ),
    (
        "template-capacity-not-a-map",
        [_docker_template("odd", {"capacity": "8 cores"})],
        _infra(name="odd"),
        NO_SHAPE,
        False,
        "InvalidShape",
        (f"{DOCKER} default/odd: status.capacity is not a map",),
    ),
    (
        "template-capacity-garbage",
        [_docker_template("odd", {"capacity": {"cpu": "eight", "memory": "32Gi"}})],
        _infra(name="odd"),
        NO_SHAPE,
        False,
        "InvalidShape",
        (f"{DOCKER} default/odd status.capacity.cpu='eight'",),
    ),
    (
        "template-capacity-without-memory",
        [_docker_template("odd", {"capacity": {"cpu": "8"}})],
        _infra(name="odd"),
        NO_SHAPE,
        False,
        "NoShape",
        ("no memory capacity", f"status.capacity.memory on {DOCKER} default/odd"),
    ),
    (
        "template-memory-in-bytes-by-mistake",
        [_docker_template("odd", {"capacity": {"cpu": "8", "memory": "32"}})],
        _infra(name="odd"),
        NO_SHAPE,
        False,
        "InvalidShape",
        ("memory capacity (template status)='32'", "a unit missing"),
    ),
    (
        "template-node-info-not-an-object",
        [_docker_template("odd", {"capacity": {"cpu": "8"}, "nodeInfo": "linux"})],
        _infra(name="odd"),
        NO_SHAPE,
        False,
        "InvalidShape",
        ("status.nodeInfo is not an object",),
    ),
    (
        "bootstrap-max-pods-garbage",
        [_kubeadm_template("odd", {"max-pods": "many"})],
        _bootstrap(name="odd"),
        {},
        True,
        "InvalidKubeletConfiguration",
        ("max-pods", "'many'"),
    ),
    (
        "bootstrap-kube-reserved-garbage",
        [_kubeadm_template("odd", {"kube-reserved": "cpu=lots"})],
        _bootstrap(name="odd"),
        {},
        True,
        "InvalidKubeletConfiguration",
        ("kube-reserved", "'lots'"),
    ),
]


@pytest.mark.parametrize("case", [pytest.param(case, id=case[0]) for case in CASES])
def test_a_template_reference_that_leads_nowhere_is_named_and_the_good_resource_launches(
    case: Case,
) -> None:
    _, objects, template_spec, annotations, usable, reason, words = case
    world = World()
    world.server.apply_manifests(objects)
    # Dearer than the good resource: a usable one with a caveat must not be the one chosen.
    world.scalable(
        "MachineDeployment",
        "bad",
        annotations={PRICE: "0.5", **annotations},
        template_spec=template_spec,
    )
    world.deploy()
    world.run()

    subject = "MachineDeployment default/bad"
    ready = world.nodeclass_ready()
    assert ready["status"] == "True", ready
    section = "notes:" if usable else "left out:"
    listed = ready["message"].split(section, 1)[-1].split("\n- ")
    line = next((x for x in listed if x.startswith(subject)), None)
    assert line is not None, ready["message"]
    assert all(word in line for word in words), line
    event = world.event_about(subject, *words)
    assert (event.kind, event.name, event.reason) == ("ClusterAPINodeClass", NODECLASS, reason)
    warned = not usable or reason != "InfrastructureTemplateNotFound"
    assert event.type == ("Warning" if warned else "Normal")
    world.assert_good_resource_served()
