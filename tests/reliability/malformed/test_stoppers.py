"""The inputs that once stopped provisioning for the whole cluster (issue 24, item 1).

Each was admitted by the API server and then raised in the middle of a controller: a duration
beyond what a ``timedelta`` (or Go's ``time.Duration``) holds, a quantity of ``1e400``, a
NodePool name too long for the ``karpenter.sh/nodepool`` label its NodeClaims carry, and a
NodePool whose NodeClaims would carry more requirements than the NodeClaim CRD admits (or whose
NodeClaim the API refuses for any other reason). With one of them applied no pod was bound again
and every round logged a traceback at ERROR. Now our CRDs refuse what can be refused; what a
cluster on upstream's CRDs admits is marked on the object (the NodePool's
``ValidationSucceeded`` condition and an Event, or an Event on the pod), the good NodePool
provisions in the same pass, and nothing is logged with a traceback.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.core.kube.errors import Invalid
from karpenter_capi.core.kube.resources import NODEPOOLS, PODS

from .world import NAMESPACE, NODEPOOL, World

_TOO_LONG = "99999999999h"


def _requirements(count: int) -> list[dict[str, Any]]:
    return [{"key": f"example.com/k{i}", "operator": "In", "values": ["v"]} for i in range(count)]


# (id, NodePool name, template spec, NodePool spec extras, words in ValidationSucceeded)
BAD_NODEPOOLS: list[tuple[str, str, dict[str, Any], dict[str, Any], tuple[str, ...]]] = [
    (
        "expire-after-beyond-go",
        "bad",
        {"expireAfter": _TOO_LONG},
        {},
        ("spec.template.spec.expireAfter", _TOO_LONG, "2562047h47m16s"),
    ),
    (
        "termination-grace-beyond-go",
        "bad",
        {"terminationGracePeriod": _TOO_LONG},
        {},
        ("spec.template.spec.terminationGracePeriod", _TOO_LONG, "2562047h47m16s"),
    ),
    (
        "consolidate-after-beyond-go",
        "bad",
        {},
        {"disruption": {"consolidateAfter": _TOO_LONG}},
        ("spec.disruption.consolidateAfter", _TOO_LONG, "2562047h47m16s"),
    ),
    (
        "name-over-a-label-value",
        "b" * 64,
        {},
        {},
        ("metadata.name", "karpenter.sh/nodepool", "no more than 63 characters"),
    ),
    (
        "name-of-250-characters",
        "b" * 250,
        {},
        {},
        ("metadata.name", "karpenter.sh/nodepool", "no more than 63 characters"),
    ),
    (
        "requirements-over-the-nodeclaim-maximum",
        "bad",
        {"requirements": _requirements(100)},
        {},
        ("spec.template.spec.requirements", "103", "at most 100", "97"),
    ),
]


_OURS = ("the longest duration Kubernetes holds", "name must be no more than 63 characters")


def _strip_our_rules(node: Any) -> Any:
    """The schema without this project's rules beyond upstream's."""
    if isinstance(node, list):
        return [_strip_our_rules(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _strip_our_rules(value) for key, value in node.items()}
    rules = [
        r
        for r in out.get("x-kubernetes-validations", [])
        if not any(ours in r["message"] for ours in _OURS)
    ]
    if rules:
        out["x-kubernetes-validations"] = rules
    else:
        out.pop("x-kubernetes-validations", None)
    return out


def _with_upstreams_crds(world: World) -> None:
    """As a cluster still on upstream's CRDs, or with NodePools admitted before our rules."""
    world.server.apply_manifests(
        [_strip_our_rules(crd) for crd in generate_crds() if crd["spec"]["group"] == "karpenter.sh"]
    )


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{r.levelname} {r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.exc_info and r.levelno >= logging.WARNING
    ]


@pytest.mark.parametrize(
    ("name", "template", "spec", "words"),
    [pytest.param(n, t, s, w, id=case) for case, n, t, s, w in BAD_NODEPOOLS],
)
def test_a_nodepool_the_controller_cannot_use_is_marked_and_the_others_still_provision(
    name: str,
    template: dict[str, Any],
    spec: dict[str, Any],
    words: tuple[str, ...],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    world = World()
    _with_upstreams_crds(world)
    world.nodepool(name, template, **spec)
    world.deploy("pinned", 2, node_selector={wellknown.LABEL_NODEPOOL: name})
    world.deploy()
    world.run()

    found = world.nodepool_condition(name, "ValidationSucceeded")
    assert (found["status"], found["reason"]) == ("False", "ValidationFailed"), found
    assert all(word in found["message"] for word in words), found["message"]
    assert world.nodepool_condition(name)["status"] == "False"
    event = world.event_about(*words)
    assert (event.kind, event.type) == ("NodePool", "Warning")
    assert world.pending("pinned")
    assert not [
        c
        for c in world.nodeclaims()
        if c["metadata"]["labels"].get(wellknown.LABEL_NODEPOOL) == name
    ]
    assert world.nodepool_condition(NODEPOOL)["status"] == "True"
    world.assert_good_resource_served()
    assert _tracebacks(caplog) == []


def test_a_limit_of_1e400_is_no_limit_as_in_kubernetes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Go keeps ``cpu: 1e400`` as an arbitrary-precision decimal, which no node ever reaches;
    here it is held at 10^100, which none reaches either."""
    caplog.set_level(logging.INFO)
    world = World()
    world.nodepool("roomy", {}, limits={"cpu": "1e400"})
    world.deploy("pinned", 2, node_selector={wellknown.LABEL_NODEPOOL: "roomy"})
    world.deploy()
    world.run()

    assert len(world.running("pinned")) == 2, world.pending("pinned")
    assert world.nodepool_condition("roomy")["status"] == "True"
    # Read as no limit, which is what it is, but the user is told once that it was.
    [said] = [e for e in world.events("LimitBeyondInt64") if e.name == "roomy"]
    assert (said.kind, said.type) == ("NodePool", "Warning")
    assert "limits.cpu 1e400 is beyond what Kubernetes counts (int64)" in said.message
    assert "treated as no limit on cpu" in said.message
    world.assert_good_resource_served()
    assert _tracebacks(caplog) == []


def test_a_pod_requesting_1e400_cpus_is_told_so_and_the_others_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    world = World()
    world.pod(
        "huge",
        {
            "containers": [
                {"name": "app", "image": "pause", "resources": {"requests": {"cpu": "1e400"}}}
            ]
        },
    )
    world.server.patch(
        PODS,
        "huge",
        {
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ],
            }
        },
        NAMESPACE,
        subresource="status",
    )
    world.deploy()
    world.run()

    events = [e for e in world.events("FailedScheduling") if e.name == "huge"]
    assert events, "\n".join(map(str, world.events()))
    assert "cpu 10^100 or more (the most" in events[-1].message, events[-1].message
    assert "10e99" not in events[-1].message
    assert "the most any allocates is 2" in events[-1].message, events[-1].message
    world.assert_good_resource_served()
    assert _tracebacks(caplog) == []


def test_a_nodeclaim_the_api_refuses_marks_its_nodepool_and_the_round_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The pods add the requirements: 97 of the NodePool's and its three fit the NodeClaim's
    100, but pods bounding one of its keys from both sides (Gt and Lt, two entries) make 101,
    which no validation of the NodePool alone can foresee. The API refuses that one NodeClaim;
    the NodePool and its pods are told why, and the other NodePool launches in the same round
    (the bad one sorts first, so a refusal that ended the round would stop it)."""
    caplog.set_level(logging.INFO)
    world = World()
    requirements = [
        {"key": f"example.com/k{i}", "operator": "Exists", "values": []} for i in range(97)
    ]
    taint = {"key": "dedicated", "value": "bad", "effect": "NoSchedule"}
    world.nodepool("zz-bad", {"requirements": requirements, "taints": [taint]})
    bounded = [
        {"key": "example.com/k0", "operator": "Gt", "values": ["1"]},
        {"key": "example.com/k0", "operator": "Lt", "values": ["9"]},
    ]
    world.deploy(
        "pinned",
        2,
        node_selector={wellknown.LABEL_NODEPOOL: "zz-bad"},
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "bad"}],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": bounded}]
                }
            }
        },
    )
    world.deploy()
    world.run()

    assert world.nodepool_condition("zz-bad", "ValidationSucceeded")["status"] == "True"
    words = ("could not create a NodeClaim", "spec.requirements", "must have at most 100 items")
    on_pool = [e for e in world.events("NodeClaimNotCreated") if e.kind == "NodePool"]
    assert [(e.name, e.type) for e in on_pool] == [("zz-bad", "Warning")], world.events()
    assert all(word in on_pool[0].message for word in words), on_pool[0].message
    pinned = world.pending("pinned")
    assert len(pinned) == 2
    told = [e for e in world.events("FailedScheduling") if e.name in pinned]
    assert told, "\n".join(map(str, world.events()))
    assert all(word in told[-1].message for word in ("NodePool zz-bad", *words)), told[-1]
    world.assert_good_resource_served()
    assert _tracebacks(caplog) == []
    refusals = [r for r in caplog.records if r.getMessage() == "could not create nodeclaim"]
    assert [r.levelname for r in refusals[:1]] == ["WARNING"]
    assert len([r for r in refusals if r.levelno >= logging.WARNING]) == 1, "once per change"


@pytest.mark.parametrize(
    ("name", "template", "spec", "words"),
    [
        pytest.param(n, t, s, w, id=case)
        for case, n, t, s, w in BAD_NODEPOOLS
        if not case.startswith("requirements")  # upstream admits 100, usable when keys repeat
    ],
)
def test_our_crds_refuse_them_at_admission_with_the_same_words(
    name: str, template: dict[str, Any], spec: dict[str, Any], words: tuple[str, ...]
) -> None:
    world = World()
    with pytest.raises(Invalid) as refused:
        world.nodepool(name, template, **spec)
    shown = [w for w in words if w not in ("metadata.name", "karpenter.sh/nodepool", _TOO_LONG)]
    assert all(word in refused.value.message for word in shown), refused.value.message


def test_all_of_them_at_once_leave_the_good_nodepool_serving_in_the_same_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The issue's run: every stopper applied together, then a normal workload."""
    caplog.set_level(logging.INFO)
    world = World()
    _with_upstreams_crds(world)
    for index, (_, name, template, spec, _) in enumerate(BAD_NODEPOOLS):
        world.nodepool(name if name != "bad" else f"bad-{index}", template, **spec)
    world.nodepool("roomy", {}, limits={"cpu": "1e400"})
    world.pod(
        "huge",
        {
            "containers": [
                {"name": "app", "image": "pause", "resources": {"requests": {"cpu": "1e400"}}}
            ]
        },
    )
    world.deploy(replicas=6)
    world.run()

    world.assert_good_resource_served(pods=6)
    invalid = [
        pool["metadata"]["name"]
        for pool in world.server.list(NODEPOOLS).items
        if world.nodepool_condition(pool["metadata"]["name"], "ValidationSucceeded")["status"]
        == "False"
    ]
    assert len(invalid) == len(BAD_NODEPOOLS)
    assert world.pending("huge") == ["huge"]
    assert _tracebacks(caplog) == []
