"""A launch write whose answer was lost may have happened (issue 25).

A scale write that times out, or whose connection drops, may have raised the replicas all
the same; the call fails and returns nothing for the core to record, so the API does not say
which resource the NodeClaim waits on. Its next call must go back to that resource, which
counts the NodeClaim against the replicas it finds, and not choose afresh: if the ranking
changed meanwhile, the NodeClaim went elsewhere and the first replica stood (an extra Node).
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.errors import RetryableCreateError
from karpenter_capi.core.kube import MACHINE_DEPLOYMENTS, Resource, Timeout
from tests.plugins.generic_capi.env import PRICE, CountingClient, Env


class LosingScaleAnswers(CountingClient):
    """Makes the next ``lose`` scale writes, then raises ``Timeout`` instead of answering."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.lose = 0

    def patch(self, resource: Resource, name: str, patch: Any, *a: Any, **kw: Any) -> Any:
        answer = super().patch(resource, name, patch, *a, **kw)
        if kw.get("subresource") == "scale" and self.lose > 0:
            self.lose -= 1
            raise Timeout(f"PATCH {name}/scale: timed out waiting for the API server")
        return answer


def test_a_scale_write_whose_answer_was_lost_keeps_its_nodeclaim(env: Env) -> None:
    env.deployment("md-a", price=0.1)
    env.deployment("md-b", price=0.2)
    client = LosingScaleAnswers(env.api)
    env.plugin_management = client
    env.restart()
    env.nodeclaim("nc-1")
    client.lose = 1
    with pytest.raises(RetryableCreateError, match="timed out"):
        env.launch("nc-1")
    assert env.replicas("md-a") == 1  # made, though the plugin heard only the timeout
    # md-a is no longer the cheapest (a price update); the NodeClaim's replica is there.
    cheaper = {"metadata": {"annotations": {PRICE: "0.3"}}}
    env.api.patch(env.res(MACHINE_DEPLOYMENTS), "md-a", cheaper, "default")
    env.launch_all(["nc-1"])
    assert (env.replicas("md-a"), env.replicas("md-b")) == (1, 0)
    assert list(env.bindings()) == ["nc-1"]
