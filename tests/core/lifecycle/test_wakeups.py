"""A plugin's launch watches wake a launch under way at once; without them it waits its poll."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from karpenter_capi.core.hookspecs import LaunchWatch, hookimpl
from karpenter_capi.core.kube.resources import CONFIGMAPS
from karpenter_capi.core.lifecycle import lifecycle_controllers
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.stepped import SteppedDriver
from tests.core.lifecycle.harness import condition, new_env

PREFIX = "machine-for-"


class Waker:
    """Stands for a provider's machine objects: a ConfigMap ``machine-for-<NodeClaim>``."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error

    @hookimpl
    def karpenter_capi_launch_watches(self) -> list[LaunchWatch]:
        if self.error is not None:
            raise self.error

        def nodeclaims(obj: Mapping[str, Any]) -> list[str]:
            name = str(obj["metadata"]["name"])
            return [name.removeprefix(PREFIX)] if name.startswith(PREFIX) else []

        return [LaunchWatch(CONFIGMAPS, nodeclaims, "management")]


def _run(waker: Waker, caplog: pytest.LogCaptureFixture) -> tuple[float, str]:
    """Seconds from the first create to Launched, when the machine appears 1 s after it."""
    env = new_env(bind_after_polls=1)  # the second create call finds the machine
    plugins = Plugins.from_objects(
        [("fake", env.provider), ("waker", waker)],
        PluginEnvironment(workload=env.api, management=env.api, clock=env.clock),
    )
    manager = Manager(env.api, clock=env.clock)
    manager.add(*lifecycle_controllers(manager.context(plugins)))
    driver = SteppedDriver(manager)
    env.nodeclaim("nc")
    driver.run_until_quiet()
    started = env.clock.monotonic()
    assert condition(env.get("nc"), "Launched")["reason"] == "Launching"

    driver.advance(1)
    env.api.create(
        CONFIGMAPS,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": PREFIX + "nc"}},
        "default",
    )
    driver.run_until_quiet()
    while condition(env.get("nc"), "Launched")["status"] != "True":
        timer = driver.next_timer()
        assert timer is not None
        driver.advance(timer - env.clock.monotonic())
    return env.clock.monotonic() - started, caplog.text


def test_an_event_the_plugin_maps_to_a_nodeclaim_launches_it_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seconds, _ = _run(Waker(), caplog)

    assert seconds == pytest.approx(1.0)


def test_without_working_launch_watches_the_poll_still_launches(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seconds, logged = _run(Waker(RuntimeError("cannot reach the machines")), caplog)

    assert seconds == pytest.approx(5.0)  # the poll interval
    assert "launch watches are unavailable" in logged
    assert "cannot reach the machines" in logged
