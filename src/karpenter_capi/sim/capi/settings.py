"""What the Cluster API emulation can be told: global defaults and per-resource annotations.

A simulated cluster needs machines that take time to appear, that sometimes never do, and that
sometimes fail for lack of capacity, so that the autoprovisioner's asynchronous launch, its
registration timeouts and its error paths run as they would against a cloud. The knobs are
global defaults (``EmulationSettings``) that any MachineDeployment, MachineSet, MachinePool or
Machine can override with an annotation in the ``sim.karpenter.cluster.x-k8s.io/`` domain, so a
scenario file describes its failures next to the capacity they affect.

A malformed annotation never stops the emulation (design decision 9, "Bad input never
stops the controller"): it is logged and the
next source (owner, then global default) decides.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from karpenter_capi.core.api.duration import DurationError, parse_duration

_log = logging.getLogger(__name__)

SIM_DOMAIN: Final = "sim.karpenter.cluster.x-k8s.io/"

ANNOTATION_PROVISION_DELAY: Final = SIM_DOMAIN + "provision-delay"
"""Time from a Machine's creation (or a MachinePool instance's request) to its providerID."""
ANNOTATION_DELETE_DELAY: Final = SIM_DOMAIN + "delete-delay"
"""Time from a Machine's deletionTimestamp to its Node's deletion and finalizer removal."""
ANNOTATION_BOOT_DELAY: Final = SIM_DOMAIN + "boot-delay"
"""Time from a simulated Node's creation to ``Ready=True`` (kubelet stand-in only)."""
ANNOTATION_NEVER_PROVISION: Final = SIM_DOMAIN + "never-provision"
"""``"true"``: Machines stay ``Provisioning`` forever, with no providerID."""
ANNOTATION_OUT_OF_CAPACITY: Final = SIM_DOMAIN + "out-of-capacity"
"""``"true"``: Machines fail after the provision delay (``InsufficientResources``)."""
ANNOTATION_VM_FAILURE: Final = SIM_DOMAIN + "vm-failure"
"""On an Azure MachinePool: the error its new VMs fail with (``provisioningState: Failed``)."""
ANNOTATION_SHAPE: Final = SIM_DOMAIN + "api-shape"
"""``v1beta1`` or ``v1beta2``: which version's field layout the object is written in."""
ANNOTATION_MACHINE_POOL_MACHINES: Final = SIM_DOMAIN + "machine-pool-machines"
"""``"true"``/``"false"`` on a MachinePool: one Machine per instance (MachinePool Machines)."""
ANNOTATION_KUBELET: Final = SIM_DOMAIN + "kubelet"
"""Set on every Node the kubelet stand-in created; only those Nodes are made Ready by it."""

PROVIDER_ID_SCHEME: Final = "sim://"

V1BETA1: Final = "v1beta1"
V1BETA2: Final = "v1beta2"
SHAPES: Final = (V1BETA1, V1BETA2)


@dataclass(frozen=True)
class EmulationSettings:
    """Global defaults of the emulation; annotations override the delays and failures.

    ``version`` is the served version the emulation watches and reads (the server shows every
    object at every served version, so one is enough). ``default_shape`` is the field layout
    assumed for an object that says nothing about its own (see ``shapes``). ``seed`` makes
    generated Machine and instance names reproducible.
    """

    provision_delay: float = 10.0
    delete_delay: float = 5.0
    boot_delay: float = 5.0
    nodes: bool = False
    """Add the kubelet stand-in (``nodes.py``): a Node per provisioned Machine or instance."""
    machine_pool_machines: bool = False
    azure_unavailable_sizes: frozenset[str] = frozenset()
    """Azure VM sizes (``Standard_D4s_v5``, or ``Standard_D4s_v5@2`` for one zone) without
    capacity: pools of them get no VM and report the failure (``azure.py``)."""
    kubeadm_bootstrap: bool = False
    """Emulate CABPK and CAPI core's bootstrap step (``bootstrap.py``): a Secret and
    ``spec.bootstrap.dataSecretName`` for Machines whose KubeadmConfig exists."""
    bootstrap_delay: float = 2.0
    aws_ec2: Any = field(default=None, compare=False)
    """An EC2 client (moto's in the simulator): emulate stock CAPA (``capa.py``) with it for
    Machines whose infrastructure is an ``AWSMachine``; ``None``: no CAPA emulation."""
    aws_secrets: Any = field(default=None, compare=False)
    """A Secrets Manager client: the emulated CAPA deletes an AWSMachine's bootstrap data
    secrets (``cloudInit.secretPrefix``) once its node registered; ``None``: it does not."""
    version: str = V1BETA2
    default_shape: str = V1BETA2
    seed: int | None = 0

    def __post_init__(self) -> None:
        for name in ("provision_delay", "delete_delay", "boot_delay", "bootstrap_delay"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number of seconds >= 0, not {value}")
        for name in ("version", "default_shape"):
            if getattr(self, name) not in SHAPES:
                raise ValueError(f"{name} must be one of {', '.join(SHAPES)}")


AWS_MACHINE_KIND: Final = "AWSMachine"


def handled_by_capa(settings: EmulationSettings, machine: Mapping[str, Any]) -> bool:
    """Whether the CAPA emulation (``capa.py``), not the generic Machine controller and Node
    creator, drives ``machine``: it is on and the Machine's infrastructure is an AWSMachine."""
    if settings.aws_ec2 is None:
        return False
    ref = (machine.get("spec") or {}).get("infrastructureRef")
    return isinstance(ref, Mapping) and ref.get("kind") == AWS_MACHINE_KIND


def parse_delay(text: str) -> float:
    """Seconds from ``30s``/``1m30s``/``2h`` or a plain number of seconds (``45``, ``0.5``)."""
    stripped = text.strip()
    try:
        seconds = float(stripped)
    except ValueError:
        return parse_duration(stripped).total_seconds()
    if not math.isfinite(seconds) or seconds < 0:
        raise DurationError(f"invalid delay {text!r}: must be a number of seconds >= 0")
    return seconds


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    annotations = (obj.get("metadata") or {}).get("annotations")
    return annotations if isinstance(annotations, Mapping) else {}


def delay_from(sources: Iterable[Mapping[str, Any]], annotation: str, default: float) -> float:
    """The first well-formed ``annotation`` among ``sources`` (most specific first), else
    ``default``."""
    for obj in sources:
        raw = _annotations(obj).get(annotation)
        if raw is None:
            continue
        try:
            return parse_delay(str(raw))
        except DurationError as err:
            meta = obj.get("metadata") or {}
            _log.warning(
                "%s %s/%s: ignoring annotation %s: %s",
                obj.get("kind", "object"),
                meta.get("namespace", ""),
                meta.get("name", ""),
                annotation,
                err,
            )
    return default


def flag_from(sources: Iterable[Mapping[str, Any]], annotation: str, default: bool) -> bool:
    """The first ``"true"``/``"false"`` value of ``annotation`` among ``sources``, else
    ``default`` (other values are logged and skipped)."""
    for obj in sources:
        raw = _annotations(obj).get(annotation)
        if raw is None:
            continue
        value = str(raw).strip().lower()
        if value in ("true", "false"):
            return value == "true"
        _log.warning('ignoring annotation %s=%r: expected "true" or "false"', annotation, raw)
    return default
