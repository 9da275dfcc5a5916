"""What a launch call costs the management cluster in reads (issue 25).

The core resolves a NodeClaim's instance types right before each ``create`` call; ``create``
used to select the NodeClass's scalable resources again, so every launch call listed each
scalable kind twice: about a thousand of the requests of a 1,000-pod scale-up over HTTP.
"""

from __future__ import annotations

from collections import Counter

from karpenter_capi.core.api.nodeclaim import NodeClaim
from karpenter_capi.core.kube.resources import NODECLAIMS
from karpenter_capi.core.lifecycle.launch import claim_requirements, launchable_instance_types
from tests.plugins.generic_capi.env import Env


def _selections(env: Env) -> Counter[str]:
    return Counter(plural for plural, _ in env.plugin_management.lists)


def test_a_launch_call_selects_the_scalable_resources_once(env: Env) -> None:
    env.deployment("md-a")
    env.nodeclaim("nc-0")
    env.launch("nc-0")  # discovery and first reads out of the way
    env.nodeclaim("nc-1")
    env.plugin_management.lists.clear()
    env.launch("nc-1")
    listed = _selections(env)
    assert listed["machinedeployments"] == 1
    assert env.replicas("md-a") == 2


def test_what_one_call_selected_is_not_taken_by_a_later_one(env: Env) -> None:
    env.deployment("md-a")
    env.nodeclaim("nc-0")
    env.nodeclaim("nc-1")
    nodeclass, nodepool = env._models()
    types = env.plugins.instance_types(nodeclass, nodepool)
    env.launch("nc-0")
    # A create that follows no inventory of its own (the last one ended with nc-0's call)
    # selects afresh.
    env.plugin_management.lists.clear()
    raw = env.api.get(NODECLAIMS, "nc-1")
    allowed = launchable_instance_types(types, claim_requirements(raw))
    env.plugins.create(NodeClaim.model_validate(raw), allowed, nodeclass)
    assert _selections(env)["machinedeployments"] == 1
