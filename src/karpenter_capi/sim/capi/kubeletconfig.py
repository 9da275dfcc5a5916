"""What the emulated kubelet keeps for itself: a kubeadm node's allocatable.

A real kubelet reports ``allocatable = capacity - kube-reserved - system-reserved - hard
eviction threshold`` (per resource: cpu, memory, and ephemeral-storage against the node
filesystem), with the reservations its bootstrap wrote. kubeadm writes none unless told, so a
kubeadm node keeps only the kubelet's default hard eviction thresholds, ``memory.available<100Mi``
and ``nodefs.available<10%``. This module reads what the bootstrap config tells it, written
apart from the autoprovisioner's own reading (``plugins.generic_capi.kubelet``) so that the two
can disagree and a scenario shows it.

Read from the ``KubeadmConfigTemplate`` (MachineDeployment, MachineSet) or ``KubeadmConfig``
(MachinePool) the scalable resource's ``spec.template.spec.bootstrap.configRef`` names, at
``joinConfiguration.nodeRegistration.kubeletExtraArgs`` (a map in v1beta1, a list of
``{name, value}`` in v1beta2): ``kube-reserved``, ``system-reserved``, ``eviction-hard`` (which,
given, replaces the default thresholds, as the flag does) and ``max-pods`` (the ``pods``
capacity). KubeletConfiguration patch files are not emulated. A value the real kubelet would
refuse to start with is logged and ignored here (the emulation never stops on bad input).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from decimal import ROUND_FLOOR, Decimal
from typing import Any, Final

from karpenter_capi.core.values.quantity import QuantityError, parse_quantity

_log = logging.getLogger(__name__)

KUBEADM_KINDS: Final = ("KubeadmConfigTemplate", "KubeadmConfig")
BOOTSTRAP_GROUP: Final = "bootstrap.cluster.x-k8s.io"

# The kubelet's defaults: no reservations, these hard eviction thresholds.
_DEFAULT_EVICTION: Final = {"memory.available": "100Mi", "nodefs.available": "10%"}
# The eviction signals that count against allocatable, and the resource each counts against.
_SIGNAL_RESOURCE: Final = {"memory.available": "memory", "nodefs.available": "ephemeral-storage"}


def _join_args(config: Mapping[str, Any]) -> dict[str, str]:
    spec = config.get("spec") or {}
    if config.get("kind") == "KubeadmConfigTemplate":
        spec = (spec.get("template") or {}).get("spec") or {}
    args = (
        ((spec.get("joinConfiguration") or {}).get("nodeRegistration") or {}).get(
            "kubeletExtraArgs"
        )
        if isinstance(spec, Mapping)
        else None
    )
    if isinstance(args, Mapping):
        return {str(key): str(value) for key, value in args.items()}
    found: dict[str, str] = {}
    for arg in args if isinstance(args, list) else []:
        if isinstance(arg, Mapping) and arg.get("name"):
            found[str(arg["name"])] = str(arg.get("value") or "")
    return found


def registration_taints(config: Mapping[str, Any] | None) -> list[dict[str, str]]:
    """``joinConfiguration.nodeRegistration.taints`` of a kubeadm config: what the kubelet
    registers the Node with (``--register-with-taints``)."""
    if not config:
        return []
    spec = config.get("spec") or {}
    if config.get("kind") == "KubeadmConfigTemplate":
        spec = (spec.get("template") or {}).get("spec") or {}
    registration = (spec.get("joinConfiguration") or {}).get("nodeRegistration") or {}
    taints = registration.get("taints") if isinstance(registration, Mapping) else None
    found = []
    for taint in taints if isinstance(taints, list) else []:
        if isinstance(taint, Mapping) and taint.get("key") and taint.get("effect"):
            entry = {"key": str(taint["key"]), "effect": str(taint["effect"])}
            if taint.get("value"):
                entry["value"] = str(taint["value"])
            found.append(entry)
    return found


def _to_decimal(text: str) -> Decimal:
    quantity = parse_quantity(text)
    if quantity.nanos < 0:
        raise QuantityError(f"{text!r} is negative")
    return Decimal(quantity.nanos) / Decimal(10**9)


def _pairs(flag: str, raw: str, separator: str) -> dict[str, str] | None:
    """``a=1,b=2`` (or ``a<1,b<2``) as a map; ``None`` (logged) when malformed."""
    result: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition(separator)
        if not sep or not key.strip() or not value.strip():
            _log.warning("simulated kubelet: ignoring %s=%r: %r is malformed", flag, raw, item)
            return None
        result[key.strip()] = value.strip()
    return result


def _reserved(flag: str, raw: str | None) -> dict[str, Decimal]:
    if raw is None:
        return {}
    pairs = _pairs(flag, raw, "=")
    if pairs is None:
        return {}
    try:
        return {name: _to_decimal(value) for name, value in pairs.items() if name != "pid"}
    except QuantityError as err:
        _log.warning("simulated kubelet: ignoring %s=%r: %s", flag, raw, err)
        return {}


def _eviction(raw: str | None, capacity: Mapping[str, Decimal]) -> dict[str, Decimal]:
    thresholds = _DEFAULT_EVICTION if raw is None else _pairs("eviction-hard", raw, "<")
    if thresholds is None:
        thresholds = _DEFAULT_EVICTION
    result: dict[str, Decimal] = {}
    for signal, value in thresholds.items():
        resource = _SIGNAL_RESOURCE.get(signal)
        if resource is None:
            continue
        try:
            if value.endswith("%"):
                share = Decimal(value[:-1]) / 100
                result[resource] = capacity.get(resource, Decimal(0)) * share
            else:
                result[resource] = _to_decimal(value)
        except (QuantityError, ArithmeticError) as err:
            _log.warning("simulated kubelet: ignoring eviction-hard %s<%s: %s", signal, value, err)
    return result


def kubelet_status(
    capacity: Mapping[str, str], config: Mapping[str, Any] | None
) -> tuple[dict[str, str], dict[str, str]]:
    """``(capacity, allocatable)`` a kubeadm kubelet configured by ``config`` (or by nothing)
    reports for a machine of ``capacity``."""
    args = _join_args(config) if config is not None else {}
    reported = dict(capacity)
    max_pods = args.get("max-pods")
    if max_pods is not None:
        if max_pods.strip().isdigit() and int(max_pods) > 0:
            reported["pods"] = str(int(max_pods))
        else:
            _log.warning("simulated kubelet: ignoring max-pods=%r", max_pods)
    amounts: dict[str, Decimal] = {}
    for name, value in reported.items():
        try:
            amounts[name] = _to_decimal(value)
        except QuantityError:
            continue
    kept: dict[str, Decimal] = {}
    for part in (
        _reserved("kube-reserved", args.get("kube-reserved")),
        _reserved("system-reserved", args.get("system-reserved")),
        _eviction(args.get("eviction-hard"), amounts),
    ):
        for name, amount in part.items():
            kept[name] = kept.get(name, Decimal(0)) + amount
    allocatable = dict(reported)
    for name, amount in kept.items():
        if name in amounts and name != "pods":
            left = max(Decimal(0), amounts[name] - amount)
            # Round the reservation up, as the kubelet does, by rounding what is left down.
            if name == "cpu":
                allocatable[name] = f"{int((left * 1000).to_integral_value(ROUND_FLOOR))}m"
            else:
                allocatable[name] = str(int(left.to_integral_value(ROUND_FLOOR)))
    return reported, allocatable
