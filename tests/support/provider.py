"""A provider plugin with scripted behaviour, for controller tests that must not need a cloud.

``FakeProvider`` implements the hooks the lifecycle and termination controllers call, keeps its
"machines" in memory, and lets a test decide what happens:

* ``bind_after_polls``: launch is asynchronous. ``create`` records a pending instance and
  returns without a provider ID; each later ``create`` for the same NodeClaim is a poll (the
  contract makes ``create`` idempotent, recognising its NodeClaim by the
  ``fake.example.com/instance`` annotation it asked the core to record, or by name), and the
  instance gets its provider ID on the ``bind_after_polls``-th poll. 0 binds at once.
* ``create_errors``: exceptions raised, in order, by the next ``create`` calls
  (``InsufficientCapacityError``, ``RetryableCreateError``, anything).
* ``instance_types_error``: raised by ``instance_types`` (e.g. ``NodeClassNotReadyError``).
* ``list_error``: raised by ``list`` while set (a provider that cannot be reached).
* ``delete_calls_to_finish``: ``delete`` answers True ("under way") that many times for an
  instance, then the instance is gone and ``delete`` raises ``InstanceNotFoundError``.
* ``add_instance`` (a machine nobody launched through a NodeClaim: a leak) and ``vanish``
  (a machine that disappears behind the core's back).

Every hook call is appended to ``calls`` as ``(hook, subject)``. Load it with
``provider.plugins(api)`` or ``Plugins.from_objects([("fake", provider)], ...)``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import Clock
from karpenter_capi.core.errors import InstanceNotFoundError, InsufficientCapacityError
from karpenter_capi.core.hookspecs import Instance, LaunchResult, PluginContext, hookimpl
from karpenter_capi.core.instancetype import InstanceType, Offering, freeze_requirements
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.resources import NODECLAIMS
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.values.resources import ResourceList

SCHEME = "fake://"
INSTANCE_ANNOTATION = "fake.example.com/instance"
ORPHAN_ANNOTATION = "karpenter.cluster.x-k8s.io/orphaned-instance"
NODECLASS_KIND = (wellknown.NODECLASS_GROUP, wellknown.NODECLASS_KIND)


def default_instance_types() -> list[InstanceType]:
    return [
        InstanceType(
            name="small",
            capacity=ResourceList.parse({"cpu": "2", "memory": "4Gi", "pods": "110"}),
            offerings=(
                Offering("zone-a", "on-demand", 0.10),
                Offering("zone-b", "spot", 0.04),
            ),
            requirements=freeze_requirements({wellknown.LABEL_ARCH: ["amd64"]}),
        ),
        InstanceType(
            name="large",
            capacity=ResourceList.parse(
                {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "1"}
            ),
            offerings=(Offering("zone-a", "on-demand", 0.90),),
            requirements=freeze_requirements({wellknown.LABEL_ARCH: ["amd64"]}),
        ),
    ]


@dataclass
class FakeInstance:
    name: str
    instance_type: str
    zone: str
    capacity_type: str
    created_at: datetime
    nodeclaim_name: str | None = None
    provider_id: str | None = None
    image_id: str = "fake-image-1"
    state: str = "pending"
    polls: int = 0
    delete_calls: int = 0
    labels: dict[str, str] = field(default_factory=dict)

    def view(self) -> Instance:
        return Instance(
            name=self.name,
            provider_id=self.provider_id,
            instance_type=self.instance_type,
            zone=self.zone,
            capacity_type=self.capacity_type,
            nodeclaim_name=self.nodeclaim_name,
            image_id=self.image_id,
            created_at=self.created_at,
            state=self.state,
            labels=dict(self.labels),
        )


def _nodeclass_kind(nodeclass: Any) -> tuple[str, str]:
    if isinstance(nodeclass, Mapping):
        group = str(nodeclass.get("apiVersion", "")).partition("/")[0]
        return group, str(nodeclass.get("kind", ""))
    return str(nodeclass.api_version).partition("/")[0], str(nodeclass.kind)


class FakeProvider:
    """A scripted provider plugin; see the module docstring."""

    def __init__(
        self,
        clock: Clock,
        *,
        instance_types: Sequence[InstanceType] | None = None,
        bind_after_polls: int = 0,
        delete_calls_to_finish: int = 1,
    ) -> None:
        self.clock = clock
        self.instance_types = (
            list(instance_types) if instance_types is not None else default_instance_types()
        )
        self.bind_after_polls = bind_after_polls
        self.delete_calls_to_finish = delete_calls_to_finish
        self.create_errors: list[Exception] = []
        self.instance_types_error: Exception | None = None
        self.list_error: Exception | None = None
        self.instances: dict[str, FakeInstance] = {}
        self.calls: list[tuple[str, str]] = []
        self.finalizers_at_create: dict[str, list[str]] = {}
        """NodeClaim name -> its finalizers in the API when ``create`` was first called."""
        self.offered: dict[str, list[str]] = {}
        """NodeClaim name -> the instance types ``create`` was last given, in order."""
        self.received: list[tuple[object, object]] = []
        """``(nodeclaim, nodeclass)`` of every ``create`` call, as the hook received them."""
        self._ids = itertools.count(1)

    # Test controls.

    def plugins(self, api: KubeClient) -> Plugins:
        return Plugins.from_objects(
            [("fake", self)], PluginEnvironment(workload=api, management=api, clock=self.clock)
        )

    def add_instance(
        self,
        *,
        instance_type: str = "small",
        zone: str = "zone-a",
        capacity_type: str = "on-demand",
        nodeclaim_name: str | None = None,
        bound: bool = True,
    ) -> FakeInstance:
        """A machine the provider runs without the core having launched it (a leak)."""
        instance = self._new_instance(instance_type, zone, capacity_type, nodeclaim_name)
        if bound:
            self._bind(instance)
        return instance

    def vanish(self, provider_id: str) -> None:
        """The machine disappears (deleted by hand, reclaimed) without the core knowing."""
        for name, instance in list(self.instances.items()):
            if instance.provider_id == provider_id:
                del self.instances[name]

    def count(self, hook: str, subject: str | None = None) -> int:
        return sum(1 for h, s in self.calls if h == hook and (subject is None or s == subject))

    # Hooks.

    @hookimpl
    def karpenter_capi_nodeclass_kinds(self) -> list[tuple[str, str]]:
        return [NODECLASS_KIND]

    @hookimpl
    def karpenter_capi_instance_types(self, nodeclass: Any) -> list[InstanceType] | None:
        self.calls.append(("instance_types", ""))
        if _nodeclass_kind(nodeclass) != NODECLASS_KIND:
            return None
        if self.instance_types_error is not None:
            raise self.instance_types_error
        return list(self.instance_types)

    @hookimpl
    def karpenter_capi_create(
        self,
        nodeclaim: Any,
        instance_types: list[InstanceType],
        nodeclass: Any,
        ctx: PluginContext,
    ) -> LaunchResult | None:
        name = str(nodeclaim.metadata.name)
        self.calls.append(("create", name))
        self.received.append((nodeclaim, nodeclass))
        if _nodeclass_kind(nodeclass) != NODECLASS_KIND:
            return None
        if name not in self.finalizers_at_create:
            try:
                stored = ctx.workload.get(NODECLAIMS, name)
                self.finalizers_at_create[name] = list(stored["metadata"].get("finalizers") or [])
            except NotFound:
                self.finalizers_at_create[name] = []
        self.offered[name] = [it.name for it in instance_types]
        if self.create_errors:
            raise self.create_errors.pop(0)
        instance = self._for_nodeclaim(nodeclaim)
        if instance is None:
            chosen = next((it for it in instance_types if it.available_offerings()), None)
            if chosen is None:
                raise InsufficientCapacityError("fake: nothing available")
            offering = min(chosen.available_offerings(), key=lambda o: (o.price, o.zone))
            instance = self._new_instance(chosen.name, offering.zone, offering.capacity_type, name)
            if self.bind_after_polls == 0:
                self._bind(instance)
        else:
            instance.polls += 1
            if instance.provider_id is None and instance.polls >= self.bind_after_polls:
                self._bind(instance)
        return LaunchResult(
            instance_type=instance.instance_type,
            capacity_type=instance.capacity_type,
            zone=instance.zone,
            provider_id=instance.provider_id,
            image_id=instance.image_id if instance.provider_id else None,
            labels={"fake.example.com/generation": "1"},
            annotations={INSTANCE_ANNOTATION: instance.name},
        )

    @hookimpl
    def karpenter_capi_get(self, provider_id: str) -> Instance | None:
        self.calls.append(("get", provider_id))
        if not provider_id.startswith(SCHEME):
            return None
        for instance in self.instances.values():
            if instance.provider_id == provider_id:
                return instance.view()
        raise InstanceNotFoundError(provider_id, "fake: no such instance")

    @hookimpl
    def karpenter_capi_list(self) -> list[Instance]:
        self.calls.append(("list", ""))
        if self.list_error is not None:
            raise self.list_error
        return [instance.view() for instance in self.instances.values()]

    @hookimpl
    def karpenter_capi_delete(self, nodeclaim: Any) -> bool | None:
        name = str(nodeclaim.metadata.name)
        self.calls.append(("delete", name))
        annotations = nodeclaim.metadata.annotations
        provider_id = nodeclaim.status.provider_id or ""
        mine = (
            provider_id.startswith(SCHEME)
            or INSTANCE_ANNOTATION in annotations
            or ORPHAN_ANNOTATION in annotations
        )
        instance = self._for_nodeclaim(nodeclaim)
        if instance is None:
            if mine:
                raise InstanceNotFoundError(provider_id or name, "fake: already gone")
            return None
        if instance.delete_calls >= self.delete_calls_to_finish:
            del self.instances[instance.name]
            raise InstanceNotFoundError(instance.provider_id or instance.name, "fake: terminated")
        instance.delete_calls += 1
        instance.state = "deleting"
        return True

    # Internals.

    def _new_instance(
        self, instance_type: str, zone: str, capacity_type: str, nodeclaim_name: str | None
    ) -> FakeInstance:
        instance = FakeInstance(
            name=f"fake-{next(self._ids)}",
            instance_type=instance_type,
            zone=zone,
            capacity_type=capacity_type,
            created_at=self.clock.now(),
            nodeclaim_name=nodeclaim_name,
        )
        self.instances[instance.name] = instance
        return instance

    def _bind(self, instance: FakeInstance) -> None:
        instance.provider_id = f"{SCHEME}{instance.zone}/{instance.name}"
        instance.state = "running"

    def _for_nodeclaim(self, nodeclaim: Any) -> FakeInstance | None:
        annotations = nodeclaim.metadata.annotations
        for key in (INSTANCE_ANNOTATION, ORPHAN_ANNOTATION):
            if annotations.get(key) in self.instances:
                return self.instances[annotations[key]]
        provider_id = nodeclaim.status.provider_id
        name = nodeclaim.metadata.name
        for instance in self.instances.values():
            if provider_id and instance.provider_id == provider_id:
                return instance
        for instance in self.instances.values():
            if instance.nodeclaim_name == name:
                return instance
        return None
