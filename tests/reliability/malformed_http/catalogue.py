"""Every class of bad input issue 24 names, as data: what is applied, and where the user reads
what is wrong with it.

Each entry is one object a user applies (``kubectl apply``) while the controller runs, with
whatever it needs next to it (a NodePool on a bad NodeClass, a pod pinned to a bad NodePool),
and the outcome the user must see: the API server refuses it (``refused``), or a status
condition on the object says what is wrong (``condition``), or an Event about the object does
(``event``). An entry may accept more than one outcome where the fix may land in the CRD or in
the controller (a duration beyond what Go's ``time.Duration`` holds). Where the project's
design reads a problem on another object (a malformed scale-from-zero annotation is listed on
the NodeClass that selects the resource, docs/generic-capi.md), ``where`` names it and the
words must include the bad object's name.

The cases are the single-object suites' (``tests/reliability/malformed``), imported rather
than copied, plus the inputs the issue found stopping or silent; the single-object suites pin
the exact words, this one checks that they all still hold when everything arrives at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.sim.scenario.catalog import NAME
from tests.reliability.malformed import test_nodeclasses, test_nodepools, test_pods
from tests.reliability.malformed.test_scale_from_zero import CASES as ANNOTATION_CASES
from tests.reliability.malformed.test_templates import NO_SHAPE
from tests.reliability.malformed.world import CA, INFRA, NODECLASS_REF

from .objects import (
    MAX_SIZE,
    NAMESPACE,
    RESOURCES,
    machine_deployment,
    node,
    nodeclaim,
    nodeclass,
    nodepool,
    pod,
    pod_spec,
    required,
)

Outcome = Literal["refused", "condition", "event"]
# The seven inputs that stopped provisioning for the whole cluster when issue 24 was filed.
STOPPERS: Final = frozenset(
    {
        "nodepool-expire-after-huge",
        "nodepool-consolidate-after-huge",
        "nodepool-termination-grace-huge",
        "nodepool-limit-cpu-1e400",
        "nodepool-name-64",
        "nodepool-requirements-100",
        "pod-cpu-1e400",
    }
)


@dataclass(frozen=True)
class Entry:
    """One bad object, what comes with it, and what the user must read about it."""

    id: str
    klass: str
    obj: JsonObject
    expected: tuple[Outcome, ...]
    words: tuple[str, ...]
    """Said on one line of a condition message or in one Event message (not for ``refused``:
    the API server's message is its own)."""
    companions: tuple[JsonObject, ...] = ()
    """Applied just before the entry (a NodePool on a NodeClass entry)."""
    pinned: bool = False
    """A pod pinned to this NodePool follows it, so the NodePool is used, not only read."""
    where: tuple[str, str] | None = None
    """(kind, name) of the object that carries the mark, when it is not the entry itself."""
    fails_today: str | None = None
    """What is still missing for this entry, when something is: a strict xfail, so the fix
    shows as a failure until the mark goes. None today."""

    @property
    def kind(self) -> str:
        return str(self.obj["kind"])

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def namespace(self) -> str | None:
        return NAMESPACE if RESOURCES[self.kind].namespaced else None

    @property
    def marked_on(self) -> tuple[str, str]:
        return self.where or (self.kind, self.name)


# -- NodePools -----------------------------------------------------------------------------


_HUGE = "99999999999h"
_UNSATISFIABLE = {
    case: (template, spec)
    for case, template, spec, _ in test_nodepools.ON_PODS
    # A taint is for the pods that tolerate it: only the pods that do not are told. The
    # other two exclude one type, or ask for 5 of them, which this catalog has.
    if case not in ("taint-not-tolerated", "instance-type-excluded", "min-values-too-many")
}
_UNSATISFIABLE["min-values-beyond-the-catalog"] = (
    {
        "requirements": [
            {"key": wellknown.LABEL_INSTANCE_TYPE, "operator": "Exists", "minValues": 50}
        ]
    },
    {},
)
# What the NodePool itself must say for the unsatisfiable ones, besides what the pods pinned
# to them are told: its InstanceTypesSatisfiable condition, or for limits (which leave it
# Ready: a zero limit is how upstream users pause a NodePool) a NoNodeWithinLimits Event.
_UNSATISFIABLE_WORDS: Final = {
    "instance-type-typo": ("m-2x-amd64-linux-typo",),
    "arch-not-offered": ("arm64",),
    "os-not-offered": ("windows",),
    "zone-not-offered": ("zone-z",),
    "capacity-type-not-offered": ("spot",),
    "min-values-beyond-the-catalog": ("minValues 50", "not met"),
    "limits-zero-cpu": ("limits.cpu 0 leaves room for no node",),
    "limits-zero-nodes": ("limits.nodes 0 leaves room for no node",),
    "limits-below-one-node": ("limits.memory", "leaves room for no node"),
}


def _nodepools() -> list[Entry]:
    entries = [
        Entry(
            f"nodepool-{case}",
            "nodepool",
            nodepool(f"np-{case}", template, **spec),
            ("condition", "event"),
            _UNSATISFIABLE_WORDS[case],
        )
        for case, (template, spec) in _UNSATISFIABLE.items()
    ]
    entries += [
        Entry(
            f"nodepool-{case}",
            "nodepool",
            nodepool(f"np-{case}", template),
            ("condition",),
            words,
        )
        for case, template, _, _, words in test_nodepools.ON_NODEPOOL
    ]
    requirements = [{"key": f"example.com/label-{i}", "operator": "Exists"} for i in range(100)]
    stoppers = [
        ("expire-after-huge", nodepool("np-expire-huge", {"expireAfter": _HUGE}), "expireAfter"),
        (
            "consolidate-after-huge",
            nodepool("np-consolidate-huge", {}, disruption={"consolidateAfter": _HUGE}),
            "consolidateAfter",
        ),
        (
            "termination-grace-huge",
            nodepool("np-grace-huge", {"terminationGracePeriod": _HUGE}),
            "terminationGracePeriod",
        ),
        ("name-64", nodepool("n" * 64, {}), "63"),
        (
            "requirements-100",
            nodepool("np-requirements", {"requirements": requirements}),
            "requirements",
        ),
    ]
    entries += [
        Entry(
            f"nodepool-{case}",
            "nodepool",
            obj,
            ("refused", "condition"),
            (word,),
            # A pod cannot select a label value over 63 characters; the issue's run stopped
            # with no pod pinned to that one.
            pinned=not case.startswith("name-"),
        )
        for case, obj, word in stoppers
    ]
    entries.append(
        Entry(
            "nodepool-limit-cpu-1e400",
            "nodepool",
            nodepool("np-limit-huge", {}, limits={"cpu": "1e400"}),
            # Go keeps it as an arbitrary-precision decimal, no limit; it is admitted and said
            # on the NodePool (an Event: it stays Ready, as in Kubernetes).
            ("refused", "condition", "event"),
            ("limits.cpu 1e400", "no limit"),
            pinned=True,
        )
    )
    entries += [
        Entry(
            "nodepool-name-250",
            "nodepool",
            nodepool("n" * 250, {}),
            ("refused", "condition"),
            ("63",),
        ),
        Entry(
            "nodepool-expire-after-1s",
            "nodepool",
            nodepool("np-expire-1s", {"expireAfter": "1s"}),
            ("condition", "event"),
            ("expireAfter",),
        ),
    ]
    return entries


# -- NodeClasses ---------------------------------------------------------------------------


def _behind(nodeclass_name: str) -> JsonObject:
    """The NodePool a user puts on a NodeClass, which is how its problems come to matter."""
    return nodepool(
        f"on-{nodeclass_name}", {"nodeClassRef": {**NODECLASS_REF, "name": nodeclass_name}}
    )


def _nodeclasses() -> list[Entry]:
    entries = [
        Entry(
            f"nodeclass-{case}",
            "nodeclass",
            nodeclass(f"nc-{case}", spec, annotations),
            ("condition",),
            words,
            companions=(_behind(f"nc-{case}"),),
        )
        for case, spec, annotations, _, words in test_nodeclasses.NOT_READY
        # Its broken resource is the single-object suite's; here the annotation cases are.
        if case != "matches-only-a-broken-resource"
    ]
    # The controller cannot read these at all; the NodePool on them says why.
    entries += [
        Entry(
            f"nodeclass-{case}",
            "nodeclass",
            nodeclass(f"nc-{case}", spec, {}),
            ("condition",),
            (f"ClusterAPINodeClass nc-{case}", *words),
            companions=(_behind(f"nc-{case}"),),
            where=("NodePool", f"on-nc-{case}"),
        )
        for case, spec, words in test_nodeclasses.UNREADABLE
    ]
    return entries


# -- Cluster API objects -------------------------------------------------------------------


GOOD_ANNOTATIONS: Final = {
    CA + "cpu": "2",
    CA + "memory": "4Gi",
    CA + "maxPods": "110",
    CA + "labels": "kubernetes.io/arch=amd64,karpenter.sh/capacity-type=on-demand",
    "karpenter.cluster.x-k8s.io/price": "0.054",
    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": "0",
    MAX_SIZE: "100",
}
"""What the catalog's ``c-2x`` MachineDeployment carries: a resource the solver would pick."""


def _merged(changes: dict[str, str | None]) -> dict[str, str]:
    merged = dict(GOOD_ANNOTATIONS)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def _left_out(name: str, *words: str) -> tuple[str, ...]:
    """Words of the catalog NodeClass's Ready condition line that leaves ``name`` out."""
    return (f"MachineDeployment {NAMESPACE}/{name}", *words)


def _cluster_api() -> list[Entry]:
    entries = [
        Entry(
            f"annotation-{case}",
            "scale-from-zero annotation",
            machine_deployment(f"ann-{case}", _merged(changes)),
            ("condition",),
            _left_out(f"ann-{case}", *words),
            where=("ClusterAPINodeClass", NAME),
        )
        for case, changes, words in ANNOTATION_CASES
    ]
    infra = {"apiGroup": INFRA, "kind": "DockerMachineTemplate"}
    entries += [
        Entry(
            "capi-infrastructure-kind-not-served",
            "broken Cluster API object",
            machine_deployment(
                "capi-kind-not-served",
                _merged(NO_SHAPE),
                template_spec={
                    "infrastructureRef": {**infra, "kind": "FooMachineTemplate", "name": "x"}
                },
            ),
            ("condition",),
            _left_out("capi-kind-not-served", "FooMachineTemplate"),
            where=("ClusterAPINodeClass", NAME),
        ),
        Entry(
            "capi-infrastructure-missing",
            "broken Cluster API object",
            machine_deployment(
                "capi-template-missing",
                _merged(NO_SHAPE),
                template_spec={"infrastructureRef": {**infra, "name": "missing-template"}},
            ),
            ("condition",),
            _left_out("capi-template-missing", "DockerMachineTemplate default/missing-template"),
            where=("ClusterAPINodeClass", NAME),
        ),
        Entry(
            "capi-infrastructure-ref-without-name",
            "broken Cluster API object",
            machine_deployment(
                "capi-ref-without-name",
                _merged(NO_SHAPE),
                template_spec={"infrastructureRef": dict(infra)},
            ),
            ("condition",),
            _left_out("capi-ref-without-name", "needs a kind and a name"),
            where=("ClusterAPINodeClass", NAME),
        ),
        Entry(
            "capi-cluster-missing",
            "broken Cluster API object",
            machine_deployment("capi-cluster-missing", _merged({}), cluster="nowhere"),
            ("event", "condition"),
            ("nowhere",),
        ),
        Entry(
            "capi-max-size-zero",
            "broken Cluster API object",
            machine_deployment("capi-max-size-zero", _merged({MAX_SIZE: "0"})),
            ("event", "condition"),
            ("max-size",),
        ),
    ]
    return entries


# -- pods ------------------------------------------------------------------------------------


_FIT_HERE: Final = {"cpu-just-over"}
"""Single-object cases a node of this catalog holds (2100m fits its 4-vCPU types)."""


def _pods() -> list[Entry]:
    small = {"cpu": "100m"}
    entries = [
        # Specs kube-apiserver refuses may be refused here too: either way the user is told.
        Entry(
            f"pod-{case}",
            "impossible pod",
            pod(f"pod-{case}", spec),
            ("refused", "event"),
            # The largest type differs from the single-object suite's catalog.
            tuple(w for w in words if not w.startswith("the most any allocates")),
        )
        for case, spec, words in test_pods.UNSCHEDULABLE
        if case not in _FIT_HERE
    ]
    entries += [
        Entry(
            "pod-cpu-1e400",
            "impossible pod",
            pod("pod-cpu-1e400", pod_spec({"cpu": "1e400"})),
            ("refused", "event"),
            ("cpu",),
        ),
        Entry(
            "pod-node-missing",
            "impossible pod",
            pod(
                "pod-node-missing",
                pod_spec(small, nodeSelector={wellknown.LABEL_HOSTNAME: "no-such-node"}),
            ),
            ("event",),
            ("no-such-node",),
        ),
        Entry(
            "pod-pvc-missing",
            "impossible pod",
            pod(
                "pod-pvc-missing",
                pod_spec(
                    small,
                    volumes=[
                        {"name": "data", "persistentVolumeClaim": {"claimName": "no-such-claim"}}
                    ],
                ),
            ),
            ("event",),
            ("no-such-claim",),
        ),
        Entry(
            "pod-arch-affinity",
            "impossible pod",
            pod(
                "pod-arch-affinity",
                pod_spec(
                    small,
                    affinity=required(
                        {"key": wellknown.LABEL_ARCH, "operator": "In", "values": ["s390x"]}
                    ),
                ),
            ),
            ("event",),
            ("s390x",),
        ),
    ]
    return entries


# -- hand-made NodeClaims and Nodes ---------------------------------------------------------


def _hand_made() -> list[Entry]:
    return [
        Entry(
            "nodeclaim-without-nodepool",
            "hand-made NodeClaim",
            nodeclaim("hand-made-orphan", {}),
            ("condition", "event"),
            ("NodePool",),
        ),
        Entry(
            "nodeclaim-nodepool-missing",
            "hand-made NodeClaim",
            nodeclaim("hand-made-ghost-pool", {wellknown.LABEL_NODEPOOL: "ghost"}),
            ("condition", "event"),
            ("ghost",),
        ),
        Entry(
            "nodeclaim-nodeclass-missing",
            "hand-made NodeClaim",
            nodeclaim("hand-made-no-class", {wellknown.LABEL_NODEPOOL: NAME}, "nope"),
            ("condition", "event"),
            ("nope",),
        ),
        Entry(
            "node-karpenter-labels",
            "hand-made Node",
            node("hand-made-node"),
            ("event", "condition"),
            ("NodeClaim",),
        ),
    ]


def catalogue() -> list[Entry]:
    """Every entry, in a fixed order (the order they are applied in, alternating halves)."""
    return [*_nodepools(), *_nodeclasses(), *_cluster_api(), *_pods(), *_hand_made()]
