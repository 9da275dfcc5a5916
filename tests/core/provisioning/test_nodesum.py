"""A node's sum filled at once equals the same pods added one by one (``NodeSum.fill``)."""

from __future__ import annotations

import random

from karpenter_capi.core.provisioning.nodesum import NodeSum
from karpenter_capi.core.values.resources import ResourceList


def _state(node: NodeSum) -> tuple[object, ...]:
    return (list(node.milli.items()), dict(node.names), dict(node.requests))


def test_a_sum_filled_at_once_is_the_sum_made_pod_by_pod() -> None:
    rng = random.Random(7)
    kinds = [
        ResourceList({"cpu": "100m", "memory": "128Mi", "pods": "1"}),
        ResourceList({"cpu": "250m", "pods": "1"}),
        ResourceList({"memory": "1Gi", "nvidia.com/gpu": "1", "pods": "1"}),
        ResourceList({"cpu": "0", "pods": "1"}),
    ]
    for _ in range(50):
        # Replicas share their parsed requests; an equal list parsed apart counts alike.
        requests = [
            rng.choice(kinds) if rng.random() < 0.8 else ResourceList(rng.choice(kinds).to_dict())
            for _ in range(rng.randrange(0, 12))
        ]
        uids = [f"uid-{index}" for index in range(len(requests))]
        one_by_one, at_once = NodeSum(), NodeSum()
        for uid, resources in zip(uids, requests, strict=True):
            one_by_one.change(uid, resources, +1)
        at_once.fill(uids, requests)
        assert _state(at_once) == _state(one_by_one)
        # And it changes as one made pod by pod does.
        for node in (one_by_one, at_once):
            for uid in uids[::2]:
                node.change(uid, node.requests[uid], -1)
        assert _state(at_once) == _state(one_by_one)
