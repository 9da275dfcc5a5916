"""A NodeClaim create whose answer was lost is not made a second time (issue 25).

A create that times out or whose connection drops may have made its NodeClaim all the same,
under a name the server chose and this process never learnt. The round is retried; a retry
before the NodeClaim watch shows it planned the pods afresh and created another NodeClaim for
them: an extra Node. After such a create the next round lists the NodeClaims first
(``provisioning.unseen``).
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube import ServiceUnavailable, Timeout
from karpenter_capi.core.kube.errors import ApiError
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    NODECLAIMS,
    NODEPOOLS,
    Resource,
)
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.core.provisioning.test_own_nodeclaims import _claims, _launched_for, _watch_held
from tests.support import operator_world as world
from tests.support.provider import FakeProvider


class LosingAnswers:
    """The in-memory API server, but the next ``lose`` NodeClaim creates are made and their
    answers lost (``error`` raised instead), as a timeout or a dropped connection does."""

    def __init__(self, api: InMemoryAPIServer, error: ApiError) -> None:
        self.api = api
        self.error = error
        self.lose = 0

    def create(self, resource: Resource, obj: Any, namespace: str | None = None) -> Any:
        made = self.api.create(resource, obj, namespace)
        if resource.plural == NODECLAIMS.plural and self.lose > 0:
            self.lose -= 1
            raise self.error
        return made

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)


def _operator(error: ApiError) -> tuple[InMemoryAPIServer, LosingAnswers, SteppedDriver, Operator]:
    clock = FakeClock()
    api = new_cluster(clock=clock)
    provider = FakeProvider(clock, bind_after_polls=10**6)  # the pods stay pending
    api.create(CLUSTER_API_NODE_CLASSES, world.nodeclass())
    api.create(NODEPOOLS, world.nodepool())
    client = LosingAnswers(api, error)
    options = OperatorOptions(leader_elect=False, metrics_port=None)
    operator = Operator(client, api, provider.plugins(api), clock, options)  # type: ignore[arg-type]
    driver = operator.stepped()
    driver.run_until_quiet()
    return api, client, driver, operator


@pytest.mark.parametrize(
    "error",
    [Timeout("POST nodeclaims: timed out"), ServiceUnavailable("POST nodeclaims: reset")],
    ids=["timeout", "connection"],
)
def test_a_create_whose_answer_was_lost_is_not_made_again(error: ApiError) -> None:
    api, client, driver, operator = _operator(error)
    world.pending_pod(api, "web-0")
    client.lose = 1
    with _watch_held(operator):
        driver.advance(3)  # made, though the controller heard only the error; the round is
        claims = _claims(api)  # retried at once, while the watch still lags
        assert len(claims) == 1, f"the pod's NodeClaim was made again: {claims}"
        [made] = claims
        driver.advance(15)
        assert _claims(api) == [made]
    driver.advance(15)
    assert _claims(api) == [made]
    assert _launched_for(api) == {"default/web-0": [made]}
