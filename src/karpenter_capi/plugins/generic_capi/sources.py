"""What describing a scalable resource consults besides the resource itself.

Two sources, each kept per cluster (``PluginContext.state``) so that the launch code and the
inventory see the same state: ``UnavailableOfferings`` (resources that recently failed to
produce a Machine, marked by the launch code and read by the inventory for three minutes), and
``TemplateReader`` (infrastructure machine templates). Reading a template means resolving
``spec.template.spec.infrastructureRef`` to a REST resource for a kind this project has never
heard of: the reader discovers the served version, derives the plural as cluster-autoscaler does
(lower-case kind + ``s``, the kubebuilder convention every infrastructure provider follows) and
caches what it read for a minute, because the inventory is rebuilt at every provisioning round.
A template that is missing is remembered a minute after the first miss and five minutes after
each miss that follows, one whose kind no CRD serves five minutes at once (``TemplateReader``
docstring), and a group's served versions five minutes: each read costs round trips on the
decision path, and a template that stays missing (a provider that describes shapes by
annotations alone) was read again every minute in every cluster.
The kubeadm bootstrap config a resource references is read through the same reader (and cache)
for its kubelet settings (``read_kubelet_settings``, ``kubelet``). Split from ``inventory`` so
that module stays about grouping resources into instance types.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from karpenter_capi.plugin_api import Clock, KubeClient, PluginContext, Resource
from karpenter_capi.plugin_api.kube import CAPI_INFRASTRUCTURE_GROUP, ApiError, NotFound
from karpenter_capi.plugins._cloud.unavailable import ExpiringMarks
from karpenter_capi.plugins.generic_capi.kubelet import (
    BOOTSTRAP_GROUP,
    KubeletConfigError,
    KubeletSettings,
    is_kubeadm_config,
    kubelet_settings,
)
from karpenter_capi.plugins.generic_capi.shape import ShapeError, TemplateStatus

REASON_TEMPLATE_NOT_SERVED: Final = "InfrastructureTemplateNotServed"
REASON_TEMPLATE_NOT_FOUND: Final = "InfrastructureTemplateNotFound"
REASON_TEMPLATE_UNREADABLE: Final = "InfrastructureTemplateUnreadable"
REASON_INVALID_INFRASTRUCTURE_REF: Final = "InvalidInfrastructureRef"
REASON_INVALID_KUBELET_CONFIG: Final = "InvalidKubeletConfiguration"


# --- availability -------------------------------------------------------------------------------


class UnavailableOfferings(ExpiringMarks[str]):
    """Scalable resources that recently failed to produce a Machine, for a while.

    The launch code calls ``mark(resource_key, reason)`` when a replica increase did not turn
    into a Machine (quota, a failing infrastructure provider, a MachineSet that cannot create
    its Machine); the inventory then reports that resource's offering unavailable until
    ``ttl_seconds`` (3 minutes, like Karpenter's unavailable-offerings cache) have passed on the
    injected clock. Keys are ``selection.resource_key(kind, namespace, name)``. The expiry
    logic is the cloud plugins' (``plugins._cloud.unavailable.ExpiringMarks``). Thread-safe.
    """

    @classmethod
    def shared(cls, ctx: PluginContext) -> UnavailableOfferings:
        """The instance shared by the inventory and the launch code of ``ctx``'s cluster."""
        return ctx.state(cls, lambda: cls(ctx.clock))


# --- infrastructure templates -------------------------------------------------------------------


class TemplateError(Exception):
    """The infrastructure template could not be read; ``reason`` is CamelCase."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class _Failure:
    """A cached failure: re-raised as a fresh exception, so no traceback (and none of the frames
    it references) outlives the call that failed."""

    shape: bool
    reason: str
    message: str

    def error(self) -> Exception:
        if self.shape:
            return ShapeError(self.message)
        return TemplateError(self.reason, self.message)


_Cached = TemplateStatus | Mapping[str, Any] | _Failure


def _not_served(result: _Cached) -> bool:
    """A read that found the template's kind or group served by no CRD."""
    return isinstance(result, _Failure) and result.reason == REASON_TEMPLATE_NOT_SERVED


def _is_miss(result: _Cached) -> bool:
    """A read that found no template: missing, or its kind or group not served."""
    return isinstance(result, _Failure) and result.reason in (
        REASON_TEMPLATE_NOT_FOUND,
        REASON_TEMPLATE_NOT_SERVED,
    )


class TemplateReader:
    """Reads infrastructure machine templates by reference, for any provider's kind.

    The version is discovered: a v1beta1 reference's ``apiVersion`` is tried first, then every
    version the group serves, preferred first (a group's versions differ per kind, e.g. the
    Docker kinds lag behind the AWS ones), and the one that worked is remembered per kind.
    The plural is the lower-cased kind plus ``s``, as cluster-autoscaler derives it. Results,
    failures included, are cached for ``ttl_seconds`` (a minute) on the injected clock, with
    two exceptions that bound how long a change takes to be seen:

    - a **missing template** (its kind served) is remembered ``ttl_seconds`` the first time
      and ``miss_ttl_seconds`` (five minutes) each time it is read missing again: a template
      created just after its resource is found within the minute, one missing for longer
      within five minutes of its creation;
    - a template whose **kind or group no CRD serves** is remembered ``miss_ttl_seconds`` at
      once (a CRD comes with a provider's installation), and its group's served versions are
      forgotten, so the next read discovers them again;
    - a group's **served versions** are remembered ``served_ttl_seconds`` (five minutes).

    Thread-safe.
    """

    DEFAULT_TTL_SECONDS: ClassVar[float] = 60.0
    MISS_TTL_SECONDS: ClassVar[float] = 300.0
    SERVED_TTL_SECONDS: ClassVar[float] = 300.0

    def __init__(
        self,
        client: KubeClient,
        clock: Clock,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        *,
        miss_ttl_seconds: float = MISS_TTL_SECONDS,
        served_ttl_seconds: float = SERVED_TTL_SECONDS,
    ) -> None:
        self._client = client
        self._clock = clock
        self._ttl = ttl_seconds
        self._miss_ttl = max(miss_ttl_seconds, ttl_seconds)
        self._served_ttl = served_ttl_seconds
        self._lock = threading.Lock()
        self._templates: dict[tuple[str, str, str, str], tuple[float, _Cached]] = {}
        self._served: dict[str, tuple[float, list[str]]] = {}
        self._version_of: dict[tuple[str, str], str] = {}

    @classmethod
    def shared(cls, ctx: PluginContext) -> TemplateReader:
        """One reader (and one cache) per cluster ``ctx`` serves."""
        return ctx.state(cls, lambda: cls(ctx.management, ctx.clock))

    def read(self, namespace: str, ref: Mapping[str, Any]) -> TemplateStatus:
        """The status of the template ``ref`` names (v1beta1 or v1beta2 reference shape).

        Raises ``TemplateError`` when it cannot be read, ``ShapeError`` when its status is
        malformed.
        """
        result = self._read(
            namespace,
            ref,
            CAPI_INFRASTRUCTURE_GROUP,
            "infrastructure template",
            TemplateStatus.from_object,
        )
        assert isinstance(result, TemplateStatus)
        return result

    def read_bootstrap(self, namespace: str, ref: Mapping[str, Any]) -> Mapping[str, Any]:
        """The bootstrap config ``spec.template.spec.bootstrap.configRef`` names, as read.

        Raises ``TemplateError`` when it cannot be read (cached like a template).
        """
        found: Mapping[str, Any] = self._read(
            namespace, ref, BOOTSTRAP_GROUP, "bootstrap config", dict
        )
        return found

    def _read(
        self,
        namespace: str,
        ref: Mapping[str, Any],
        default_group: str,
        noun: str,
        parse: Callable[[Mapping[str, Any]], Any],
    ) -> Any:
        kind = str(ref.get("kind") or "")
        name = str(ref.get("name") or "")
        namespace = str(ref.get("namespace") or namespace)
        api_version = str(ref.get("apiVersion") or "")
        group, slash, version = api_version.rpartition("/")
        group = str(ref.get("apiGroup") or (group if slash else "") or default_group)
        if not kind or not name:
            field_name = "infrastructureRef" if noun.startswith("infra") else "bootstrap.configRef"
            raise TemplateError(
                REASON_INVALID_INFRASTRUCTURE_REF,
                f"spec.template.spec.{field_name} needs a kind and a name",
            )
        key = (group, kind, namespace, name)
        now = self._clock.monotonic()
        with self._lock:
            cached = self._templates.get(key)
        if cached is None or cached[0] <= now:
            result: _Cached
            try:
                result = parse(self._get(group, kind, version, namespace, name, noun=noun))
            except TemplateError as exc:
                result = _Failure(shape=False, reason=exc.reason, message=exc.message)
            except ShapeError as exc:
                result = _Failure(shape=True, reason="", message=str(exc))
            ttl = self._ttl
            if _not_served(result):
                # No CRD serves it: one comes with a provider's installation, not in seconds.
                # Discovery is asked again at the next read, should one have come meanwhile.
                ttl = self._miss_ttl
                with self._lock:
                    self._served.pop(group, None)
            elif _is_miss(result) and cached is not None and _is_miss(cached[1]):
                ttl = self._miss_ttl  # missing a minute ago, missing still
            with self._lock:
                self._templates[key] = (now + ttl, result)
        else:
            result = cached[1]
        if isinstance(result, _Failure):
            raise result.error()
        return result

    def _served_versions(self, group: str) -> list[str]:
        now = self._clock.monotonic()
        with self._lock:
            cached = self._served.get(group)
        if cached is not None and cached[0] > now:
            return cached[1]
        versions = list(self._client.served_versions(group))
        with self._lock:
            self._served[group] = (now + self._served_ttl, versions)
        return versions

    def _get(
        self, group: str, kind: str, hint: str, namespace: str, name: str, *, noun: str
    ) -> Mapping[str, Any]:
        what = f"{kind} {namespace}/{name}"
        try:
            served = self._served_versions(group)
        except ApiError as exc:
            message = f"cannot discover API group {group}: {exc}"
            raise TemplateError(REASON_TEMPLATE_UNREADABLE, message) from None
        if not served:
            raise TemplateError(
                REASON_TEMPLATE_NOT_SERVED,
                f"{noun} {what}: API group {group} is not served (is the "
                f"{noun.split(maxsplit=1)[0]} provider installed?)",
            )
        plural = kind.lower() + "s"
        with self._lock:
            known = self._version_of.get((group, kind))
        order = list(dict.fromkeys(v for v in (known, hint, *served) if v and v in served))

        def resource(version: str) -> Resource:
            return Resource(group, version, plural, kind, True)

        try:
            for version in order:
                try:
                    found = self._client.get(resource(version), name, namespace)
                except NotFound:
                    continue
                with self._lock:
                    self._version_of[(group, kind)] = version
                return found
            # Not found at any version: a missing object, or a kind nobody serves?
            for version in order:
                try:
                    self._client.list(resource(version), namespace, limit=1)
                except NotFound:
                    continue
                raise TemplateError(REASON_TEMPLATE_NOT_FOUND, f"{noun} {what} not found")
        except ApiError as exc:
            raise TemplateError(
                REASON_TEMPLATE_UNREADABLE, f"cannot read {noun} {what}: {exc}"
            ) from None
        versions = ", ".join(f"{group}/{v}" for v in order)
        raise TemplateError(
            REASON_TEMPLATE_NOT_SERVED,
            f"{noun} kind {kind} ({plural}.{group}) is not served at {versions}",
        )


# --- bootstrap configs --------------------------------------------------------------------------


def read_kubelet_settings(
    templates: TemplateReader, namespace: str, obj: Mapping[str, Any]
) -> tuple[KubeletSettings | None, TemplateError | None]:
    """The kubelet settings of the kubeadm bootstrap config ``obj`` (a scalable resource)
    references, or why they could not be had.

    ``(None, None)``: no kubeadm config is referenced, or it is missing or its kind not served
    (CAPI reports that itself; the defaults apply). An unreadable config is a
    ``TemplateError``; a malformed setting one of reason ``REASON_INVALID_KUBELET_CONFIG``.
    """
    spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    ref = (spec.get("bootstrap") or {}).get("configRef") if isinstance(spec, Mapping) else None
    if not is_kubeadm_config(ref):
        return None, None
    assert isinstance(ref, Mapping)
    try:
        config = templates.read_bootstrap(namespace, ref)
    except TemplateError as exc:
        if exc.reason in (REASON_TEMPLATE_NOT_FOUND, REASON_TEMPLATE_NOT_SERVED):
            return None, None
        return None, exc.with_traceback(None)  # kept: its frames would make a cycle
    try:
        return kubelet_settings(config), None
    except KubeletConfigError as exc:
        return None, TemplateError(REASON_INVALID_KUBELET_CONFIG, str(exc))
