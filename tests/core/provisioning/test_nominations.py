"""Planned pods are nominated on their NodeClaim's Node (KEP-5278), kept, and cleared.

The writer reads the informer caches and writes ``status.nominatedNodeName`` through
``pods/status``; these tests drive it pass by pass over an in-memory API server.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.errors import Invalid, ServiceUnavailable
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES, PODS
from karpenter_capi.core.provisioning.nominations import (
    GATE,
    NominationController,
    Writers,
    log_mode,
    nomination_mode,
)
from karpenter_capi.sim.apiserver.version import SIMULATED_CONTROL_PLANE
from tests.core.lifecycle.harness import Env, new_env

NAMESPACE = "default"


class Plan:
    """What the provisioner's last round placed where (pod key -> NodeClaim or node)."""

    def __init__(self) -> None:
        self.placed: dict[str, str] | None = {}

    def __call__(self) -> Mapping[str, str] | None:
        return self.placed


@pytest.fixture
def env() -> Env:
    return new_env()


def _pod(env: Env, name: str, *, nominated: str | None = None) -> None:
    env.api.create(
        PODS,
        {
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"containers": [{"name": "c", "image": "app"}]},
        },
        NAMESPACE,
    )
    if nominated is not None:
        _set_nominated(env, name, nominated)


def _set_nominated(env: Env, name: str, node: str | None) -> None:
    env.api.patch(
        PODS, name, {"status": {"nominatedNodeName": node}}, NAMESPACE, subresource="status"
    )


def _nominated(env: Env, name: str) -> str | None:
    value: str | None = (env.api.get(PODS, name, NAMESPACE).get("status") or {}).get(
        "nominatedNodeName"
    )
    return value


def _registered(env: Env, claim: str, node: str, **annotations: str) -> None:
    """A NodeClaim whose Node has just joined (not Ready)."""
    env.nodeclaim(claim, annotations=annotations or None)
    env.node(node, f"fake:///{node}")
    env.api.patch(NODECLAIMS, claim, {"status": {"nodeName": node}}, subresource="status")


def _pass(env: Env, controller: NominationController) -> None:
    env.caches.sync()
    controller.run_once()
    env.caches.sync()


def _pod_version(env: Env, name: str) -> str:
    return str(env.api.get(PODS, name, NAMESPACE)["metadata"]["resourceVersion"])


def test_planned_pods_are_nominated_once_their_node_exists_before_it_is_ready(
    env: Env,
) -> None:
    plan = Plan()
    controller = NominationController(env.ctx, plan)
    _pod(env, "web-1")
    _pod(env, "web-2")
    env.nodeclaim("general-a")  # launched, no Node yet
    plan.placed = {"default/web-1": "general-a", "default/web-2": "general-a"}
    _pass(env, controller)
    assert _nominated(env, "web-1") is None  # nothing to name yet

    env.node("node-a", "fake:///node-a")  # joins, not Ready
    env.api.patch(NODECLAIMS, "general-a", {"status": {"nodeName": "node-a"}}, subresource="status")
    _pass(env, controller)
    assert [_nominated(env, "web-1"), _nominated(env, "web-2")] == ["node-a", "node-a"]

    # Nothing changed: nothing is written again.
    before = _pod_version(env, "web-1")
    _pass(env, controller)
    assert _pod_version(env, "web-1") == before


def test_a_pod_re_planned_is_nominated_on_its_new_node_and_cleared_when_planned_nowhere(
    env: Env,
) -> None:
    plan = Plan()
    controller = NominationController(env.ctx, plan)
    _pod(env, "web")
    _registered(env, "general-a", "node-a")
    _registered(env, "general-b", "node-b")
    plan.placed = {"default/web": "general-a"}
    _pass(env, controller)
    assert _nominated(env, "web") == "node-a"

    plan.placed = {"default/web": "node-b"}  # a later round counted it on the registered Node
    _pass(env, controller)
    assert _nominated(env, "web") == "node-b"

    plan.placed = {}
    _pass(env, controller)
    assert _nominated(env, "web") is None


def test_its_nodeclaim_gone_the_nomination_is_cleared(env: Env) -> None:
    plan = Plan()
    controller = NominationController(env.ctx, plan)
    _pod(env, "web")
    _registered(env, "general-a", "node-a")
    plan.placed = {"default/web": "general-a"}
    _pass(env, controller)
    assert _nominated(env, "web") == "node-a"
    env.api.delete(NODECLAIMS, "general-a")
    _pass(env, controller)
    assert _nominated(env, "web") is None


def test_cleared_by_kube_scheduler_it_is_written_again_only_once_the_node_changes(
    env: Env,
) -> None:
    plan = Plan()
    controller = NominationController(env.ctx, plan)
    _pod(env, "web")
    _registered(env, "general-a", "node-a")
    plan.placed = {"default/web": "general-a"}
    _pass(env, controller)
    _set_nominated(env, "web", None)  # an attempt on the not-Ready node failed
    _pass(env, controller)
    assert _nominated(env, "web") is None  # no tug of war while nothing changes

    env.set_node_ready("node-a")
    _untaint(env, "node-a")  # registered: kube-scheduler may place the pod there now
    _pass(env, controller)
    assert _nominated(env, "web") == "node-a"


def _untaint(env: Env, node: str) -> None:
    env.api.patch(NODES, node, {"spec": {"taints": None}})


def test_cleared_on_a_node_that_cannot_take_the_pod_it_waits_until_the_node_can(
    env: Env,
) -> None:
    plan = Plan()
    controller = NominationController(env.ctx, plan)
    _pod(env, "web")
    _registered(env, "general-a", "node-a")
    plan.placed = {"default/web": "general-a"}
    _pass(env, controller)
    assert _nominated(env, "web") == "node-a"
    _set_nominated(env, "web", None)  # the attempt on the not-Ready node failed
    # The Node changes but is still not Ready (registration's labels, say): an attempt there
    # would fail and clear it again, so nothing is written.
    env.api.patch(NODES, "node-a", {"metadata": {"labels": {"registered": "true"}}})
    before = _pod_version(env, "web")
    _pass(env, controller)
    assert _nominated(env, "web") is None
    assert _pod_version(env, "web") == before

    env.set_node_ready("node-a")  # Ready, but still tainted karpenter.sh/unregistered
    _pass(env, controller)
    assert _nominated(env, "web") is None
    assert _pod_version(env, "web") == before

    _untaint(env, "node-a")
    _pass(env, controller)
    assert _nominated(env, "web") == "node-a"


def test_someone_else_s_nomination_and_bound_pods_are_left_alone(env: Env) -> None:
    plan = Plan()
    controller = NominationController(env.ctx, plan)
    env.node("other", "fake:///other")  # no NodeClaim holds it: preemption's nomination
    _pod(env, "preemptor", nominated="other")
    _registered(env, "general-a", "node-a")
    _pod(env, "bound")
    env.api.bind(
        {"metadata": {"name": "bound"}, "target": {"kind": "Node", "name": "node-a"}}, NAMESPACE
    )
    plan.placed = {"default/preemptor": "general-a", "default/bound": "general-a"}
    _pass(env, controller)
    assert _nominated(env, "preemptor") == "other"
    assert _nominated(env, "bound") is None


def test_one_refused_pod_stops_only_that_pod_and_is_said_once(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    plan = Plan()
    controller = NominationController(env.ctx, plan)
    _pod(env, "refused")
    _pod(env, "fine")
    _registered(env, "general-a", "node-a")
    plan.placed = {"default/refused": "general-a", "default/fine": "general-a"}
    env.api.faults.fail(
        "patch",
        "pods",
        Invalid("status.nominatedNodeName: Invalid value"),
        name="refused",
        times=None,
    )
    with caplog.at_level(logging.WARNING):
        _pass(env, controller)
        _pass(env, controller)
    assert _nominated(env, "fine") == "node-a"
    assert _nominated(env, "refused") is None
    warnings = [r for r in caplog.records if r.getMessage() == "could not nominate pod"]
    assert len(warnings) == 1
    assert warnings[0].levelno == logging.WARNING
    assert warnings[0].exc_info is None


def test_before_the_first_round_the_nodeclaims_say_what_they_were_launched_for(
    env: Env,
) -> None:
    plan = Plan()
    plan.placed = None  # a controller that has just started
    controller = NominationController(env.ctx, plan)
    _pod(env, "web")
    _registered(env, "general-a", "node-a", **{wellknown.ANNOTATION_NOMINATED_PODS: "default/web"})
    _pass(env, controller)
    assert _nominated(env, "web") == "node-a"


def test_dry_run_writes_nothing_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    env = new_env(dry_run=True)
    plan = Plan()
    controller = NominationController(env.ctx, plan)
    _pod(env, "web")
    _registered(env, "general-a", "node-a")
    plan.placed = {"default/web": "general-a"}
    with caplog.at_level(logging.INFO):
        _pass(env, controller)
        _pass(env, controller)
    assert _nominated(env, "web") is None
    said = [r for r in caplog.records if "nominate pod(s)" in r.getMessage()]
    assert [r.getMessage() for r in said] == ["would nominate pod(s) on their planned nodes"]


@pytest.mark.parametrize(
    ("git_version", "gate", "enabled", "said"),
    [
        ("v1.35.0", None, True, "kube-apiserver v1.35.0: kube-scheduler has"),
        ("v1.36.1-eks-4a1c2e", None, True, "kube-apiserver v1.36.1-eks-4a1c2e"),
        ("v1.34.2", None, False, "kube-apiserver v1.34.2 predates v1.35"),
        ("v1.36.0", False, False, f"turned off by --feature-gates {GATE}=false"),
        ("v1.33.0", True, True, f"turned on by --feature-gates {GATE}=true"),
    ],
)
def test_the_mode_follows_the_server_release_unless_the_gate_says(
    env: Env, git_version: str, gate: bool | None, enabled: bool, said: str
) -> None:
    env.api.version_info = {"gitVersion": git_version}
    mode = nomination_mode(env.api, gate)
    assert mode.enabled is enabled
    assert said in mode.why


def test_an_unreadable_release_is_said_at_warning_and_the_gate_still_decides(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    env.api.faults.fail("get", "version", ServiceUnavailable("the server is shutting down"))
    with caplog.at_level(logging.INFO):
        log_mode(nomination_mode(env.api))
    [said] = [r for r in caplog.records if "nominating planned pods" in r.getMessage()]
    assert said.levelno == logging.WARNING
    assert said.exc_info is None
    assert "version (not readable: the server is shutting down) unknown" in said.getMessage()
    env.api.faults.fail("get", "version", ServiceUnavailable("still away"))
    assert nomination_mode(env.api, True).enabled


def test_the_bare_in_memory_api_server_is_v1_31_and_the_simulator_s_control_plane_v1_35(
    env: Env,
) -> None:
    # kubectl 1.32+ would send protobuf to a newer server (the front decodes JSON only).
    assert env.api.server_version()["gitVersion"] == "v1.31.0"
    mode = nomination_mode(env.api)
    assert not mode.enabled
    assert "v1.31.0 predates v1.35" in mode.why
    env.api.version_info = dict(SIMULATED_CONTROL_PLANE)  # what scenarios and the demo play
    assert nomination_mode(env.api).enabled


def test_a_pod_whose_write_failed_while_the_api_was_away_is_nominated_on_the_next_pass(
    env: Env,
) -> None:
    plan = Plan()
    controller = NominationController(env.ctx, plan)
    _pod(env, "web-1")
    _pod(env, "web-2")
    _registered(env, "general-a", "node-a")
    plan.placed = {"default/web-1": "general-a", "default/web-2": "general-a"}
    env.api.faults.fail("patch", "pods", ServiceUnavailable("etcd leader changed"), name="web-2")
    env.caches.sync()
    with pytest.raises(ServiceUnavailable):
        controller.run_once()  # the runtime retries the pass and says so once
    _pass(env, controller)
    assert [_nominated(env, "web-1"), _nominated(env, "web-2")] == ["node-a", "node-a"]


def test_a_pass_over_what_a_quiet_pass_read_writes_nothing_but_a_new_plan_is_acted_on(
    env: Env,
) -> None:
    plan = Plan()
    controller = NominationController(env.ctx, plan)
    _pod(env, "web-1")
    _registered(env, "general-a", "node-a")
    _pass(env, controller)  # nothing planned: nothing written
    before = _pod_version(env, "web-1")
    _pass(env, controller)
    assert _pod_version(env, "web-1") == before

    # Only the plan changes (in place, no store takes a write): the next pass acts on it.
    assert plan.placed is not None
    plan.placed["default/web-1"] = "general-a"
    _pass(env, controller)
    assert _nominated(env, "web-1") == "node-a"

    # And a store change alone too: cleared by kube-scheduler, then the Node can take it.
    _set_nominated(env, "web-1", None)
    _pass(env, controller)
    assert _nominated(env, "web-1") is None
    env.set_node_ready("node-a")
    _untaint(env, "node-a")
    _pass(env, controller)
    assert _nominated(env, "web-1") == "node-a"


def test_a_pass_writes_its_nominations_together_each_pod_once(env: Env) -> None:
    plan = Plan()
    controller = NominationController(env.ctx, plan, write_concurrency=4)
    names = [f"web-{i}" for i in range(12)]
    for name in names:
        _pod(env, name)
    _registered(env, "general-a", "node-a")
    plan.placed = {f"{NAMESPACE}/{name}": "general-a" for name in names}
    writes: list[tuple[str, str]] = []
    patch = env.ctx.client.patch

    def counted(*args: object, **kwargs: object) -> object:
        writes.append((str(args[1]), threading.current_thread().name))
        return patch(*args, **kwargs)  # type: ignore[arg-type]

    env.ctx.client.patch = counted  # type: ignore[method-assign]
    _pass(env, controller)
    _pass(env, controller)
    assert [_nominated(env, name) for name in names] == ["node-a"] * 12
    assert sorted(name for name, _ in writes) == sorted(names)  # each pod once, none again
    # The pass's own thread is one lane; the process's shared writers run the others.
    helpers = {thread for _, thread in writes} - {threading.current_thread().name}
    assert all(thread.startswith("nominate-pod_") for thread in helpers)


def test_passes_share_the_writers_threads_at_most_write_concurrency_in_flight(env: Env) -> None:
    """Each pass used to start (and join) an executor of its own: a new thread for each lane
    of every pass. The writers' threads outlive a pass, so the next one finds them idle."""
    writers = Writers(idle_seconds=60)
    plan = Plan()
    controller = NominationController(env.ctx, plan, write_concurrency=4, writers=writers)
    names = [f"web-{i}" for i in range(12)]
    for name in names:
        _pod(env, name)
    _registered(env, "general-a", "node-a")
    _registered(env, "general-b", "node-b")
    lock = threading.Lock()
    in_flight = [0, 0]  # now, most
    threads: set[str] = set()
    patch = env.ctx.client.patch

    def counted(*args: object, **kwargs: object) -> object:
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight)
            threads.add(threading.current_thread().name)
        try:
            return patch(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            with lock:
                in_flight[0] -= 1

    env.ctx.client.patch = counted  # type: ignore[method-assign]
    for claim, node in (("general-a", "node-a"), ("general-b", "node-b"), ("general-a", "node-a")):
        plan.placed = {f"{NAMESPACE}/{name}": claim for name in names}
        _pass(env, controller)
        assert [_nominated(env, name) for name in names] == [node] * 12
    assert in_flight[1] <= 4
    helpers = threads - {threading.current_thread().name}
    assert all(name.startswith("nominate-pod_") for name in helpers)
    assert len(helpers) <= 3  # three passes: no new threads after the first
    assert writers.threads <= 3


def test_a_writer_thread_idle_for_idle_seconds_ends_and_a_later_job_starts_one() -> None:
    writers = Writers("idle-test", idle_seconds=0.01)
    ran: list[str] = []
    done = threading.Event()

    def job() -> None:
        ran.append(threading.current_thread().name)
        done.set()

    writers.run(job)
    done.wait()
    for thread in threading.enumerate():
        if thread.name == ran[0]:
            thread.join()  # it ends on its own once idle
    assert writers.threads == 0
    done.clear()
    writers.run(job)
    done.wait()
    assert ran == ["idle-test_1", "idle-test_2"]


def _pod_writes(env: Env) -> int:
    return env.api.requests.by_resource().get("patch pods/status", 0)


def test_a_nomination_the_cache_has_not_caught_up_with_is_not_written_again(env: Env) -> None:
    """The API holds what was written; the pod cache lags it (its watch is slow) while the
    Node changes. The cached pod predates the write's answer, so the write is not repeated."""
    plan = Plan()
    controller = NominationController(env.ctx, plan)
    _pod(env, "web")
    _registered(env, "general-a", "node-a")
    env.set_node_ready("node-a")
    _untaint(env, "node-a")  # it can take the pod: nothing holds a rewrite back but the cache
    plan.placed = {"default/web": "general-a"}
    env.caches.sync()
    controller.run_once()  # written; the pod cache does not see it yet
    assert _nominated(env, "web") == "node-a"
    written = _pod_writes(env)

    env.api.patch(NODES, "node-a", {"metadata": {"labels": {"example.com/seen": "yes"}}})
    env.caches.sync_only(NODES, NODECLAIMS)
    controller.run_once()
    assert _pod_writes(env) == written  # the API holds it: no second write

    # kube-scheduler clears it, and the Node changes: once the cache shows the clear, the
    # nomination is written again.
    _set_nominated(env, "web", None)
    env.api.patch(NODES, "node-a", {"metadata": {"labels": {"example.com/seen": "again"}}})
    written = _pod_writes(env)
    _pass(env, controller)
    assert _nominated(env, "web") == "node-a"
    assert _pod_writes(env) == written + 1


def test_writers_run_every_job_once_from_many_threads_and_survive_a_raising_job() -> None:
    writers = Writers("many-test", idle_seconds=0.01)
    ran: list[int] = []
    finished = threading.Semaphore(0)

    def job(number: int) -> None:
        ran.append(number)
        finished.release()
        if number % 7 == 0:
            raise RuntimeError("a bug in a job")  # logged; the thread goes on

    def submit(base: int) -> None:
        for number in range(base, base + 50):
            writers.run(lambda number=number: job(number))  # type: ignore[misc]

    submitters = [threading.Thread(target=submit, args=(50 * i,)) for i in range(8)]
    for thread in submitters:
        thread.start()
    for thread in submitters:
        thread.join()
    for _ in range(400):
        finished.acquire()
    assert sorted(ran) == list(range(400))
    for thread in threading.enumerate():
        if thread.name.startswith("many-test_"):
            thread.join()  # each ends once idle
    assert writers.threads == 0
