"""Upstream Karpenter's CRD validation tests, run on our CRDs and models.

Every case of ``upstream_cel_cases.py`` is created in the in-memory API server with the CRDs we
generate (OpenAPI schema, defaults and CEL rules, ``oldSelf`` transitions included). Each test
checks three things a user moving from Karpenter relies on: the API server admits or refuses the
object as upstream's does; our pydantic model agrees with the API server (an admitted object
always parses, a refused one never does); and where upstream calls ``RuntimeValidate``, our
runtime validation (the NodePool's ``ValidationSucceeded``) gives the same verdict.
"""

from __future__ import annotations

import copy
import itertools
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.core.api.nodeclaim import NodeClaim
from karpenter_capi.core.api.nodepool import DisruptionReason, NodePool
from karpenter_capi.core.api.runtime_validation import runtime_problems
from karpenter_capi.core.kube.errors import Invalid
from karpenter_capi.core.kube.resources import NODECLAIMS, NODEPOOLS, Resource
from karpenter_capi.sim.apiserver import InMemoryAPIServer

from .upstream_cel_cases import (
    NODECLAIM_CASES,
    NODECLAIM_UPDATES,
    NODEPOOL_CASES,
    NODEPOOL_UPDATES,
    Case,
    JsonObject,
    UpdateCase,
    base_nodeclaim,
    base_nodepool,
)

_names = (f"case-{i}" for i in itertools.count())


@pytest.fixture(scope="module")
def server() -> InMemoryAPIServer:
    api = InMemoryAPIServer()
    api.apply_manifests(generate_crds())
    return api


def _admitted(server: InMemoryAPIServer, resource: Resource, obj: JsonObject) -> JsonObject | None:
    try:
        return server.create(resource, obj)
    except Invalid:
        return None


def _parses(model: type[BaseModel], obj: JsonObject) -> BaseModel | None:
    try:
        return model.model_validate(obj)
    except ValidationError:
        return None


def _check_create(
    server: InMemoryAPIServer,
    resource: Resource,
    model: type[BaseModel],
    obj: JsonObject,
    case: Case,
) -> None:
    case.mutate(obj)
    stored = _admitted(server, resource, copy.deepcopy(obj))
    assert (stored is not None) is case.admitted, (
        f"{case.name}: upstream {'admits' if case.admitted else 'refuses'} {obj['spec']}"
    )
    parsed = _parses(model, stored if stored is not None else obj)
    assert (parsed is not None) is case.admitted, f"{case.name}: the model disagrees"
    if case.runtime_valid is not None and isinstance(parsed, NodePool):
        problems = runtime_problems(parsed)
        assert (not problems) is case.runtime_valid, f"{case.name}: runtime validation {problems}"


@pytest.mark.parametrize("case", NODEPOOL_CASES, ids=lambda c: c.name)
def test_nodepool_create_matches_upstream(server: InMemoryAPIServer, case: Case) -> None:
    _check_create(server, NODEPOOLS, NodePool, base_nodepool(next(_names)), case)


@pytest.mark.parametrize("case", NODECLAIM_CASES, ids=lambda c: c.name)
def test_nodeclaim_create_matches_upstream(server: InMemoryAPIServer, case: Case) -> None:
    _check_create(server, NODECLAIMS, NodeClaim, base_nodeclaim(next(_names)), case)


def _check_update(
    server: InMemoryAPIServer, resource: Resource, obj: JsonObject, case: UpdateCase
) -> None:
    case.create(obj)
    stored = server.create(resource, obj)
    changed = copy.deepcopy(stored)
    case.update(changed)
    try:
        server.update(resource, changed)
    except Invalid:
        admitted = False
    else:
        admitted = True
    assert admitted is case.admitted, case.name


@pytest.mark.parametrize("case", NODEPOOL_UPDATES, ids=lambda c: c.name)
def test_nodepool_update_matches_upstream(server: InMemoryAPIServer, case: UpdateCase) -> None:
    _check_update(server, NODEPOOLS, base_nodepool(next(_names)), case)


@pytest.mark.parametrize("case", NODECLAIM_UPDATES, ids=lambda c: c.name)
def test_nodeclaim_update_matches_upstream(server: InMemoryAPIServer, case: UpdateCase) -> None:
    _check_update(server, NODECLAIMS, base_nodeclaim(next(_names)), case)


def test_nodepool_without_disruption_is_defaulted_like_upstream(server: InMemoryAPIServer) -> None:
    stored = server.create(NODEPOOLS, base_nodepool(next(_names)))
    assert stored["spec"]["disruption"] == {
        "consolidateAfter": "0s",
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "budgets": [{"nodes": "10%"}],
    }
    assert stored["spec"]["template"]["spec"]["expireAfter"] == "720h"
    parsed = NodePool.model_validate(stored)
    assert (
        parsed.model_dump(exclude_none=True)["spec"]["disruption"] == stored["spec"]["disruption"]
    )


@pytest.mark.parametrize("disruption", [{}, {"consolidationPolicy": "WhenEmpty"}])
def test_consolidate_after_is_defaulted_when_omitted(
    server: InMemoryAPIServer, disruption: dict[str, Any]
) -> None:
    obj = base_nodepool(next(_names))
    obj["spec"]["disruption"] = disruption
    stored = server.create(NODEPOOLS, obj)
    assert stored["spec"]["disruption"]["consolidateAfter"] == "0s"


def test_budget_with_a_cron_the_pattern_admits_but_cron_refuses_blocks_disruption(
    server: InMemoryAPIServer,
) -> None:
    # Upstream's schedule pattern only checks the shape; such a budget fails closed at runtime.
    obj = base_nodepool(next(_names))
    obj["spec"]["disruption"] = {
        "budgets": [{"nodes": "100%", "schedule": "a b c d e", "duration": "10m"}, {"nodes": "5"}]
    }
    pool = NodePool.model_validate(server.create(NODEPOOLS, obj))
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert pool.spec.disruption.budgets[0].schedule_problem is not None
    assert pool.spec.disruption.allowed_disruptions(now, 10, DisruptionReason.EMPTY) == 0
