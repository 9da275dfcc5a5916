"""The admission webhooks a real management cluster runs on the scalable resources the plugins
write: Cluster API's for ``MachinePool``, ``MachineDeployment`` and ``MachineSet`` and CAPZ's
for ``AzureMachinePool``.

Both are ``failurePolicy: Fail`` webhooks, so a pool written in an order or a shape they refuse
is refused every time, whatever the simulator's controllers would have done with it. Run here
in process, with upstream's messages: defaulting in ``admit`` (after the CRD's schema has
pruned, defaulted and converted the object to v1beta2, where kube runs mutating webhooks just
before schema validation: no rule here depends on the difference), validation just before the
object is stored (kube calls validating webhooks last):

- cluster-api core/webhooks/admission/machinedeployment.go, machineset.go and machinepool.go:
  the ``Default`` and ``validate`` of each (``capi_admission``). Webhooks are registered for
  the resource, not its ``scale`` or ``status`` subresources, so a write that changes nothing
  but ``spec.replicas`` or the status is not judged again. A MachinePool whose
  ``infrastructureRef`` names an object that does not exist yet is admitted.
- cluster-api-provider-azure internal/exp/webhooks/azuremachinepool_webhook.go:
  ``validateOrchestrationMode``: a ``Flexible`` pool needs its parent MachinePool (one whose
  ``spec.template.spec.infrastructureRef.name`` is the pool's name, in any namespace:
  util/azure/azure.go ``FindParentMachinePoolV1Beta1``) to exist already, with a Kubernetes
  version >= 1.26.0. Upstream looks five times a second apart
  (``FindParentMachinePoolWithRetryV1Beta1``); the simulation has no concurrent writer to wait
  for, so it looks once.
"""

from __future__ import annotations

from typing import Any, Final

from karpenter_capi.core.kube.errors import Invalid
from karpenter_capi.sim.apiserver import capi_admission, messages
from karpenter_capi.sim.apiserver.definitions import ResourceDefinition
from karpenter_capi.sim.apiserver.messages import FieldError
from karpenter_capi.sim.apiserver.write_hook import Previous, Warnings, WriteHook

JsonObject = dict[str, Any]

CAPI_GROUP: Final = "cluster.x-k8s.io"
INFRASTRUCTURE_GROUP: Final = "infrastructure.cluster.x-k8s.io"
AZURE_MACHINE_POOL_WEBHOOK: Final = "validation.azuremachinepool.infrastructure.cluster.x-k8s.io"
_FLEXIBLE_MINIMUM: Final = (1, 26, 0)
_SCALABLE: Final = frozenset({"machinepools", "machinedeployments", "machinesets"})


def _template_spec(pool: JsonObject) -> JsonObject:
    spec = pool.get("spec") or {}
    found: JsonObject = (spec.get("template") or {}).get("spec") or {}
    return found


def _judged_part(obj: JsonObject) -> tuple[Any, Any, bool]:
    """What a write through the resource may have changed and a ``scale`` or ``status`` write
    cannot (a scale always sets replicas; leaving them unset is for defaulting to decide)."""
    spec = obj.get("spec") or {}
    rest = {k: v for k, v in spec.items() if k != "replicas"}
    return rest, (obj.get("metadata") or {}).get("labels"), spec.get("replicas") is None


def _capi_kind(definition: ResourceDefinition, old: JsonObject | None, new: JsonObject) -> bool:
    """Whether CAPI's webhooks judge this write."""
    return (
        definition.group == CAPI_GROUP
        and definition.plural in _SCALABLE
        and (old is None or _judged_part(old) != _judged_part(new))
    )


def denied(
    webhook: str, definition: ResourceDefinition, name: str, errors: list[FieldError]
) -> Invalid:
    """The error kube-apiserver answers when a validating webhook answers ``Invalid``."""
    inner = messages.invalid(definition, name, errors)
    return Invalid(
        f'admission webhook "{webhook}" denied the request: {inner.message}',
        details=inner.details,
    )


class PoolAdmission(WriteHook):
    """CAPI's MachinePool, MachineDeployment and MachineSet defaulting and validating webhooks
    and CAPZ's AzureMachinePool validating webhook."""

    def admit(
        self, definition: ResourceDefinition, obj: JsonObject, old: Previous, warnings: Warnings
    ) -> JsonObject:
        if not _capi_kind(definition, old, obj):
            return obj
        try:
            capi_admission.default(definition.kind, obj, old)
        except capi_admission.DefaultingError as error:
            webhook = capi_admission.webhook_name(definition.kind, mutating=True)
            raise messages.webhook_denied(webhook, str(error)) from None
        return obj

    def prepare_create(self, definition: ResourceDefinition, obj: JsonObject) -> None:
        self._validate(definition, None, obj)

    def prepare_update(
        self, definition: ResourceDefinition, old: JsonObject, new: JsonObject
    ) -> None:
        self._validate(definition, old, new)

    def _validate(self, definition: ResourceDefinition, old: JsonObject | None, new: Any) -> None:
        if _capi_kind(definition, old, new):
            errors = capi_admission.validate(definition.kind, new, old)
            if errors:
                webhook = capi_admission.webhook_name(definition.kind, mutating=False)
                name = str(new["metadata"].get("name", ""))
                raise denied(webhook, definition, name, errors)
        elif definition.group == INFRASTRUCTURE_GROUP and definition.plural == "azuremachinepools":
            self._azure_machine_pool(new)

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
            parsed = capi_admission.semver(version.removeprefix("v"))
            if not version:
                why = "could not find Kubernetes version in MachinePool"
            elif parsed is None:
                why = f"failed to parse Kubernetes version: Invalid character(s) found in {version}"
            elif parsed < _FLEXIBLE_MINIMUM:
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
