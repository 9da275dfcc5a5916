"""The Manager: shared informers, indexed caches, queues, and what it reports to observers."""

from __future__ import annotations

import logging

import pytest

from karpenter_capi.core.api.duration import DurationError
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.errors import Conflict, Invalid
from karpenter_capi.core.kube.indexes import BY_NODE_NAME, BY_PROVIDER_ID
from karpenter_capi.core.kube.resources import (
    CONFIGMAPS,
    MACHINES,
    NODECLAIMS,
    NODES,
    PODS,
    SECRETS,
)
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.runtime.controller import DONE, MANAGEMENT, WORKLOAD, Key, Result
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.core.values.quantity import QuantityError
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.core.runtime.toys import Failing, Mirror, Recorder, Scripted, Ticker, configmap, pod
from tests.cyclic import cyclic_garbage, exceptions_in


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def api(clock: FakeClock) -> InMemoryAPIServer:
    return new_cluster(clock=clock)


def test_informers_are_shared_between_controllers(api: InMemoryAPIServer, clock: FakeClock) -> None:
    manager = Manager(api, clock=clock)
    mirror = Mirror(api, manager)
    other = Scripted(clock, name="other", read=[(PODS, WORKLOAD), (NODES, MANAGEMENT)])
    manager.add(mirror, other, Ticker(clock, read=[(PODS, WORKLOAD)]))
    # ConfigMaps (two primaries), pods (watched and read twice), nodes: one informer each;
    # MANAGEMENT is the workload cluster here, since one client serves both.
    assert sorted(i.name for i in manager.informers) == [
        "workload/configmaps",
        "workload/nodes",
        "workload/pods",
    ]
    assert manager.store(NODES, MANAGEMENT) is manager.store(NODES, WORKLOAD)


def test_a_separate_management_cluster_gets_its_own_informers(clock: FakeClock) -> None:
    workload, management = new_cluster(clock=clock), new_cluster(clock=clock)
    management.create(NODES, {"metadata": {"name": "mgmt-node"}})
    manager = Manager(workload, management, clock=clock)
    manager.add(Scripted(clock, read=[(NODES, MANAGEMENT), (NODES, WORKLOAD)]))
    SteppedDriver(manager).run_until_quiet()
    assert manager.store(NODES, MANAGEMENT).keys() == ["mgmt-node"]
    assert manager.store(NODES, WORKLOAD).keys() == []


def test_caches_carry_the_common_indexes(api: InMemoryAPIServer, clock: FakeClock) -> None:
    api.create(PODS, {**pod("p", None), "spec": {"nodeName": "n1", "containers": []}}, "default")
    api.create(NODES, {"metadata": {"name": "n1"}, "spec": {"providerID": "aws:///a/i-1"}})
    claim = api.create(
        NODECLAIMS,
        {
            "metadata": {"name": "c1"},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
        },
    )
    api.patch(NODECLAIMS, "c1", {"status": {"providerID": "aws:///a/i-1"}}, subresource="status")
    manager = Manager(api, clock=clock)
    reads = [(PODS, WORKLOAD), (NODES, WORKLOAD), (NODECLAIMS, WORKLOAD), (MACHINES, WORKLOAD)]
    manager.add(Ticker(clock, read=reads))
    SteppedDriver(manager).run_until_quiet()

    assert [p["metadata"]["name"] for p in manager.store(PODS).by_index(BY_NODE_NAME, "n1")] == [
        "p"
    ]
    for resource, name in ((NODES, "n1"), (NODECLAIMS, claim["metadata"]["name"])):
        found = manager.store(resource).by_index(BY_PROVIDER_ID, "aws:///a/i-1")
        assert [obj["metadata"]["name"] for obj in found] == [name]
    assert manager.store(MACHINES).index_values(BY_PROVIDER_ID) == []


def test_store_of_an_undeclared_resource_is_a_clear_error(
    api: InMemoryAPIServer, clock: FakeClock
) -> None:
    manager = Manager(api, clock=clock)
    manager.add(Scripted(clock))
    SteppedDriver(manager)
    with pytest.raises(KeyError, match=r"secrets.*watches\(\) or reads\(\)"):
        manager.store(SECRETS)
    with pytest.raises(RuntimeError, match="already running"):
        manager.add(Scripted(clock, name="late"))


def test_controller_names_are_unique(api: InMemoryAPIServer, clock: FakeClock) -> None:
    manager = Manager(api, clock=clock)
    manager.add(Scripted(clock))
    with pytest.raises(ValueError, match="two controllers"):
        manager.add(Scripted(clock))


def test_observer_gets_durations_on_the_injected_clock_and_errors(
    api: InMemoryAPIServer, clock: FakeClock
) -> None:
    def slow_then_broken(key: Key, call: int) -> Result:
        clock.advance(2.5)  # a reconcile that "takes" 2.5 s of clock time
        if call == 1:
            raise Failing("boom")
        return DONE

    recorder = Recorder()
    api.create(CONFIGMAPS, configmap("app", {}), "default")
    manager = Manager(api, clock=clock, observer=recorder)
    manager.add(Scripted(clock, behaviour=slow_then_broken), Ticker(clock))
    SteppedDriver(manager).advance(5)

    by_name = [
        (name, seconds, type(error).__name__) for name, seconds, error in recorder.reconciles
    ]
    assert by_name == [
        ("scripted", 2.5, "Failing"),
        ("ticker", 0.0, "NoneType"),
        ("scripted", 2.5, "NoneType"),
    ]
    depths = [depth for name, depth in recorder.depths if name == "scripted"]
    assert depths[:2] == [1, 0]  # queued, then taken


def test_context_reads_through_the_manager(api: InMemoryAPIServer, clock: FakeClock) -> None:
    manager = Manager(api, clock=clock)
    plugins = Plugins.from_objects([], PluginEnvironment(api, api, clock))
    context = manager.context(plugins, dry_run=True)
    assert context.caches is manager
    assert context.client is api
    assert context.management is api
    assert context.dry_run


def test_added_observers_are_told_of_every_reconcile_and_depth_as_the_first(
    api: InMemoryAPIServer, clock: FakeClock
) -> None:
    first, second = Recorder(), Recorder()
    api.create(CONFIGMAPS, configmap("app", {}), "default")
    manager = Manager(api, clock=clock, observer=first)
    manager.add(Scripted(clock, behaviour=lambda key, call: DONE), Ticker(clock))
    manager.add_observer(second)  # after the controllers: their queues tell it too
    SteppedDriver(manager).advance(5)

    assert [name for name, _, _ in first.reconciles] == ["scripted", "ticker"]
    assert second.reconciles == first.reconciles
    assert second.depths == first.depths
    assert second.depths


def test_an_expected_error_is_one_warning_line_per_change_and_a_bug_keeps_its_traceback(
    api: InMemoryAPIServer, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Invalid input (a DurationError, a QuantityError, an object the API refused) says what
    is wrong in one WARNING line, again only when the message changes; an unexpected
    exception is a bug and keeps its ERROR and traceback."""
    errors: list[Exception] = [
        DurationError("invalid duration '99999999999h': too long"),
        DurationError("invalid duration '99999999999h': too long"),
        QuantityError("lots"),
        Invalid('NodeClaim.karpenter.sh "a" is invalid: spec.requirements: Too many'),
        Failing("boom"),
    ]

    def failing(key: Key, call: int) -> Result:
        raise errors[min(call, len(errors)) - 1]

    def ticking(run: int) -> Result:
        raise errors[min(run, len(errors)) - 1]

    api.create(CONFIGMAPS, configmap("app", {}), "default")
    manager = Manager(api, clock=clock)
    manager.add(Scripted(clock, behaviour=failing), Ticker(clock, interval=1.0, behaviour=ticking))
    with caplog.at_level(logging.DEBUG, logger="karpenter_capi"):
        SteppedDriver(manager).advance(60)

    for name in ("scripted", "ticker"):
        said = [r for r in caplog.records if r.getMessage().startswith(f"{name}:")]
        loud = [(r.levelname, r.exc_info is not None) for r in said if r.levelno >= logging.WARNING]
        assert loud == [
            ("WARNING", False),  # the duration, once though it happened twice
            ("WARNING", False),  # the quantity
            ("WARNING", False),  # the refused object
            ("ERROR", True),  # the bug, every time
        ] + [("ERROR", True)] * (len(loud) - 4), [r.getMessage() for r in said]
        first = next(r.getMessage() for r in said if r.levelno == logging.WARNING)
        assert "invalid duration '99999999999h'" in first


def test_a_failed_reconcile_or_run_leaves_no_cyclic_garbage(
    api: InMemoryAPIServer, clock: FakeClock
) -> None:
    """An error kept past its ``except`` references, through its traceback, the frame that
    keeps it: such cycles are freed only by the cyclic collector, whose pauses hold every
    cluster's decisions (a Conflict on every other write of a busy fleet)."""

    def conflicting(key: Key, call: int) -> Result:
        raise Conflict("the object changed")

    def refused(run: int) -> Result:
        raise Invalid("refused")

    api.create(CONFIGMAPS, configmap("app", {}), "default")
    manager = Manager(api, clock=clock)
    scripted = Scripted(clock, behaviour=conflicting)
    ticker = Ticker(clock, interval=1.0, behaviour=refused)
    manager.add(scripted, ticker)
    driver = SteppedDriver(manager)
    with cyclic_garbage() as found:
        driver.advance(30)
    assert len(scripted.calls) > 2  # retried, failing every time
    assert len(ticker.runs) > 2
    assert exceptions_in(found) == []
