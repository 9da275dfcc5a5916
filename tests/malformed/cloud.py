"""The real provisioning round over the generic_capi + capa stack (moto's EC2, Stubber prices),
with a good MachineDeployment of m5.large next to whatever a case breaks.

The round is the provisioner the operator runs (inventory through the plugins, which also
write the NodeClass's Ready condition and its Events; the solver; NodeClaims created): what a
case must show is that a bad template, a failing cloud call or a corrupted price ConfigMap is
named where a user looks and the good MachineDeployment still gets its NodeClaim in that round.
The capa test directory's builders are reused (it is not a package, hence the path).
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    CONFIGMAPS,
    EVENTS,
    NODEPOOLS,
    PODS,
)
from karpenter_capi.core.provisioning.provisioner import Provisioner, ProvisioningReport

_CAPA = str(Path(__file__).resolve().parents[1] / "capa")
if _CAPA not in sys.path:
    sys.path.append(_CAPA)

from capa_builders import Stack, aws_template, cluster, machine_deployment, nodeclass  # noqa: E402

from fakes.aws import StubbedAws  # noqa: E402

PRICES_NAMESPACE: Final = "kube-system"
PRICES_CONFIGMAP: Final = "karpenter-capi-prices-aws-us-east-1"
GOOD: Final = "good"


class CapaWorld:
    """A management cluster on AWS with one good MachineDeployment, a NodeClass and a NodePool."""

    def __init__(self, aws: StubbedAws, options: dict[str, str] | None = None) -> None:
        self.aws = aws
        self.stack = Stack(
            aws,
            options={"capa": {"price-configmap-namespace": PRICES_NAMESPACE, **(options or {})}},
        )
        self.server = self.stack.server
        self.stack.add(
            *cluster(),
            aws_template("m5-large", "m5.large"),
            machine_deployment(GOOD, "m5-large"),
            nodeclass(),
        )
        self.server.create(
            NODEPOOLS,
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "metadata": {"name": "general"},
                "spec": {
                    "template": {
                        "spec": {
                            "nodeClassRef": {
                                "group": wellknown.NODECLASS_GROUP,
                                "kind": wellknown.NODECLASS_KIND,
                                "name": "default",
                            },
                            "requirements": [],
                        }
                    }
                },
            },
        )

    def add_bad(self, instance_type: str | None, *, spot: bool = False, **md: Any) -> None:
        """A MachineDeployment ``bad`` on an AWSMachineTemplate ``bad`` of ``instance_type``."""
        self.stack.add(
            aws_template("bad", instance_type, spot=spot), machine_deployment("bad", "bad", **md)
        )

    def pending_pod(self, name: str = "web", cpu: str = "500m") -> None:
        self.server.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}]},
            },
            "default",
        )
        self.server.patch(
            PODS,
            name,
            {
                "status": {
                    "phase": "Pending",
                    "conditions": [
                        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                    ],
                }
            },
            "default",
            subresource="status",
        )

    def provisioning_round(self) -> ProvisioningReport:
        return Provisioner(self.server, self.stack.plugins, self.stack.clock).reconcile()

    def corrupt_prices(self, text: str) -> None:
        self.server.create(
            CONFIGMAPS,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": PRICES_CONFIGMAP, "namespace": PRICES_NAMESPACE},
                "data": {"prices.json": text},
            },
            PRICES_NAMESPACE,
        )

    def prices_text(self) -> str:
        found = self.server.get(CONFIGMAPS, PRICES_CONFIGMAP, PRICES_NAMESPACE)
        return str((found.get("data") or {}).get("prices.json") or "")

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

    # --- looking --------------------------------------------------------------------------

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

    @staticmethod
    def assert_good_launched(report: ProvisioningReport) -> None:
        """The good MachineDeployment's type got the pod's NodeClaim in this round."""
        assert not report.unschedulable, report.unschedulable
        assert not report.nodepool_errors, report.nodepool_errors
        assert [d.instance_type for d in report.launched] == ["m5.large"], report.launched
