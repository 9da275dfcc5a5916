"""The validating webhooks a real management cluster runs on the scalable resources the plugins
write: Cluster API's for ``MachinePool``, ``MachineDeployment`` and ``MachineSet`` and CAPZ's
for ``AzureMachinePool``.

Both are ``failurePolicy: Fail`` webhooks, so a pool written in an order or a shape they refuse
is refused every time, whatever the simulator's controllers would have done with it. Run here
in process, after schema validation (kube calls validating webhooks last), with upstream's
messages:

- cluster-api core/webhooks/admission/machinepool.go: ``MachinePool.validate``: either
  ``bootstrap.configRef`` or ``bootstrap.dataSecretName``; ``spec.clusterName`` equal to
  ``spec.template.spec.clusterName`` and immutable; a version starting with ``v`` and semantic.
  A MachinePool whose ``infrastructureRef`` names an object that does not exist yet is admitted.
- cluster-api core/webhooks/admission/machinedeployment.go: ``MachineDeployment.validate`` and
  machineset.go: ``MachineSet.validate``: the same ``clusterName`` and version rules. (Their
  bootstrap, selector, rollout and naming rules touch nothing the plugins write and are not
  run: the simulator's fixtures create deployments without a bootstrap reference.) Webhooks
  are registered for the resource, not its ``scale`` subresource, so a scale is not judged.
- cluster-api-provider-azure internal/exp/webhooks/azuremachinepool_webhook.go:
  ``validateOrchestrationMode``: a ``Flexible`` pool needs its parent MachinePool (one whose
  ``spec.template.spec.infrastructureRef.name`` is the pool's name, in any namespace:
  util/azure/azure.go ``FindParentMachinePoolV1Beta1``) to exist already, with a Kubernetes
  version >= 1.26.0. Upstream looks five times a second apart
  (``FindParentMachinePoolWithRetryV1Beta1``); the simulation has no concurrent writer to wait
  for, so it looks once.
"""

from __future__ import annotations

import re
from typing import Any, Final

from karpenter_capi.sim.apiserver import messages
from karpenter_capi.sim.apiserver.definitions import ResourceDefinition
from karpenter_capi.sim.apiserver.write_hook import WriteHook

JsonObject = dict[str, Any]

CAPI_GROUP: Final = "cluster.x-k8s.io"
INFRASTRUCTURE_GROUP: Final = "infrastructure.cluster.x-k8s.io"
AZURE_MACHINE_POOL_WEBHOOK: Final = "validation.azuremachinepool.infrastructure.cluster.x-k8s.io"
_SEMVER: Final = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")
_FLEXIBLE_MINIMUM: Final = (1, 26, 0)
_SCALABLE: Final = frozenset({"machinepools", "machinedeployments", "machinesets"})


def _template_spec(pool: JsonObject) -> JsonObject:
    spec = pool.get("spec") or {}
    found: JsonObject = (spec.get("template") or {}).get("spec") or {}
    return found


def _defined(ref: Any) -> bool:
    return isinstance(ref, dict) and bool(ref.get("name"))


class PoolAdmission(WriteHook):
    """CAPI's MachinePool, MachineDeployment and MachineSet and CAPZ's AzureMachinePool
    validating webhooks."""

    def prepare_create(self, definition: ResourceDefinition, obj: JsonObject) -> None:
        self._validate(definition, None, obj)

    def prepare_update(
        self, definition: ResourceDefinition, old: JsonObject, new: JsonObject
    ) -> None:
        self._validate(definition, old, new)

    def _validate(self, definition: ResourceDefinition, old: JsonObject | None, new: Any) -> None:
        if definition.group == CAPI_GROUP and definition.plural in _SCALABLE:
            self._machine_pool(definition, old, new)
        elif definition.group == INFRASTRUCTURE_GROUP and definition.plural == "azuremachinepools":
            self._azure_machine_pool(new)

    def _machine_pool(
        self, definition: ResourceDefinition, old: JsonObject | None, new: JsonObject
    ) -> None:
        spec = new.get("spec") or {}
        template = _template_spec(new)
        errors: list[messages.FieldError] = []
        bootstrap = template.get("bootstrap") or {}
        if (
            definition.plural == "machinepools"
            and not _defined(bootstrap.get("configRef"))
            and bootstrap.get("dataSecretName") is None
        ):
            errors.append(
                messages.required(
                    "spec.template.spec.bootstrap",
                    "expected either spec.template.spec.bootstrap.dataSecretName or "
                    "spec.template.spec.bootstrap.configRef to be populated",
                )
            )
        cluster = spec.get("clusterName")
        if old is not None and (old.get("spec") or {}).get("clusterName") != cluster:
            errors.append(messages.forbidden_field("spec.clusterName", "field is immutable"))
        if cluster != template.get("clusterName"):
            errors.append(
                messages.invalid_value(
                    "spec.clusterName",
                    cluster,
                    "spec.clusterName and spec.template.spec.clusterName must be set to the "
                    "same value",
                )
            )
        version = str(template.get("version") or "")
        if version:
            if not version.startswith("v"):
                errors.append(
                    messages.invalid_value(
                        "spec.template.spec.version", version, "must start with v"
                    )
                )
            if _SEMVER.match(version.removeprefix("v")) is None:
                errors.append(
                    messages.invalid_value(
                        "spec.template.spec.version", version, "must be a valid semantic version"
                    )
                )
        if errors:
            raise messages.invalid(definition, str(new["metadata"].get("name", "")), errors)

    def _azure_machine_pool(self, new: JsonObject) -> None:
        if (new.get("spec") or {}).get("orchestrationMode") != "Flexible":
            return
        name = str(new["metadata"].get("name", ""))
        parent = self._parent_of(name)
        why = None
        if parent is None:
            why = (
                "failed to find parent MachinePool: failed to find parent MachinePool: "
                f"failed to get MachinePool for {name}"
            )
        else:
            version = str(_template_spec(parent).get("version") or "")
            parsed = _SEMVER.match(version.removeprefix("v"))
            if not version:
                why = "could not find Kubernetes version in MachinePool"
            elif parsed is None:
                why = f"failed to parse Kubernetes version: Invalid character(s) found in {version}"
            elif tuple(int(part) for part in parsed.groups()[:3]) < _FLEXIBLE_MINIMUM:
                why = (
                    f"specified Kubernetes version {version.removeprefix('v')} must be >= "
                    "1.26.0 for Flexible orchestration mode"
                )
        if why is not None:
            raise messages.webhook_denied(AZURE_MACHINE_POOL_WEBHOOK, why)

    def _parent_of(self, name: str) -> JsonObject | None:
        table = self.engine.table_of(CAPI_GROUP, "machinepools")
        for pool in [] if table is None else table.objects.values():
            ref = _template_spec(pool).get("infrastructureRef") or {}
            if ref.get("name") == name:
                return pool
        return None
