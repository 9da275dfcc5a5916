"""The kubelet settings a kubeadm bootstrap config gives the nodes it joins.

A MachineDeployment or MachineSet references a ``KubeadmConfigTemplate`` and a MachinePool a
``KubeadmConfig`` (``bootstrap.cluster.x-k8s.io``, ``spec.template.spec.bootstrap.configRef``).
What decides a joining node's allocatable is read from its ``joinConfiguration`` (workers
join; ``initConfiguration`` is the first control-plane node's):

- ``nodeRegistration.kubeletExtraArgs``, in the v1beta1 map form
  (``{"kube-reserved": "cpu=100m,memory=1Gi"}``) and the v1beta2 list form
  (``[{name: kube-reserved, value: ...}]``): ``kube-reserved``, ``system-reserved``
  (``cpu=100m,memory=1Gi,ephemeral-storage=1Gi``; ``pid`` is ignored), ``eviction-hard``
  (``memory.available<500Mi,nodefs.available<10%``) and ``max-pods``;
- a KubeletConfiguration patch kubeadm applies at join (``joinConfiguration.patches.directory``
  and a ``spec.files`` entry in that directory whose name starts with ``kubeletconfiguration``,
  the strategic or merge patch types, inline ``content`` in YAML or JSON, plain or base64):
  ``kubeReserved``, ``systemReserved``, ``evictionHard``, ``maxPods``. Files in order of name,
  as kubeadm applies them; flags win over the patched file, as they do in the kubelet. Not
  read: ``+json`` (RFC 6902) patches, gzipped content, ``contentFrom`` a Secret (the plugin
  does not read Secrets), and patches for other targets.

Only the eviction signals that shrink allocatable count: ``memory.available`` (memory) and
``nodefs.available`` (``ephemeral-storage``). A given eviction-hard replaces the kubelet's
default thresholds, as the kubelet does with the flag; signals it leaves out reserve nothing.

A value the kubelet would refuse raises ``KubeletConfigError`` naming the object, the field and
the value; the caller reports it and falls through to the next source. Nothing here does I/O.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Final

import yaml

from karpenter_capi.plugins.generic_capi.overhead import (
    KUBEADM_EVICTION_HARD,
    Components,
    Reservation,
    SettingsError,
    parse_amount,
)

BOOTSTRAP_GROUP: Final = "bootstrap.cluster.x-k8s.io"
KUBEADM_CONFIG_TEMPLATE: Final = "KubeadmConfigTemplate"
KUBEADM_CONFIG: Final = "KubeadmConfig"
KUBEADM_KINDS: Final = frozenset({KUBEADM_CONFIG_TEMPLATE, KUBEADM_CONFIG})

# The eviction signals that shrink allocatable, and the resource each shrinks.
_SIGNALS: Final = MappingProxyType(
    {"memory.available": "memory", "nodefs.available": "ephemeral-storage"}
)
_RESERVABLE: Final = frozenset({"cpu", "memory", "ephemeral-storage"})
_PATCH_TARGET: Final = "kubeletconfiguration"


class KubeletConfigError(ValueError):
    """A kubelet setting of a bootstrap config that the kubelet would refuse."""


@dataclass(frozen=True)
class KubeletSettings:
    """What a bootstrap config says about the kubelet; ``None``: it says nothing."""

    source: str
    """The object, ``KubeadmConfigTemplate default/workers``."""
    kube_reserved: Reservation | None = None
    system_reserved: Reservation | None = None
    eviction_hard: Reservation | None = None
    max_pods: int | None = None

    @property
    def components(self) -> Components | None:
        """The overhead it declares over kubeadm's defaults; ``None`` when it declares none."""
        if (self.kube_reserved, self.system_reserved, self.eviction_hard) == (None, None, None):
            return None
        return Components(
            self.kube_reserved or {},
            self.system_reserved or {},
            KUBEADM_EVICTION_HARD if self.eviction_hard is None else self.eviction_hard,
        )


def _describe(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return (
        f"{obj.get('kind', 'bootstrap config')} {meta.get('namespace', '')}/{meta.get('name', '')}"
    )


def _config_spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec") or {}
    if obj.get("kind") == KUBEADM_CONFIG_TEMPLATE:
        spec = (spec.get("template") or {}).get("spec") or {}
    return spec if isinstance(spec, Mapping) else {}


def _extra_args(raw: Any, where: str) -> dict[str, str]:
    """kubeletExtraArgs in either form; a repeated v1beta2 name keeps the last value, as the
    kubelet keeps the last of a repeated flag."""
    if raw is None:
        return {}
    if isinstance(raw, Mapping):
        return {str(k): str(v) for k, v in raw.items()}
    if not isinstance(raw, list):
        raise KubeletConfigError(f"{where}: neither a map nor a list of name/value pairs")
    args: dict[str, str] = {}
    for index, item in enumerate(raw):
        if not isinstance(item, Mapping) or not item.get("name"):
            raise KubeletConfigError(f"{where}[{index}]: not a {{name, value}} pair")
        args[str(item["name"])] = str(item.get("value") if item.get("value") is not None else "")
    return args


def _pairs(raw: Any, where: str, separator: str, form: str) -> list[tuple[str, str]]:
    """A flag's ``a=1,b=2`` (``separator`` ``=``; ``<`` for eviction thresholds) or a config
    file's map, as ``(key, value)`` pairs; ``form`` names the expected form in errors."""
    if isinstance(raw, Mapping):
        return [(str(k), str(v)) for k, v in raw.items()]
    if not isinstance(raw, str):
        raise KubeletConfigError(f"{where}={raw!r}: not {form} pairs")
    pairs = []
    for item in filter(None, (part.strip() for part in raw.split(","))):
        key, sep, value = item.partition(separator)
        if not sep or not key.strip() or not value.strip():
            raise KubeletConfigError(f"{where}={raw!r}: {item!r} is not {form}")
        pairs.append((key.strip(), value.strip()))
    return pairs


def _amount(raw: Any, where: str, item: str, value: str) -> int | Fraction:
    try:
        return parse_amount(value, item)
    except SettingsError as exc:
        raise KubeletConfigError(f"{where}={raw!r}: {exc}") from None


def _reserved(raw: Any, where: str) -> dict[str, int | Fraction]:
    """``cpu=100m,memory=1Gi`` (a flag) or ``{cpu: 100m}`` (a config file): absolute only."""
    result: dict[str, int | Fraction] = {}
    for name, value in _pairs(raw, where, "=", "resource=quantity"):
        if value.endswith("%"):
            raise KubeletConfigError(f"{where}={raw!r}: {name}={value}: must be a quantity")
        amount = _amount(raw, where, f"{name}={value}", value)
        if name in _RESERVABLE:
            result[name] = amount
    return result


def _eviction(raw: Any, where: str) -> dict[str, int | Fraction]:
    """``memory.available<500Mi,nodefs.available<10%`` (a flag) or a map (a config file)."""
    result: dict[str, int | Fraction] = {}
    for signal, value in _pairs(raw, where, "<", "signal<quantity"):
        amount = _amount(raw, where, f"{signal}<{value}", value)
        resource = _SIGNALS.get(signal)
        if resource is not None:
            result[resource] = amount
    return result


def _max_pods(raw: Any, where: str) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise KubeletConfigError(f"{where}={raw!r}: not an integer") from None
    if value <= 0:
        raise KubeletConfigError(f"{where}={raw!r}: must be positive")
    return value


def _file_content(item: Mapping[str, Any], where: str) -> str | None:
    content = item.get("content")
    if not isinstance(content, str):
        return None  # contentFrom a Secret: not read
    encoding = str(item.get("encoding") or "")
    if encoding in ("", "text/plain"):
        return content
    if encoding == "base64":
        try:
            return base64.b64decode(content, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise KubeletConfigError(f"{where}: content is not base64 text") from None
    return None  # gzip: not read


def _patches(spec: Mapping[str, Any], join: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The KubeletConfiguration fields the join's patch files set, merged in name order."""
    directory = str((join.get("patches") or {}).get("directory") or "").rstrip("/")
    files = spec.get("files") or []
    if not directory or not isinstance(files, list):
        return {}
    merged: dict[str, Any] = {}
    found = _kubelet_patch_files(files, directory, source)
    for _, item, where in sorted(found, key=lambda entry: entry[0]):
        patch = _read_patch(item, where)
        for key in ("kubeReserved", "systemReserved", "evictionHard", "maxPods"):
            if key in patch:
                merged[key] = (patch[key], where)
    return merged


def _kubelet_patch_files(
    files: list[Any], directory: str, source: str
) -> list[tuple[str, Mapping[str, Any], str]]:
    """(file name, file, where) of each strategic or merge patch of the kubelet's
    configuration in the patch directory (kubeadm skips JSON patches for it)."""
    found: list[tuple[str, Mapping[str, Any], str]] = []
    for index, item in enumerate(files):
        if not isinstance(item, Mapping):
            continue
        path = str(item.get("path") or "")
        name = posixpath.basename(path)
        if posixpath.dirname(path).rstrip("/") != directory:
            continue
        # kubeadm's patch file names: target[suffix][+patchtype].extension
        stem = name.partition(".")[0]
        target, _, patch_type = stem.partition("+")
        if not target.lower().startswith(_PATCH_TARGET) or patch_type == "json":
            continue
        found.append((name, item, f"{source} spec.files[{index}] ({path})"))
    return found


def _read_patch(item: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """One patch file's map (empty when its content is not read, or blank)."""
    text = _file_content(item, where)
    if text is None:
        return {}
    try:
        patch = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise KubeletConfigError(f"{where}: not YAML or JSON: {exc}") from None
    if not isinstance(patch, Mapping):
        raise KubeletConfigError(f"{where}: not a KubeletConfiguration patch (a map)")
    return patch


def kubelet_settings(obj: Mapping[str, Any]) -> KubeletSettings:
    """The kubelet settings of a ``KubeadmConfigTemplate`` or ``KubeadmConfig`` (see the module
    docstring); ``KubeletConfigError`` when one is malformed."""
    source = _describe(obj)
    spec = _config_spec(obj)
    join = spec.get("joinConfiguration") or {}
    if not isinstance(join, Mapping):
        raise KubeletConfigError(f"{source}: joinConfiguration is not an object")
    registration = join.get("nodeRegistration") or {}
    field = "joinConfiguration.nodeRegistration.kubeletExtraArgs"
    args = _extra_args(
        registration.get("kubeletExtraArgs") if isinstance(registration, Mapping) else None,
        f"{source}: {field}",
    )
    values: dict[str, tuple[Any, str]] = {}
    for key, (value, where) in _patches(spec, join, source).items():
        values[key] = (value, f"{where} {key}")
    for flag, key in (
        ("kube-reserved", "kubeReserved"),
        ("system-reserved", "systemReserved"),
        ("eviction-hard", "evictionHard"),
        ("max-pods", "maxPods"),
    ):
        if flag in args:
            values[key] = (args[flag], f"{source}: {field} {flag}")
    kube = values.get("kubeReserved")
    system = values.get("systemReserved")
    eviction = values.get("evictionHard")
    pods = values.get("maxPods")
    return KubeletSettings(
        source=source,
        kube_reserved=_reserved(*kube) if kube is not None else None,
        system_reserved=_reserved(*system) if system is not None else None,
        eviction_hard=_eviction(*eviction) if eviction is not None else None,
        max_pods=_max_pods(*pods) if pods is not None else None,
    )


def is_kubeadm_config(ref: Any) -> bool:
    """Whether a ``bootstrap.configRef`` names a kubeadm config (the only kind read)."""
    if not isinstance(ref, Mapping):
        return False
    group = str(ref.get("apiGroup") or str(ref.get("apiVersion") or "").rpartition("/")[0])
    return ref.get("kind") in KUBEADM_KINDS and group in ("", BOOTSTRAP_GROUP)
