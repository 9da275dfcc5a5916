"""A controller killed at random steps of CAPAFleet launches and deletes, restarted each time
with nothing in memory: no instance leaked, none launched twice for one NodeClaim, and every
Machine left has its instance.

A "step" is every write the plugin makes, to Kubernetes (create, patch, delete) or to EC2
(launch template writes, CreateFleet, TerminateInstances), and the moment CreateFleet returned;
before each one, a seeded coin decides whether the process dies there.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from karpenter_capi.core.errors import InstanceNotFoundError
from karpenter_capi.core.kube import NODECLAIMS
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.plugin_host import PluginCallError, PluginEnvironment, Plugins
from karpenter_capi.plugins.capa.adopt import aws_machines
from karpenter_capi.plugins.capa.plugin import CapaPlugin
from karpenter_capi.plugins.generic_capi.plugin import GenericCapiPlugin
from tests.plugins.capa.fleet_env import NAMESPACE, REGION, FleetAws, FleetWorld
from tests.support.aws import fake_credentials

AWS_MACHINES = aws_machines("infrastructure.cluster.x-k8s.io/v1beta2")
_EC2_WRITES = (
    "CreateFleet",
    "CreateLaunchTemplate",
    "CreateLaunchTemplateVersion",
    "DeleteLaunchTemplateVersions",
    "TerminateInstances",
)


class Killed(Exception):
    """The controller process died here."""


class Reaper:
    """Decides, step by step, whether the controller dies (seeded)."""

    def __init__(self, seed: int, rate: float) -> None:
        self.rand = random.Random(seed)
        self.rate = rate
        self.armed = True
        self.kills = 0

    def step(self, what: str) -> None:
        if self.armed and self.rand.random() < self.rate:
            self.kills += 1
            raise Killed(what)


class DyingClient:
    """The management client of a controller that may die before any write."""

    def __init__(self, inner: Any, reaper: Reaper) -> None:
        self._inner = inner
        self._reaper = reaper

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if name not in ("create", "patch", "update", "delete"):
            return target

        def write(*args: Any, **kwargs: Any) -> Any:
            self._reaper.step(name)
            return target(*args, **kwargs)

        return write


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[FleetAws]:
    fake_credentials(monkeypatch)
    with mock_aws():
        doubles = FleetAws()
        doubles.queue_prices()
        yield doubles


def _stack(world: FleetWorld, reaper: Reaper) -> Plugins:
    capa = CapaPlugin(world.aws, background_refresh=False)
    return Plugins.from_objects(
        [("generic_capi", GenericCapiPlugin), ("capa", capa)],
        PluginEnvironment(
            workload=world.server,
            management=DyingClient(world.server, reaper),  # type: ignore[arg-type]
            clock=world.clock,
            logger=__import__("logging").getLogger("test.capa.crash"),
            options={},
        ),
    )


def _ever_launched(world: FleetWorld, nodeclaim: str) -> list[dict[str, Any]]:
    found = world.aws.catalog.describe_instances(
        Filters=[{"Name": "tag:karpenter.sh/nodeclaim", "Values": [nodeclaim]}]
    )
    return [i for r in found["Reservations"] for i in r["Instances"]]


@pytest.mark.parametrize("seed", range(6))
def test_killed_at_random_steps_the_fleet_launches_once_and_deletes_cleanly(
    aws: FleetAws, seed: int
) -> None:
    world = FleetWorld(aws)
    reaper = Reaper(seed, rate=0.3)
    for operation in _EC2_WRITES:
        aws.catalog.meta.events.register(
            f"before-call.ec2.{operation}", lambda op=operation, **_: reaper.step(op)
        )
    aws.catalog.meta.events.register(
        "after-call.ec2.CreateFleet", lambda **_: reaper.step("after CreateFleet")
    )
    names = ["general-a1", "general-b2", "general-c3"]
    for name in names:
        world.nodeclaim(name)
    plugins = _stack(world, reaper)
    launched: dict[str, str] = {}
    for _ in range(200):
        pending = [n for n in names if n not in launched]
        if not pending:
            break
        name = reaper.rand.choice(pending)
        try:
            result = world.create(name, plugins)
        except (Killed, PluginCallError):
            plugins = _stack(world, reaper)  # restarted: nothing in memory
            continue
        if result.provider_id:
            launched[name] = result.provider_id
            continue
        machine = world.machine(name)
        if not (machine["spec"].get("bootstrap") or {}).get("dataSecretName"):
            reaper.armed = False
            world.bootstrap_ready(name)  # CABPK and CAPI, which never die with us
            reaper.armed = True
    assert sorted(launched) == names
    assert reaper.kills > 0
    for name, provider_id in launched.items():
        [instance] = _ever_launched(world, name)  # launched once, whatever the kills
        assert provider_id.endswith(instance["InstanceId"])
        awsm = world.server.get(AWS_MACHINES, name, NAMESPACE)
        assert awsm["spec"]["providerID"] == provider_id
        assert world.machine(name)["metadata"]["name"] == name

    # Delete one node, dying along the way too.
    victim = names[0]
    for _ in range(100):
        try:
            plugins.delete(world.claim(victim))
        except InstanceNotFoundError:
            break
        except (Killed, PluginCallError):
            plugins = _stack(world, reaper)
    else:
        pytest.fail("the delete never finished")
    with pytest.raises(NotFound):
        world.machine(victim)
    assert [i["State"]["Name"] for i in _ever_launched(world, victim)] == ["terminated"]
    for name in names[1:]:
        assert len(aws.instances(name)) == 1


class _DiesBeforeAwsMachine:
    """A management client whose process dies right before it would write the AWSMachine:
    after the bootstrap secret went to Secrets Manager."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if name != "create":
            return target

        def create(resource: Any, *args: Any, **kwargs: Any) -> Any:
            if resource.kind == "AWSMachine":
                raise Killed("create AWSMachine")
            return target(resource, *args, **kwargs)

        return create


def _bootstrap_secrets(aws: FleetAws) -> dict[str, str]:
    """Secret name -> the NodeClaim its tag names."""
    found = boto3.client("secretsmanager", region_name=REGION).list_secrets()["SecretList"]
    return {
        s["Name"]: {t["Key"]: t["Value"] for t in s.get("Tags") or []}.get(
            "karpenter.sh/nodeclaim", ""
        )
        for s in found
    }


def _delete_until_gone(plugins: Plugins, claim: Any) -> None:
    for _ in range(10):
        plugins.delete(claim)


def test_a_bootstrap_secret_left_by_a_crash_goes_once_its_nodeclaim_is_gone(
    aws: FleetAws,
) -> None:
    world = FleetWorld(aws)
    for name in ("kept", "crashed"):
        world.nodeclaim(name)
        world.create(name)
        world.bootstrap_ready(name)
    assert world.create("kept").provider_id
    dying = Plugins.from_objects(
        [("generic_capi", GenericCapiPlugin), ("capa", CapaPlugin(aws, background_refresh=False))],
        PluginEnvironment(
            workload=world.server,
            management=_DiesBeforeAwsMachine(world.server),  # type: ignore[arg-type]
            clock=world.clock,
            logger=__import__("logging").getLogger("test.capa.crash"),
            options={},
        ),
    )
    with pytest.raises((Killed, PluginCallError)):
        world.create("crashed", dying)
    secrets = _bootstrap_secrets(aws)
    assert sorted(set(secrets.values())) == ["crashed", "kept"]  # each chunk names its claim
    # The NodeClaim goes before the launch was finished: its instance is ended by delete,
    # but CAPA never heard of its secret.
    plugins = world.new_plugins()
    with pytest.raises(InstanceNotFoundError):  # nothing left to end
        _delete_until_gone(plugins, world.claim("crashed"))
    world.server.delete(NODECLAIMS, "crashed")
    assert "crashed" in _bootstrap_secrets(aws).values()
    plugins.list_instances()  # garbage collection
    assert set(_bootstrap_secrets(aws).values()) == {"kept"}
