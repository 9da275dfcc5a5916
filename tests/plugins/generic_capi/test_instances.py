"""Get and List: answered from the member-Machine cache, never by listing every Machine, and
"gone" only when it is true."""

from __future__ import annotations

import pytest

from karpenter_capi.core.errors import InstanceNotFoundError
from karpenter_capi.core.kube import MACHINES
from karpenter_capi.core.kube.discovery import capi_resources
from karpenter_capi.plugins.generic_capi.binding import (
    ANNOTATION_NODECLAIM,
    LABEL_MEMBER,
    MachineFacts,
    machine_facts,
)
from karpenter_capi.plugins.generic_capi.instances import (
    LABEL_SCALE_DOWN_HEADROOM,
    MachineCache,
)
from tests.plugins.generic_capi.env import SHAPES, Env, names, new_env

MIN_SIZE = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"


def launched(env: Env, count: int, **deployment: object) -> dict[str, str]:
    env.deployment("md-a", replicas=1, **deployment)  # type: ignore[arg-type]
    env.driver.advance(30)  # one Machine the user runs, not ours
    env.clock.advance(1)
    claims = names("nc", count)
    for name in claims:
        env.nodeclaim(name)
    env.launch_all(claims)
    return {name: machines[0] for name, machines in env.bindings().items()}


def machine_lists(env: Env) -> list[str]:
    return [selector for plural, selector in env.plugin_management.lists if plural == "machines"]


@pytest.mark.parametrize("shape", SHAPES)
def test_get_answers_from_the_cache_and_never_lists_all_machines(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = new_env(shape, monkeypatch=monkeypatch)
    bound = launched(env, 10)
    env.restart()
    env.plugin_management.lists.clear()

    instances = [env.get(env.provider_id(name)) for name in sorted(bound)]

    assert [i.name for i in instances] == [f"default/{bound[n]}" for n in sorted(bound)]
    assert [i.nodeclaim_name for i in instances] == sorted(bound)
    assert all(i.provider_id == f"sim://default/{i.name.split('/')[1]}" for i in instances)
    assert all(i.zone == "zone-a" and i.state and i.created_at for i in instances)
    # One list of the member Machines for ten gets, and no unselected list ever.
    assert machine_lists(env) == [LABEL_MEMBER]
    env.clock.advance(11)
    env.get(env.provider_id("nc-000"))
    assert machine_lists(env) == [LABEL_MEMBER, LABEL_MEMBER]


def test_a_machine_bound_by_this_process_is_found_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    env = new_env(monkeypatch=monkeypatch, options={"cache_ttl": "3600"})
    env.deployment("md-a")
    env.plugins.list_instances()  # fill the cache before anything is bound
    env.nodeclaim("nc")
    env.launch_all(["nc"])
    lists = len(machine_lists(env))

    instance = env.get(env.provider_id("nc"))

    assert instance.nodeclaim_name == "nc"
    assert len(machine_lists(env)) == lists


def test_a_gone_machine_of_ours_is_not_found(monkeypatch: pytest.MonkeyPatch) -> None:
    env = new_env(monkeypatch=monkeypatch, delete_delay=0)
    bound = launched(env, 2)
    provider_id = env.provider_id("nc-000")
    env.api.delete(MACHINES, bound["nc-000"], "default")
    env.driver.advance(5)
    env.clock.advance(2)

    with pytest.raises(InstanceNotFoundError, match="no longer exists"):
        env.get(provider_id)
    assert env.get(env.provider_id("nc-001")).nodeclaim_name == "nc-001"


def test_an_id_that_is_not_ours_is_left_to_other_plugins(env: Env) -> None:
    launched(env, 1)

    with pytest.raises(InstanceNotFoundError, match="no enabled plugin knows it"):
        env.get("aws:///us-east-1a/i-0abc")


def test_list_returns_the_machines_this_plugin_bound(env: Env) -> None:
    bound = launched(env, 3)
    # A member label without our annotation (a Machine template carrying it) is not ours.
    (baseline,) = [m for m in env.machines() if m["metadata"]["name"] not in bound.values()]
    env.api.patch(
        MACHINES,
        baseline["metadata"]["name"],
        {"metadata": {"labels": {LABEL_MEMBER: ""}}},
        "default",
    )

    instances = env.plugins.list_instances()

    assert sorted((i.nodeclaim_name, i.name) for i in instances) == sorted(
        (claim, f"default/{machine}") for claim, machine in bound.items()
    )
    assert machine_lists(env)[-1] == LABEL_MEMBER


def test_get_reports_the_scale_down_headroom_under_a_min_size(
    env: Env,
) -> None:
    launched(env, 2, annotations={MIN_SIZE: "1"})

    instance = env.get(env.provider_id("nc-000"))

    # Three replicas (the user's and two launched), min size one: two can go.
    assert instance.labels == {LABEL_SCALE_DOWN_HEADROOM: "2"}


def _member(name: str, claim: str, provider_id: str, *, deleting: bool = False) -> MachineFacts:
    meta: dict[str, object] = {
        "name": name,
        "namespace": "default",
        "labels": {LABEL_MEMBER: ""},
        "annotations": {ANNOTATION_NODECLAIM: claim} if claim else {},
    }
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return machine_facts({"metadata": meta, "spec": {"providerID": provider_id}})


def test_the_cache_indexes_follow_every_write(monkeypatch: pytest.MonkeyPatch) -> None:
    # bound_to, bound_claims and by_provider_id answer from indexes kept in step with what
    # the cache is told, not by scanning it.
    env = new_env(monkeypatch=monkeypatch, options={"cache_ttl": "3600"})
    cache = MachineCache(env.plugin_management, capi_resources(env.api, {}), env.clock, 3600)
    cache.refresh()
    a = _member("m-a", "nc-a", "sim://a")
    b = _member("m-b", "nc-b", "sim://b")
    cache.observe_all([a, b])
    assert cache.bound_to("nc-a") == [a]
    assert cache.bound_claims() == {"nc-a", "nc-b"}
    assert cache.by_provider_id("sim://b") == b

    rebound = _member("m-a", "nc-c", "sim://a2")
    cache.observe_all([rebound, _member("m-b", "nc-b", "sim://b", deleting=True)])
    assert cache.bound_to("nc-a") == []
    assert cache.bound_to("nc-c") == [rebound]
    assert cache.bound_claims() == {"nc-c"}  # a deleting Machine binds nobody
    assert cache.by_provider_id("sim://a2") == rebound

    cache.forget("default", "m-a")
    assert cache.bound_to("nc-c") == []
    assert cache.bound_claims() == set()
