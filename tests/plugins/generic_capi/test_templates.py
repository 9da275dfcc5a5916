"""Node shapes from infrastructure machine templates, for any provider kind and CAPI version."""

from __future__ import annotations

from typing import Any, cast

from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.discovery import capi_resources
from karpenter_capi.core.kube.errors import Forbidden
from karpenter_capi.core.kube.resources import NAMESPACES, Resource
from karpenter_capi.plugins.generic_capi.inventory import (
    Inventory,
    TemplateReader,
    build_inventory,
)
from karpenter_capi.plugins.generic_capi.selection import select
from karpenter_capi.plugins.generic_capi.sources import (
    REASON_TEMPLATE_UNREADABLE,
    TemplateError,
    read_kubelet_settings,
)
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from tests.cyclic import cyclic_garbage, exceptions_in
from tests.plugins.generic_capi.inventory_builders import (
    INFRA,
    PRICE,
    P,
    add,
    machine_template,
    new_env,
    scalable,
    sized,
)

DOCKER_TEMPLATES = Resource(
    INFRA, "v1beta1", "dockermachinetemplates", "DockerMachineTemplate", True
)


def _build_with(client: KubeClient, reader: TemplateReader, version: str = "") -> Inventory:
    capi = capi_resources(client, {"CAPI_VERSION": version} if version else {})
    selection = select(client, capi, {})
    return build_inventory(selection.selected, templates=reader, problems=selection.problems)


def _build(server: InMemoryAPIServer, reader: TemplateReader, version: str = "") -> Inventory:
    return _build_with(server, reader, version)


def _capacity(inventory: Inventory) -> dict[str, str]:
    [instance_type] = inventory.instance_types
    return instance_type.capacity.to_dict()


def test_a_missing_template_leaves_no_cyclic_garbage() -> None:
    """The read's error, kept for the notice, without its traceback: with it, its frames held
    the whole inventory in a cycle, a collector's walk for every NodePool's every round."""
    server, clock, _, capi = new_env()
    add(
        server,
        capi,
        scalable("MachineDeployment", "annotated", template="gone", annotations=sized()),
    )
    reader = TemplateReader(server, clock)
    _build(server, reader)  # discovery and the reader's cache settled first
    with cyclic_garbage() as found:
        inventory = _build(server, reader)
        del inventory
    assert exceptions_in(found) == []
    assert len(found) == 0


def test_a_v1beta2_reference_finds_a_kind_served_only_at_v1beta1() -> None:
    # The sim serves DockerMachineTemplate at v1beta1 only, while the infrastructure group's
    # preferred version is v1beta2 (AWS kinds): the version is discovered per kind.
    server, clock, _, capi = new_env()
    add(
        server,
        capi,
        machine_template(
            "workers",
            capacity={"cpu": "4", "memory": "16Gi", "ephemeral-storage": "80Gi"},
            architecture="arm64",
        ),
        scalable("MachineDeployment", "md", template="workers", annotations={PRICE: "0.1"}),
    )
    inventory = _build(server, TemplateReader(server, clock))
    assert inventory.problems == inventory.notices == []
    assert _capacity(inventory) == {
        "cpu": "4",
        "memory": "16Gi",
        "ephemeral-storage": "80Gi",
        "pods": "110",
    }
    [instance_type] = inventory.instance_types
    assert instance_type.name == "capi-4cpu-16gib-arm64"
    assert instance_type.requirements["kubernetes.io/arch"] == frozenset({"arm64"})


def test_a_v1beta1_reference_with_api_version_and_namespace() -> None:
    server, clock, _, capi = new_env()
    server.create(NAMESPACES, {"metadata": {"name": "capa"}})
    add(
        server,
        capi,
        machine_template(
            "aws-workers",
            kind="AWSMachineTemplate",
            version="v1beta2",
            namespace="capa",
            capacity={"cpu": "2", "memory": "8Gi"},
            operating_system="windows",
        ),
        scalable(
            "MachineDeployment",
            "md",
            namespace="capa",
            template="aws-workers",
            template_kind="AWSMachineTemplate",
            annotations=sized(cpu="8"),
            v1beta1=True,
        ),
    )
    inventory = _build(server, TemplateReader(server, clock), "v1beta1")
    assert inventory.problems == []
    # The annotation's cpu beats the template's; the template's OS still counts.
    assert _capacity(inventory) == {"cpu": "8", "memory": "8Gi", "pods": "110"}
    assert inventory.instance_types[0].requirements["kubernetes.io/os"] == frozenset({"windows"})


def test_a_missing_template_is_a_note_when_annotations_suffice_and_a_problem_otherwise() -> None:
    server, clock, _, capi = new_env()
    add(
        server,
        capi,
        scalable("MachineDeployment", "annotated", template="gone", annotations=sized()),
        scalable("MachineDeployment", "bare", template="gone", annotations={P + "cpu": "2"}),
    )
    inventory = _build(server, TemplateReader(server, clock))
    assert [r.name for r in inventory.resources] == ["annotated"]
    [note] = [n for n in inventory.notices if n.reason != "PriceEstimated"]
    assert (note.name, note.reason, note.message) == (
        "annotated",
        "InfrastructureTemplateNotFound",
        "infrastructure template DockerMachineTemplate default/gone not found; the node shape "
        "comes from the annotations only",
    )
    [problem] = inventory.problems
    assert (problem.name, problem.reason) == ("bare", "InfrastructureTemplateNotFound")
    assert problem.message == (
        "no memory capacity: annotation capacity.cluster-autoscaler.kubernetes.io/memory is "
        "required; and infrastructure template DockerMachineTemplate default/gone not found"
    )


def test_a_template_kind_or_group_nobody_serves_degrades_to_a_problem_on_that_resource() -> None:
    server, clock, _, capi = new_env()
    unknown_group = scalable("MachineDeployment", "exotic", template="t", template_kind="X")
    unknown_group["spec"]["template"]["spec"]["infrastructureRef"]["apiGroup"] = "infra.example"
    add(
        server,
        capi,
        scalable("MachineDeployment", "unserved", template="t", template_kind="FooMachineTemplate"),
        unknown_group,
        scalable("MachineDeployment", "fine", annotations=sized()),
    )
    inventory = _build(server, TemplateReader(server, clock))
    assert [r.name for r in inventory.resources] == ["fine"]
    problems = {p.name: (p.reason, p.message) for p in inventory.problems}
    assert problems["unserved"][0] == "InfrastructureTemplateNotServed"
    assert problems["unserved"][1].endswith(
        "infrastructure template kind FooMachineTemplate "
        "(foomachinetemplates.infrastructure.cluster.x-k8s.io) is not served at "
        "infrastructure.cluster.x-k8s.io/v1beta2, infrastructure.cluster.x-k8s.io/v1beta1"
    )
    assert problems["exotic"] == (
        "InfrastructureTemplateNotServed",
        "no cpu capacity: annotation capacity.cluster-autoscaler.kubernetes.io/cpu is required; "
        "and infrastructure template X default/t: API group infra.example is not served (is the "
        "infrastructure provider installed?)",
    )


def test_an_unreadable_template_is_reported_with_the_api_error() -> None:
    server, clock, _, capi = new_env()
    add(
        server,
        capi,
        machine_template("workers", capacity={"cpu": "2", "memory": "4Gi"}),
        scalable("MachineDeployment", "md", template="workers"),
    )
    server.faults.fail("get", "dockermachinetemplates", Forbidden("RBAC says no"), times=None)
    inventory = _build(server, TemplateReader(server, clock))
    [problem] = inventory.problems
    assert problem.reason == "InfrastructureTemplateUnreadable"
    assert "cannot read infrastructure template DockerMachineTemplate default/workers" in (
        problem.message
    )
    assert "RBAC says no" in problem.message


def test_templates_are_read_once_a_minute_not_every_round() -> None:
    server, clock, _, capi = new_env()
    template = machine_template("workers", capacity={"cpu": "2", "memory": "4Gi"})
    add(server, capi, template, scalable("MachineDeployment", "md", template="workers"))
    reader = TemplateReader(server, clock)
    assert _capacity(_build(server, reader))["cpu"] == "2"

    def resize(cpu: str) -> None:
        live: dict[str, Any] = server.get(DOCKER_TEMPLATES, "workers", "default")
        live["status"]["capacity"]["cpu"] = cpu
        server.update(DOCKER_TEMPLATES, live, subresource="status")

    resize("4")
    clock.advance(59)
    assert _capacity(_build(server, reader))["cpu"] == "2"
    clock.advance(1)
    assert _capacity(_build(server, reader))["cpu"] == "4"


def test_discovery_works_the_same_through_the_official_client_over_http() -> None:
    from karpenter_capi.core.kube.official import OfficialClient
    from karpenter_capi.sim.apiserver.http import HttpFront

    server, clock, _, capi = new_env()
    add(
        server,
        capi,
        machine_template("workers", capacity={"cpu": "2", "memory": "4Gi"}),
        scalable("MachineDeployment", "md", template="workers"),
        scalable("MachineDeployment", "unserved", template="t", template_kind="FooMachineTemplate"),
    )
    with HttpFront(server, host="127.0.0.1", port=0) as front:
        client = OfficialClient.from_url(front.url)
        try:
            inventory = _build_with(client, TemplateReader(client, clock))
        finally:
            client.close()
    assert _capacity(inventory) == {"cpu": "2", "memory": "4Gi", "pods": "110"}
    assert [(p.name, p.reason) for p in inventory.problems] == [
        ("unserved", "InfrastructureTemplateNotServed")
    ]


def test_a_missing_template_is_remembered_and_found_once_the_bound_passes() -> None:
    """A template that stays missing (a provider whose shapes come from annotations alone) is
    not looked for on every round: a minute after the first miss, then five minutes after
    each miss that follows, discovery included. One created later is found within that."""
    server, clock, _, capi = new_env()
    add(server, capi, scalable("MachineDeployment", "md", template="later", annotations=sized()))
    reader = TemplateReader(server, clock)

    def reads() -> int:
        """Requests for templates one inventory build makes."""
        before = server.requests.by_resource()
        inventory = _build(server, reader)
        assert [r.name for r in inventory.resources] == ["md"]
        after = server.requests.by_resource()
        return sum(n - before.get(k, 0) for k, n in after.items() if "templates" in k)

    assert reads() > 0  # the first miss
    clock.advance(60)
    assert reads() > 0  # missing a minute later: looked for again
    for _ in range(4):
        clock.advance(60)
        assert reads() == 0  # remembered for five minutes now
    add(server, capi, machine_template("later", capacity={"cpu": "2", "memory": "8Gi"}))
    clock.advance(60)
    inventory = _build(server, reader)
    assert not [n for n in inventory.notices if n.reason == "InfrastructureTemplateNotFound"]


def test_served_versions_are_discovered_once_per_five_minutes_while_templates_are_found() -> None:
    server, clock, _, capi = new_env()
    template = machine_template("workers", capacity={"cpu": "2", "memory": "4Gi"})
    add(server, capi, template, scalable("MachineDeployment", "md", template="workers"))
    discoveries: list[str] = []
    served = server.served_versions

    def counted(group: str) -> list[str]:
        discoveries.append(group)
        return served(group)

    server.served_versions = counted  # type: ignore[method-assign]
    reader = TemplateReader(server, clock)
    for _ in range(5):
        assert _capacity(_build(server, reader))["cpu"] == "2"
        clock.advance(60)  # each template read again
    assert [group for group in discoveries if group == INFRA] == [INFRA]


def test_a_template_kind_no_crd_serves_is_looked_for_again_after_five_minutes() -> None:
    """No CRD serves the kind: one comes with a provider's installation, so the answer is
    kept five minutes from the first miss, then the kind is looked for (discovery included)."""
    server, clock, _, capi = new_env()
    add(
        server,
        capi,
        scalable(
            "MachineDeployment",
            "md",
            template="t",
            template_kind="FooMachineTemplate",
            annotations=sized(),
        ),
    )
    reader = TemplateReader(server, clock)
    asked: list[str] = []  # discoveries, gets and lists of the kind (its 404s are not counted)
    served, get, listed = server.served_versions, server.get, server.list

    def discover(group: str) -> list[str]:
        asked.append(f"discover {group}")
        return served(group)

    def counted_get(resource: Resource, *args: Any, **kw: Any) -> Any:
        asked.append(f"get {resource.plural}")
        return get(resource, *args, **kw)

    def counted_list(resource: Resource, *args: Any, **kw: Any) -> Any:
        asked.append(f"list {resource.plural}")
        return listed(resource, *args, **kw)

    server.served_versions = discover  # type: ignore[method-assign]
    server.get = counted_get  # type: ignore[method-assign]
    server.list = counted_list  # type: ignore[method-assign]

    def reads() -> list[str]:
        asked.clear()
        _build(server, reader)
        return sorted(a for a in asked if "foo" in a or a == f"discover {INFRA}")

    first = reads()
    assert f"discover {INFRA}" in first
    assert "get foomachinetemplates" in first
    for _ in range(4):
        clock.advance(60)
        assert reads() == []
    clock.advance(61)
    assert reads() == first  # looked for again, its group's versions too


def test_an_unreadable_kubeadm_config_leaves_no_cyclic_garbage() -> None:
    """The kubelet settings' error, kept for the notice, without its traceback either."""

    class _Refusing:
        def read_bootstrap(self, namespace: str, ref: Any) -> Any:
            raise TemplateError(REASON_TEMPLATE_UNREADABLE, "cannot read bootstrap config")

    obj = {
        "spec": {
            "template": {
                "spec": {
                    "bootstrap": {
                        "configRef": {
                            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
                            "kind": "KubeadmConfigTemplate",
                            "name": "workers",
                        }
                    }
                }
            }
        }
    }

    def reason() -> str:
        # As the inventory does: the error kept in a local of the caller, whose frame the
        # traceback's frames reference (``f_back``).
        settings, error = read_kubelet_settings(cast(TemplateReader, _Refusing()), "default", obj)
        assert settings is None
        assert error is not None
        return error.reason

    with cyclic_garbage() as found:
        assert reason() == REASON_TEMPLATE_UNREADABLE
    assert exceptions_in(found) == []
