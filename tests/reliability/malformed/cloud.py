"""The real provisioning round over the generic_capi + capa stack (moto's EC2, Stubber prices)
or the generic_capi + capz stack (the simulator's Azure at the HTTP transport), with a good
MachineDeployment next to whatever a case breaks.

The round is the provisioner the operator runs (inventory through the plugins, which also
write the NodeClass's Ready condition and its Events; the solver; NodeClaims created): what a
case must show is that a bad template, a failing cloud call or a corrupted price ConfigMap is
named where a user looks and the good MachineDeployment still gets its NodeClaim in that round.
The capa and capz test packages' builders are reused.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    CONFIGMAPS,
    EVENTS,
    NODEPOOLS,
)
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.provisioning.provisioner import Provisioner
from karpenter_capi.core.provisioning.report import ProvisioningReport
from karpenter_capi.plugins.capz.plugin import CapzPlugin
from karpenter_capi.plugins.generic_capi.plugin import GenericCapiPlugin
from karpenter_capi.plugins.generic_capi.shape import PRICE_ANNOTATION
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from tests.plugins.capa.builders import Stack, aws_template, cluster, machine_deployment, nodeclass
from tests.plugins.capz.env import CapzWorld as _CapzCluster
from tests.plugins.capz.env import azure_machine_template
from tests.plugins.capz.env import machine_deployment as azure_machine_deployment
from tests.support import operator_world
from tests.support.aws import StubbedAws

PRICES_NAMESPACE: Final = "kube-system"
GOOD: Final = "good"
GOOD_AZURE: Final = "Standard_D2s_v5"


class _Round:
    """What both clouds' worlds share: pods, the round, the NodeClass, Events, ConfigMaps."""

    server: InMemoryAPIServer
    clock: FakeClock
    plugins: Plugins
    prices_configmap: str

    def pending_pod(self, name: str = "web", cpu: str = "500m") -> None:
        operator_world.pending_pod(self.server, name, cpu)

    def provisioning_round(self) -> ProvisioningReport:
        return Provisioner(self.server, self.plugins, self.clock).reconcile()

    def corrupt_prices(self, text: str) -> None:
        self.server.create(
            CONFIGMAPS,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": self.prices_configmap, "namespace": PRICES_NAMESPACE},
                "data": {"prices.json": text},
            },
            PRICES_NAMESPACE,
        )

    def prices_text(self) -> str:
        found = self.server.get(CONFIGMAPS, self.prices_configmap, PRICES_NAMESPACE)
        return str((found.get("data") or {}).get("prices.json") or "")

    def nodeclass_ready(self) -> JsonObject:
        found = self.server.get(CLUSTER_API_NODE_CLASSES, "default")
        for condition in (found.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "Ready":
                return dict(condition)
        raise AssertionError(f"no Ready condition: {found}")

    def events(self) -> list[JsonObject]:
        return list(self.server.list(EVENTS).items)

    def event_about(self, *words: str) -> JsonObject:
        found = [e for e in self.events() if all(w in str(e.get("message")) for w in words)]
        if not found:
            said = "\n".join(f"{e['reason']}: {e['message']}" for e in self.events())
            raise AssertionError(f"no Event says {words!r}; the Events are:\n{said}")
        return found[0]

    def assert_good_launched(self, report: ProvisioningReport, instance_type: str) -> None:
        """The good MachineDeployment's type got the pod's NodeClaim in this round."""
        assert not report.unschedulable, report.unschedulable
        assert not report.nodepool_errors, report.nodepool_errors
        assert [d.instance_type for d in report.launched] == [instance_type], report.launched


class CapaWorld(_Round):
    """A management cluster on AWS with one good MachineDeployment, a NodeClass and a NodePool."""

    prices_configmap = "karpenter-capi-prices-aws-us-east-1"

    def __init__(self, aws: StubbedAws, options: dict[str, str] | None = None) -> None:
        self.aws = aws
        self.stack = Stack(
            aws,
            options={"capa": {"price-configmap-namespace": PRICES_NAMESPACE, **(options or {})}},
        )
        self.server = self.stack.server
        self.clock = self.stack.clock
        self.plugins = self.stack.plugins
        self.stack.add(
            *cluster(),
            aws_template("m5-large", "m5.large"),
            machine_deployment(GOOD, "m5-large"),
            nodeclass(),
        )
        self.server.create(NODEPOOLS, operator_world.nodepool())

    def add_bad(self, instance_type: str | None, *, spot: bool = False, **md: Any) -> None:
        """A MachineDeployment ``bad`` on an AWSMachineTemplate ``bad`` of ``instance_type``."""
        self.stack.add(
            aws_template("bad", instance_type, spot=spot), machine_deployment("bad", "bad", **md)
        )

    # --- cloud faults ---------------------------------------------------------------------

    def fail_ec2(self, operation: str, code: str, status: int, *, only: str | None = None) -> None:
        """Every ``operation`` call (or those naming instance type ``only``) answers ``code``,
        as EC2 answers a throttled or refused request."""

        def answer(params: Any, **_: Any) -> Any:
            body = params.get("body") if isinstance(params, dict) else None
            if only is not None and only not in repr(body):
                return None
            error = {"Code": code, "Message": f"{code} (injected)"}
            parsed = {"Error": error, "ResponseMetadata": {"HTTPStatusCode": status}}
            return SimpleNamespace(status_code=status, headers={}), parsed

        self.aws.catalog.meta.events.register(f"before-call.ec2.{operation}", answer)


class CapzWorld(_Round):
    """A management cluster on Azure (eastus) with one good MachineDeployment of
    Standard_D2s_v5 that carries its own shape and price (so it stays usable when Azure cannot
    describe anything), a NodeClass and a NodePool."""

    prices_configmap = "karpenter-capi-prices-azure-eastus"

    def __init__(self, options: dict[str, str] | None = None) -> None:
        cluster_ = _CapzCluster.new()
        self.server, self.clock, self.azure = cluster_.server, cluster_.clock, cluster_.azure
        environment = PluginEnvironment(
            workload=self.server,
            management=self.server,
            clock=self.clock,
            logger=logging.getLogger("test.malformed.capz"),
            options={"capz": {"price-configmap-namespace": PRICES_NAMESPACE, **(options or {})}},
        )
        self.plugins = Plugins.from_objects(
            [
                ("generic_capi", GenericCapiPlugin),
                ("capz", CapzPlugin(**cluster_.provider_options())),
            ],
            environment,
        )
        member = {wellknown.LABEL_KARPENTER_MEMBER: ""}
        shape = {
            wellknown.ANNOTATION_CAPACITY_CPU: "2",
            wellknown.ANNOTATION_CAPACITY_MEMORY: "8Gi",
            wellknown.ANNOTATION_CAPACITY_LABELS: f"{wellknown.LABEL_INSTANCE_TYPE}={GOOD_AZURE}",
            PRICE_ANNOTATION: "0.096",
        }
        self.server.apply_manifests(
            [
                azure_machine_template("d2s", "Standard_D2s_v5"),
                azure_machine_deployment(
                    GOOD, "d2s", failure_domain="1", labels=member, annotations=shape
                ),
                nodeclass(),
                operator_world.nodepool(),
            ]
        )

    def add_bad(self, vm_size: str, **template: Any) -> None:
        """A MachineDeployment ``bad`` (no annotations: Azure alone describes it) on an
        AzureMachineTemplate ``bad``."""
        member = {wellknown.LABEL_KARPENTER_MEMBER: ""}
        self.server.apply_manifests(
            [
                azure_machine_template("bad", vm_size, **template),
                azure_machine_deployment("bad", "bad", failure_domain="1", labels=member),
            ]
        )

    def fail_azure(
        self, path_suffix: str, status: int, body: Any, *, times: int | None = None
    ) -> None:
        """Requests whose path ends with ``path_suffix`` answer ``status``/``body`` (the first
        ``times`` of them, or all), as ARM answers a throttled or refused call."""
        transport = self.azure.transport
        key = next(k for k in transport.routes if k.endswith(path_suffix))
        inner = transport.routes[key]
        left = [times]

        def handler(request: Any) -> tuple[int, Any]:
            if left[0] is not None:
                if left[0] <= 0:
                    return inner(request)
                left[0] -= 1
            return status, body

        transport.routes[key] = handler
