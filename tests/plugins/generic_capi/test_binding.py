"""Which free Machine each waiting NodeClaim takes: one each, never a Machine that is someone
else's, going away, or older than the NodeClaim."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from karpenter_capi.plugins.generic_capi.binding import (
    ANNOTATION_DELETE_MACHINE,
    ANNOTATION_NODECLAIM,
    ANNOTATION_NODECLAIM_UID,
    LABEL_MEMBER,
    bind_patch,
    bound_machine,
    claim_facts,
    machine_facts,
    match,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: int) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def machine(name: str, created: int, **meta: Any) -> dict[str, Any]:
    metadata = {"name": name, "namespace": "default", "creationTimestamp": at(created), **meta}
    return {"metadata": metadata, "spec": {}, "status": {}}


def claim(name: str, created: int, uid: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": uid or f"uid-{name}", "creationTimestamp": at(created)}
    }


def pairs(claims: list[dict[str, Any]], machines: list[dict[str, Any]]) -> dict[str, str]:
    found = match([claim_facts(c) for c in claims], [machine_facts(m) for m in machines])
    return {name: m.name for name, m in found.items()}


def test_oldest_claim_takes_the_oldest_machine_it_may() -> None:
    claims = [claim("b", 10), claim("a", 10), claim("c", 20)]
    machines = [machine("m3", 30), machine("m1", 11), machine("m2", 12)]

    assert pairs(claims, machines) == {"a": "m1", "b": "m2", "c": "m3"}


def test_machines_older_than_every_waiting_claim_are_never_taken() -> None:
    # m0 existed before anyone asked (a replica the user runs by hand).
    claims = [claim("a", 10), claim("b", 10)]
    machines = [machine("m0", 5), machine("m1", 10)]

    assert pairs(claims, machines) == {"a": "m1"}


def test_the_pairing_is_maximal_under_the_age_rule() -> None:
    # A greedy "newest claim first" would give m1 to c and leave a without a Machine.
    claims = [claim("a", 10), claim("c", 20)]
    machines = [machine("m1", 25), machine("m2", 15)]

    assert pairs(claims, machines) == {"a": "m2", "c": "m1"}


def test_bound_deleting_marked_and_labelled_machines_are_not_free() -> None:
    machines = [
        machine("theirs", 11, annotations={ANNOTATION_NODECLAIM: "other"}),
        machine("going", 11, deletionTimestamp=at(12)),
        machine("marked", 11, annotations={ANNOTATION_DELETE_MACHINE: at(12)}),
        machine("member", 11, labels={LABEL_MEMBER: ""}),
        machine("free", 13),
    ]

    assert pairs([claim("a", 10), claim("b", 10)], machines) == {"a": "free"}


def test_a_binding_is_checked_by_name_and_uid() -> None:
    bound = machine_facts(
        machine(
            "m1",
            11,
            annotations={ANNOTATION_NODECLAIM: "a", ANNOTATION_NODECLAIM_UID: "uid-1"},
        )
    )

    assert bound_machine(claim_facts(claim("a", 10, uid="uid-1")), [bound]) == bound
    # A later NodeClaim of the same name is another NodeClaim.
    assert bound_machine(claim_facts(claim("a", 10, uid="uid-2")), [bound]) is None


def test_the_bind_write_is_one_patch_with_the_machines_resource_version() -> None:
    m = machine_facts(machine("m1", 11, resourceVersion="42"))
    patch = bind_patch(m, claim_facts(claim("a", 10)))

    assert patch == {
        "metadata": {
            "resourceVersion": "42",
            "labels": {LABEL_MEMBER: ""},
            "annotations": {ANNOTATION_NODECLAIM: "a", ANNOTATION_NODECLAIM_UID: "uid-a"},
        }
    }
