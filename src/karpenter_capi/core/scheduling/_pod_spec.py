"""Reading a pod's scheduling constraints: its class, its node requirements, and whether its spec
can be read at all.

Why a module of its own: these look only at one pod, never at the cluster, so they stand apart
from the solve (``solver.py``) that calls them once per pod or pod class.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from karpenter_capi.core.scheduling.claims import PodClass, to_vector
from karpenter_capi.core.scheduling.hostports import pod_host_ports
from karpenter_capi.core.scheduling.model import Pod
from karpenter_capi.core.scheduling.preferences import strict_topology
from karpenter_capi.core.scheduling.requirements import Requirements, preferred_node_terms
from karpenter_capi.core.scheduling.resources import pod_requests
from karpenter_capi.core.scheduling.taints import EFFECTS
from karpenter_capi.core.scheduling.topology import Topology

_TOLERATION_OPERATORS: Final = ("Exists", "Equal", "")
_UNSATISFIABLE: Final = ("DoNotSchedule", "ScheduleAnyway", "")
SPEC_ERRORS: Final = (ValueError, TypeError, AttributeError, KeyError)
"""What reading a pod spec the API server would have refused raises (a string where a list is,
an unknown operator, a malformed quantity): one such pod must not stop the round."""


def scheduling_spec(pod: Pod) -> Mapping[str, Any]:
    """The parts of a pod the solver reads: pods equal here form one class."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    return {
        "namespace": meta.get("namespace"),
        "labels": meta.get("labels"),
        "nodeSelector": spec.get("nodeSelector"),
        "affinity": spec.get("affinity"),
        "tolerations": spec.get("tolerations"),
        "topologySpreadConstraints": spec.get("topologySpreadConstraints"),
        "containers": [(c.get("resources"), c.get("ports")) for c in spec.get("containers") or ()],
        "initContainers": [
            (c.get("resources"), c.get("ports"), c.get("restartPolicy"))
            for c in spec.get("initContainers") or ()
        ],
        "overhead": spec.get("overhead"),
        "resources": spec.get("resources"),
    }


def pod_requirements(pod: Pod, *, preferred: bool = True) -> Requirements | None:
    """What a pod asks of a node's labels, with preferences treated as requirements.

    As Karpenter: ``nodeSelector``, the first required node-affinity term, and (unless
    ``preferred`` is false) the heaviest preferred node-affinity term; relaxation removes the
    terms one at a time when the pod does not fit. ``None`` when the first required term can
    never match a new node: it selects by ``matchFields`` (an existing node's name) or is empty
    (Kubernetes: selects no node).
    """
    spec = pod.get("spec") or {}
    requirements = Requirements.from_labels(spec.get("nodeSelector") or {})
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    heaviest = preferred_node_terms(pod)[:1] if preferred else []
    for _, preference in heaviest:
        requirements = requirements.merged(preference)
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    if terms:
        if terms[0].get("matchFields") or not terms[0].get("matchExpressions"):
            return None
        requirements = requirements.merged(
            Requirements.from_dicts(terms[0].get("matchExpressions") or [])
        )
    return requirements


def unreadable_pod(pod: Pod) -> str | None:
    """Why ``pod``'s scheduling constraints cannot be read, or ``None`` when they can.

    The API server refuses such specs, but a webhook-less test cluster, an aggregated API or a
    bug upstream may still hand one over; the pod is then reported unschedulable with this
    text instead of taking the whole provisioning round down with it.
    """
    spec = pod.get("spec") or {}
    try:
        requests = pod_requests(pod, include_pod_count=True)
        negative = sorted(name for name in requests if requests.milli(name) < 0)
        if negative:
            return f"requests of {', '.join(negative)} must not be negative"
        pod_requirements(pod)
        pod_requirements(pod, preferred=False)
        pod_host_ports(pod)
        for field in ("tolerations", "topologySpreadConstraints"):
            items = spec.get(field) or []
            if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
                return f"{field} is not a list of objects"
        for index, toleration in enumerate(spec.get("tolerations") or ()):
            operator = toleration.get("operator") or ""
            effect = toleration.get("effect") or ""
            if operator not in _TOLERATION_OPERATORS:
                return f"tolerations[{index}]: operator {operator!r} is not Exists or Equal"
            if effect and effect not in EFFECTS:
                return f"tolerations[{index}]: effect {effect!r} is not one of {', '.join(EFFECTS)}"
        for index, constraint in enumerate(spec.get("topologySpreadConstraints") or ()):
            where = f"topologySpreadConstraints[{index}]"
            if int(constraint.get("maxSkew", 1)) < 1:
                return f"{where}: maxSkew must be at least 1"
            if (constraint.get("whenUnsatisfiable") or "") not in _UNSATISFIABLE:
                return f"{where}: whenUnsatisfiable {constraint['whenUnsatisfiable']!r} is unknown"
            if not constraint.get("topologyKey"):
                return f"{where}: topologyKey is required"
        strict_topology(pod)
    except SPEC_ERRORS as exc:
        return f"cannot read its spec: {exc}"
    return None


def new_pod_class(
    pod: Pod,
    signature: str,
    names: Sequence[str],
    topology: Topology,
    topology_rejections: dict[str, set[int]],
) -> PodClass:
    """What every pod with ``pod``'s scheduling spec (``signature``) shares.

    Classes whose topology constraints are the same share one set of claims those constraints
    rule out, kept in ``topology_rejections`` by the constraints' JSON.
    """
    requests = pod_requests(pod, include_pod_count=True)
    spec = pod.get("spec") or {}
    strict = strict_topology(pod)
    pod_class = PodClass(
        signature=signature,
        requests=requests,
        vector=to_vector(names, requests),
        requirements=pod_requirements(pod),
        required=pod_requirements(pod, preferred=False) or Requirements(),
        tolerations=spec.get("tolerations") or (),
        host_ports=pod_host_ports(pod),
        topological=topology.has_constraints(strict),
    )
    if pod_class.topological:
        strict_spec = strict.get("spec") or {}
        meta = pod.get("metadata") or {}
        constraints = json.dumps(
            [
                meta.get("namespace"),
                meta.get("labels"),
                (strict_spec.get("affinity") or {}).get("podAffinity"),
                (strict_spec.get("affinity") or {}).get("podAntiAffinity"),
                strict_spec.get("topologySpreadConstraints"),
                # Spreads may count only nodes the pod's affinity and tolerations allow.
                strict_spec.get("nodeSelector"),
                (strict_spec.get("affinity") or {}).get("nodeAffinity"),
                strict_spec.get("tolerations"),
            ],
            sort_keys=True,
            default=str,
        )
        pod_class.topology_rejected = topology_rejections.setdefault(constraints, set())
    return pod_class
