"""The expectations of upstream Karpenter's CRD validation tests, as data.

Upstream tests its NodePool and NodeClaim CRDs against a real kube-apiserver
(``pkg/apis/v1/nodepool_validation_cel_test.go``, ``nodeclaim_validation_cel_test.go`` and
``nodepool_default_test.go``). Each case below restates one of their expectations in our own
words: a change to upstream's base object, whether the API server admits it, and, where
upstream also calls ``RuntimeValidate``, whether that passes. The objects are written as the
JSON a user (or Go's client) sends; where Go serialises a value in a particular form (a
``metav1.Duration`` of 20 minutes is ``20m0s``), that form is used.

``test_upstream_cel_cases.py`` runs them through the in-memory API server with our generated
CRDs and through our models; ``benchmarks/api_parity.py`` runs them against upstream's CRDs as
well, from a checkout the user points it at.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

JsonObject = dict[str, Any]
Mutation = Callable[[JsonObject], None]

LONG = "a" * 250  # upstream uses 250 random lower-case alphanumerics


def base_nodepool(name: str = "np") -> JsonObject:
    """Upstream's test NodePool: a test NodeClass and one capacity-type requirement."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.test.sh",
                        "kind": "TestNodeClass",
                        "name": "default",
                    },
                    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "Exists"}],
                }
            }
        },
    }


def base_nodeclaim(name: str = "nc") -> JsonObject:
    """Upstream's test NodeClaim."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name},
        "spec": {
            "nodeClassRef": {
                "group": "karpenter.test.sh",
                "kind": "TestNodeClaim",
                "name": "default",
            },
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "Exists"}],
        },
    }


@dataclass(frozen=True)
class Case:
    """One upstream expectation for a create."""

    name: str
    mutate: Mutation
    admitted: bool
    # None where upstream does not call RuntimeValidate (NodeClaims never do).
    runtime_valid: bool | None = None


@dataclass(frozen=True)
class UpdateCase:
    """One upstream expectation for an update of an admitted object."""

    name: str
    create: Mutation
    update: Mutation
    admitted: bool


# ------------------------------------------------------------------------------- helpers


def _template(obj: JsonObject) -> JsonObject:
    spec: JsonObject = obj["spec"]["template"]["spec"]
    return spec


def _set(*path: str, value: Any) -> Mutation:
    def mutate(obj: JsonObject) -> None:
        node = obj
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = copy.deepcopy(value)

    return mutate


def _drop(*path: str) -> Mutation:
    def mutate(obj: JsonObject) -> None:
        node = obj
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node.pop(path[-1], None)

    return mutate


def _all(*mutations: Mutation) -> Mutation:
    def mutate(obj: JsonObject) -> None:
        for mutation in mutations:
            mutation(obj)

    return mutate


def _pool_requirements(*requirements: JsonObject) -> Mutation:
    return _set("spec", "template", "spec", "requirements", value=list(requirements))


def _pool_taints(*taints: JsonObject, field: str = "taints") -> Mutation:
    return _set("spec", "template", "spec", field, value=list(taints))


def _pool_labels(labels: dict[str, str]) -> Mutation:
    return _set("spec", "template", "metadata", "labels", value=labels)


def _budgets(*budgets: JsonObject) -> Mutation:
    return _set("spec", "disruption", "budgets", value=list(budgets))


def _req(key: str, operator: str, values: list[str] | None = None, **extra: Any) -> JsonObject:
    requirement: JsonObject = {"key": key, "operator": operator, **extra}
    if values is not None:
        requirement["values"] = values
    return requirement


ZONE = "topology.kubernetes.io/zone"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
WELL_KNOWN_WITHOUT_VALUES = (
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "node.kubernetes.io/windows-build",
)
_NUMERIC_INVALID = [
    (op, values) for op in ("Gt", "Lt", "Gte", "Lte") for values in ([], ["1", "2"], ["a"], ["-1"])
]

# ------------------------------------------------------------------------- NodePool creates


def _duration_cases(field: str, path: tuple[str, ...], *, nillable: bool) -> list[Case]:
    valid = ["30s", "1h30m5s"] + (["Never"] if nillable else [])
    invalid = ["-1s", "1hr", "FooNever"] + ([] if nillable else ["Never"])
    return [Case(f"{field} {v!r} is valid", _set(*path, value=v), True) for v in valid] + [
        Case(f"{field} {v!r} is refused", _set(*path, value=v), False) for v in invalid
    ]


def _nodepool_disruption_cases() -> list[Case]:
    cases = _duration_cases(
        "expireAfter", ("spec", "template", "spec", "expireAfter"), nillable=True
    )
    cases += _duration_cases(
        "consolidateAfter", ("spec", "disruption", "consolidateAfter"), nillable=True
    )
    for policy in ("WhenEmpty", "WhenEmptyOrUnderutilized"):
        for after in ("30s", "Never"):
            cases.append(
                Case(
                    f"consolidateAfter {after} with consolidationPolicy {policy}",
                    _all(
                        _set("spec", "disruption", "consolidateAfter", value=after),
                        _set("spec", "disruption", "consolidationPolicy", value=policy),
                    ),
                    True,
                )
            )
    for policy in ("WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"):
        cases.append(
            Case(
                f"consolidationPolicy {policy} is valid",
                _set("spec", "disruption", "consolidationPolicy", value=policy),
                True,
                runtime_valid=True,
            )
        )
    for policy in ("1", "2", "3", "0", "4", "10", "balanced", "whenempty", "", "foo"):
        cases.append(
            Case(
                f"consolidationPolicy {policy!r} is refused",
                _set("spec", "disruption", "consolidationPolicy", value=policy),
                False,
            )
        )
    cases.append(
        Case(
            "consolidationPolicy WhenUnderutilized (v1beta1) is refused",
            _set("spec", "disruption", "consolidationPolicy", value="WhenUnderutilized"),
            False,
        )
    )
    return cases


def _nodepool_budget_cases() -> list[Case]:
    def budget(nodes: str, schedule: str | None = None, duration: str | None = None) -> JsonObject:
        out: JsonObject = {"nodes": nodes}
        if schedule is not None:
            out["schedule"] = schedule
        if duration is not None:
            out["duration"] = duration
        return out

    refused = [
        ("a schedule that is not cron ('*')", [budget("10", "*", "20m0s")]),
        ("a schedule with four fields", [budget("10", "* * * * ", "20m0s")]),
        ("a negative duration", [budget("10", "* * * * *", "-20m0s")]),
        ("a duration in seconds", [budget("10", "* * * * *", "30s")]),
        ("a negative node count", [budget("-10")]),
        ("a negative percentage", [budget("-10%")]),
        ("a percentage over three digits", [budget("1000%")]),
        ("a schedule without duration", [budget("10", "* * * * *")]),
        ("a duration without schedule", [budget("10", duration="20m0s")]),
        (
            "two budgets, one with an invalid schedule",
            [budget("10", "@annually", "20m0s"), budget("10", "*", "20m0s")],
        ),
        (
            "three budgets, one without both schedule and duration",
            [budget("10", duration="20m0s"), budget("10", "* * * * *", "20m0s"), budget("10")],
        ),
    ]
    admitted = [
        ("schedule and duration", [budget("10", "* * * * *", "20m0s")]),
        ("hours and minutes in the duration", [budget("10", "* * * * *", "2h20m0s")]),
        ("neither schedule nor duration", [budget("10")]),
        ("a special-cased schedule", [budget("10", "@annually", "20m0s")]),
    ]
    cases = [Case(f"budget with {name} is refused", _budgets(*b), False) for name, b in refused]
    cases += [Case(f"budget with {name} is valid", _budgets(*b), True) for name, b in admitted]
    for reasons, ok in (
        (["Drifted"], True),
        (["Underutilized"], True),
        (["Empty"], True),
        (["invalid"], False),
        (["expired"], False),
        ([""], False),
        (["Drifted", "Empty"], True),
    ):
        cases.append(
            Case(
                f"budget reasons {reasons} {'are valid' if ok else 'are refused'}",
                _budgets({**budget("10", "* * * * *", "20m0s"), "reasons": reasons}),
                ok,
            )
        )
    return cases


def _taint_cases(mutation: Callable[..., Mutation], *, runtime: bool) -> list[Case]:
    def expect(valid: bool) -> bool | None:
        return valid if runtime else None

    cases = [
        Case(
            "valid taints",
            mutation(
                {"key": "a", "value": "b", "effect": "NoSchedule"},
                {"key": "c", "value": "d", "effect": "NoExecute"},
                {"key": "e", "value": "f", "effect": "PreferNoSchedule"},
                {"key": "Test", "value": "f", "effect": "PreferNoSchedule"},
                {"key": "test.com/Test", "value": "f", "effect": "PreferNoSchedule"},
                {"key": "test.com.com/test", "value": "f", "effect": "PreferNoSchedule"},
                {"key": "key-only", "effect": "NoExecute"},
            ),
            True,
            expect(True),
        ),
    ]
    for key in ("test.com.com}", "Test.com/test", "test/test/test", "test/", "/test", "???"):
        cases.append(
            Case(
                f"taint key {key!r} is refused",
                mutation({"key": key, "effect": "NoSchedule"}),
                False,
                expect(False),
            )
        )
    if runtime:
        for key in (f"test.com.test.{LONG}/test", f"test.com.test/test-{LONG}"):
            cases.append(
                Case(
                    f"taint key of {len(key)} characters is admitted but fails at runtime",
                    mutation({"key": key, "effect": "NoSchedule"}),
                    True,
                    False,
                )
            )
    cases += [
        Case("missing taint key", mutation({"key": "", "effect": "NoSchedule"}), False),
        Case(
            "taint value '???'",
            mutation({"key": "invalid-value", "effect": "NoSchedule", "value": "???"}),
            False,
        ),
        Case("taint effect '???'", mutation({"key": "invalid-effect", "effect": "???"}), False),
        Case(
            "same taint key with different effects",
            mutation({"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute"}),
            True,
            expect(True),
        ),
    ]
    return cases


def _requirement_cases(
    mutation: Callable[..., Mutation], *, nodepool: bool, runtime: bool
) -> list[Case]:
    def expect(valid: bool) -> bool | None:
        return valid if runtime else None

    cases = [
        Case(
            "valid requirement keys",
            mutation(
                _req("Test", "Exists"),
                _req("test.com/Test", "Exists"),
                _req("test.com.com/test", "Exists"),
                _req("key-only", "Exists"),
            ),
            True,
            expect(True),
        )
    ]
    for key in ("test.com.com}", "Test.com/test", "test/test/test", "test/", "/test"):
        cases.append(
            Case(
                f"requirement key {key!r} is refused",
                mutation(_req(key, "Exists")),
                False,
                expect(False),
            )
        )
    if runtime:
        for key in (f"test.com.test.{LONG}/test", f"test.com.test/test-{LONG}"):
            cases.append(
                Case(
                    f"requirement key of {len(key)} characters is admitted but fails at runtime",
                    mutation(_req(key, "Exists")),
                    True,
                    False,
                )
            )
    cases += [
        Case(
            "supported operators",
            mutation(
                _req(ZONE, "In", ["test"]),
                _req(ZONE, "Gt", ["1"]),
                _req(ZONE, "Lt", ["1"]),
                _req(ZONE, "NotIn"),
                _req(ZONE, "Exists"),
            ),
            True,
            expect(True),
        ),
        Case("operator 'unknown'", mutation(_req(ZONE, "unknown", ["test"])), False, expect(False)),
        Case(
            "requirement in the karpenter.sh domain",
            mutation(_req("karpenter.sh/test", "In", ["test"])),
            False,
            expect(False),
        ),
        Case(
            "requirement on a key under kubernetes.io/hostname",
            mutation(_req("kubernetes.io/hostname/test", "In", ["test"])),
            False,
            expect(False),
        ),
        Case(
            "requirement on kubernetes.io/hostname",
            mutation(_req("kubernetes.io/hostname", "In", ["test"])),
            False,
            expect(False),
        ),
    ]
    if nodepool:
        cases.append(
            Case(
                "requirement on karpenter.sh/nodepool",
                mutation(_req("karpenter.sh/nodepool", "In", ["silly"])),
                False,
                False,
            )
        )
    for domain in ("kubernetes.io", "k8s.io", "subdomain.kubernetes.io", "subdomain.k8s.io"):
        cases.append(
            Case(
                f"requirement in {domain}",
                mutation(_req(f"{domain}/test", "In", ["test"])),
                True,
                expect(True),
            )
        )
    well_known = list(WELL_KNOWN_WITHOUT_VALUES)
    if not nodepool:
        # Upstream's NodeClaim test includes capacity-type (no runtime validation there).
        well_known.append("karpenter.sh/capacity-type")
    for key in well_known:
        cases.append(
            Case(
                f"well-known label {key}",
                mutation(_req(key, "In", ["test"])),
                True,
                expect(True),
            )
        )
    cases += [
        Case(
            "non-empty set after removing an overlapping value",
            mutation(_req(ZONE, "In", ["test", "foo"]), _req(ZONE, "NotIn", ["test", "bar"])),
            True,
            expect(True),
        ),
        Case("empty requirements", mutation(), True, expect(True)),
    ]
    for op, values in _NUMERIC_INVALID:
        cases.append(
            Case(
                f"operator {op} with values {values}",
                mutation(_req(ZONE, op, values)),
                False,
                expect(False),
            )
        )
    cases += [
        Case(
            "minValues -1",
            mutation(_req(INSTANCE_TYPE, "In", ["insance-type-1"], minValues=-1)),
            False,
        ),
        Case(
            "minValues 0",
            mutation(_req(INSTANCE_TYPE, "In", ["insance-type-1"], minValues=0)),
            False,
        ),
        Case("minValues 51", mutation(_req(INSTANCE_TYPE, "Exists", minValues=51)), False),
        Case(
            "90 values without minValues",
            mutation(_req(INSTANCE_TYPE, "In", [f"instance{i}" for i in range(90)])),
            True,
        ),
        Case(
            "minValues above the number of values",
            mutation(_req(INSTANCE_TYPE, "In", ["insance-type-1"], minValues=2)),
            False,
        ),
    ]
    return cases


def _nodepool_label_cases() -> list[Case]:
    cases = [
        Case("unrecognised label", _pool_labels({"foo": "silly"}), True, True),
        Case("label karpenter.sh/nodepool", _pool_labels({"karpenter.sh/nodepool": "x"}), False),
        Case(
            "label key with spaces is admitted but fails at runtime",
            _pool_labels({"spaces are not allowed": "x"}),
            True,
            False,
        ),
        Case("label value with '/'", _pool_labels({"silly": "/ is not allowed"}), False, False),
        Case("label karpenter.sh/unknown", _pool_labels({"karpenter.sh/unknown": "x"}), False),
        Case(
            "labels kOps requires",
            _pool_labels({"kops.k8s.io/instancegroup": "karpenter-nodes", "kops.k8s.io/gpu": "1"}),
            True,
            True,
        ),
    ]
    for key in (f"test.com.test.{LONG}/test", f"test.com.test/test-{LONG}"):
        cases.append(
            Case(
                f"label key of {len(key)} characters is admitted but fails at runtime",
                _pool_labels({key: "silly"}),
                True,
                False,
            )
        )
    for domain in ("kubernetes.io", "k8s.io"):
        for key in (domain, f"{domain}/key", f"subdomain.{domain}", f"subdomain.{domain}/key"):
            cases.append(Case(f"label {key}", _pool_labels({key: "test-value"}), True, True))
    return cases


def _nodepool_static_cases() -> list[Case]:
    replicas = _set("spec", "replicas", value=10)
    cases = [
        Case(f"replicas {n}", _set("spec", "replicas", value=n), True, True) for n in (5, 0, 1000)
    ]
    cases.append(Case("replicas -100", _set("spec", "replicas", value=-100), False))
    for name, limits in (
        ("cpu", {"cpu": "1000"}),
        ("memory", {"memory": "2000Gi"}),
        ("pods", {"pods": "10"}),
        ("ephemeral-storage", {"ephemeral-storage": "10Gi"}),
    ):
        cases.append(
            Case(
                f"static NodePool with limits.{name}",
                _all(_set("spec", "limits", value=limits), replicas),
                False,
            )
        )
    cases.append(
        Case("static NodePool with weight", _all(_set("spec", "weight", value=25), replicas), False)
    )
    compatible: list[tuple[str, Mutation]] = [
        ("limits.nodes", _set("spec", "limits", value={"nodes": "100"})),
        (
            "several budgets",
            _set(
                "spec",
                "disruption",
                value={
                    "consolidationPolicy": "WhenEmptyOrUnderutilized",
                    "consolidateAfter": "5m",
                    "budgets": [
                        {
                            "nodes": "20%",
                            "schedule": "0 9 * * mon-fri",
                            "duration": "8h0m0s",
                            "reasons": ["Drifted", "Empty"],
                        },
                        {
                            "nodes": "30%",
                            "schedule": "0 22 * * sat,sun",
                            "duration": "4h0m0s",
                            "reasons": ["Underutilized"],
                        },
                        {"nodes": "5"},
                    ],
                },
            ),
        ),
        ("template labels", _pool_labels({"environment": "production"})),
        (
            "template annotations",
            _set(
                "spec",
                "template",
                "metadata",
                "annotations",
                value={"example.com/last-updated": "2024-01-01"},
            ),
        ),
        (
            "taints",
            _pool_taints({"key": "gpu-workload", "value": "enabled", "effect": "NoSchedule"}),
        ),
        (
            "startup taints",
            _pool_taints(
                {"key": "example.com/initializing", "value": "true", "effect": "NoSchedule"},
                field="startupTaints",
            ),
        ),
        (
            "requirements",
            _pool_requirements(
                _req(
                    INSTANCE_TYPE,
                    "In",
                    [
                        *("m5.large", "m5.xlarge", "m5.2xlarge"),
                        *("c5.large", "c5.xlarge", "r5.large", "r5.xlarge"),
                    ],
                    minValues=3,
                ),
                _req(ZONE, "In", ["us-west-2a", "us-west-2b", "us-west-2c"]),
                _req("karpenter.sh/capacity-type", "In", ["on-demand", "spot"]),
                _req("kubernetes.io/arch", "In", ["amd64"]),
                _req("karpenter.k8s.aws/instance-memory", "Gt", ["8192"]),
                _req("karpenter.k8s.aws/instance-cpu", "Lt", ["64"]),
            ),
        ),
        ("expireAfter", _set("spec", "template", "spec", "expireAfter", value="72h")),
        (
            "terminationGracePeriod",
            _set("spec", "template", "spec", "terminationGracePeriod", value="5m0s"),
        ),
    ]
    cases += [
        Case(f"static NodePool with {name}", _all(mutation, replicas), True, True)
        for name, mutation in compatible
    ]
    cases.append(
        Case(
            "static NodePool without consolidateAfter",
            _all(
                _set("spec", "replicas", value=3), _drop("spec", "disruption", "consolidateAfter")
            ),
            True,
        )
    )
    return cases


def _nodeclassref_cases(path: tuple[str, ...]) -> list[Case]:
    return [
        Case(f"nodeClassRef {field} empty", _set(*path, field, value=""), False)
        for field in ("group", "kind", "name")
    ] + [
        Case(
            "nodeClassRef group with a version",
            _set(*path, "group", value="karpenter.test.sh/v1"),
            False,
        ),
    ]


NODEPOOL_CASES: list[Case] = [
    *_nodepool_disruption_cases(),
    Case(
        "consolidateAfter omitted on a dynamic NodePool",
        _drop("spec", "disruption", "consolidateAfter"),
        True,
    ),
    *_nodepool_budget_cases(),
    *_taint_cases(_pool_taints, runtime=True),
    *_requirement_cases(_pool_requirements, nodepool=True, runtime=True),
    *_nodepool_label_cases(),
    *_duration_cases(
        "terminationGracePeriod",
        ("spec", "template", "spec", "terminationGracePeriod"),
        nillable=False,
    ),
    *_nodeclassref_cases(("spec", "template", "spec", "nodeClassRef")),
    *_nodepool_static_cases(),
]

NODEPOOL_UPDATES: list[UpdateCase] = [
    UpdateCase(
        "nodeClassRef group changes",
        lambda o: None,
        _set(
            "spec", "template", "spec", "nodeClassRef", "group", value="karpenter.test.mutated.sh"
        ),
        False,
    ),
    UpdateCase(
        "nodeClassRef kind changes",
        lambda o: None,
        _set("spec", "template", "spec", "nodeClassRef", "kind", value="TestNodeClass2"),
        False,
    ),
    UpdateCase(
        "nodeClassRef name changes",
        lambda o: None,
        _set("spec", "template", "spec", "nodeClassRef", "name", value="other"),
        True,
    ),
    UpdateCase(
        "replicas increase",
        _set("spec", "replicas", value=3),
        _set("spec", "replicas", value=5),
        True,
    ),
    UpdateCase(
        "static NodePool becomes dynamic",
        _set("spec", "replicas", value=3),
        _drop("spec", "replicas"),
        False,
    ),
    UpdateCase(
        "dynamic NodePool becomes static",
        lambda o: None,
        _set("spec", "replicas", value=3),
        False,
    ),
    UpdateCase(
        "static NodePool's limits.nodes changes",
        _all(_set("spec", "replicas", value=3), _set("spec", "limits", value={"nodes": "10"})),
        _set("spec", "limits", value={"nodes": "100"}),
        True,
    ),
]

# ------------------------------------------------------------------------ NodeClaim creates


def _claim_requirements(*requirements: JsonObject) -> Mutation:
    return _set("spec", "requirements", value=list(requirements))


def _claim_taints(*taints: JsonObject) -> Mutation:
    return _set("spec", "taints", value=list(taints))


NODECLAIM_CASES: list[Case] = [
    *_taint_cases(_claim_taints, runtime=False),
    Case(
        "nodeClassRef with a valid group",
        _set(
            "spec",
            "nodeClassRef",
            value={"kind": "TestNodeClass", "name": "nodeclass-test", "group": "karpenter.test.sh"},
        ),
        True,
    ),
    *_nodeclassref_cases(("spec", "nodeClassRef")),
    *_requirement_cases(_claim_requirements, nodepool=False, runtime=False),
    Case(
        "requirement on karpenter.sh/nodepool (NodeClaims carry it)",
        _claim_requirements(_req("karpenter.sh/nodepool", "In", ["default"])),
        True,
    ),
    Case(
        "101 requirements",
        _claim_requirements(*[_req(f"key-{i}", "In", [f"value-{i}"]) for i in range(101)]),
        False,
    ),
    *_duration_cases("terminationGracePeriod", ("spec", "terminationGracePeriod"), nillable=False),
    *_duration_cases("expireAfter", ("spec", "expireAfter"), nillable=True),
]

NODECLAIM_UPDATES: list[UpdateCase] = [
    UpdateCase(
        "spec changes (NodeClaim spec is immutable)",
        lambda o: None,
        _set("spec", "expireAfter", value="1h"),
        False,
    ),
    UpdateCase(
        "labels change (metadata is mutable)",
        lambda o: None,
        _set("metadata", "labels", value={"team": "a"}),
        True,
    ),
]
