"""The controller process of a simulated run, and the emulated cluster stepped with it.

A simulated run steps two things on one manager: the real ``Operator`` (its plugins, caches and
controllers, talking to the API through the client it is given) and the cluster around it (the
Cluster API emulation, the workload controllers and the scheduler stand-in, which write to the
in-memory server directly). The scenario runner builds that pair once; the chaos harness
(``sim.chaos``) builds it again after every simulated crash, over the same server, with nothing
kept in memory. Both build it here, so a restarted controller is wired exactly like the first.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.capi import add_capi_emulation
from karpenter_capi.sim.scenario.schema import Scenario
from karpenter_capi.sim.scheduler import SimScheduler
from karpenter_capi.sim.workloads import add_workload_emulation

DEFAULT_PLUGINS = ("generic_capi",)


@dataclass(frozen=True)
class ControllerProcess:
    """One controller process: its ``Operator`` (the manager not sealed yet, so a caller can
    still attach observers before ``operator.stepped()``) and the plugins it loaded."""

    operator: Operator
    plugins: Plugins


def scenario_emulation(scenario: Scenario) -> dict[str, Any]:
    """``EmulationSettings`` fields the scenario file sets (its simulated Azure's failures)."""
    if scenario.azure is None:
        return {}
    return {"azure_unavailable_sizes": frozenset(scenario.azure.unavailable_sizes)}


def start_controller(
    scenario: Scenario,
    server: InMemoryAPIServer,
    clock: FakeClock,
    client: KubeClient,
    *,
    seed: int = 0,
    plugins: Sequence[str] = DEFAULT_PLUGINS,
    plugin_objects: Sequence[tuple[str, object]] | None = None,
    emulation: Mapping[str, Any] | None = None,
) -> ControllerProcess:
    """A new controller over ``client`` and the emulated cluster over ``server``.

    ``plugin_objects`` (``(name, module or object)`` pairs) replaces loading ``plugins`` by
    name; a scenario with ``azure:`` gets ``capz`` over the simulated Azure otherwise.
    ``emulation`` overrides the CAPI emulation's settings over what the scenario sets.
    """
    aws = scenario.infrastructure.aws
    environment = PluginEnvironment(
        workload=client,
        management=client,
        clock=clock,
        logger=logging.getLogger("karpenter_capi.plugins"),
        # No long poll: moto answers at once, and a 20 s wait would be wall time.
        options={}
        if aws is None or aws.interruption_queue is None
        else {
            "capa": {
                "interruption-queue": aws.interruption_queue,
                "interruption-wait-seconds": "0",
                "region": aws.region,
            }
        },
    )
    if plugin_objects is None and scenario.azure is not None:
        from karpenter_capi.sim.azure import scenario_plugins

        plugin_objects = scenario_plugins(list(plugins))
    loaded = (
        Plugins.load(list(plugins), environment)
        if plugin_objects is None
        else Plugins.from_objects(plugin_objects, environment)
    )
    operator = Operator(
        client, client, loaded, clock, OperatorOptions(leader_elect=False, metrics_port=None)
    )
    # The controller's caches exist now. What is added below is the emulated cluster, not the
    # controller: its writes, and the caches only it needs, go to the server directly.
    operator.manager.client = operator.manager.management = server
    add_capi_emulation(
        operator.manager,
        **{"nodes": True, **scenario_emulation(scenario), **(emulation or {})},
    )
    add_workload_emulation(operator.manager)
    operator.manager.add(SimScheduler(server, operator.manager, clock, seed=seed))
    return ControllerProcess(operator, loaded)
