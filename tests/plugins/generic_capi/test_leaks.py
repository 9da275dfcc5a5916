"""No leaked Machine: a replica raised for a NodeClaim that goes away is given back, and a
Machine of an opted-in resource that no NodeClaim ever claimed is adopted or removed.

Each test is a path on which the old code left a Machine running with no NodeClaim claiming it
(issue 24, item 3), found by applying churn and malformed input to a running controller.
"""

from __future__ import annotations

import pytest

from karpenter_capi.core.errors import InstanceNotFoundError
from karpenter_capi.plugins.generic_capi.delete import ScaleDownFailedError
from tests.plugins.generic_capi.env import Env, new_env


def test_a_nodeclaim_deleted_before_the_core_recorded_its_intent_gives_its_replica_back(
    env: Env,
) -> None:
    env.deployment("md-a")
    env.nodeclaim("nc")
    env.launch("nc", record=False)  # the replica is raised; the core's write has not landed
    assert env.replicas("md-a") == 1

    with pytest.raises(InstanceNotFoundError, match="no Machine was bound"):
        env.delete("nc")

    assert env.replicas("md-a") == 0
    env.driver.advance(30)
    assert env.machines() == []


def test_a_cancel_retried_after_a_conflict_storm_still_knows_the_unrecorded_intent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = new_env(monkeypatch=monkeypatch, options={"conflict_retries": "1"})
    env.deployment("md-a")
    env.nodeclaim("nc")
    env.launch("nc", record=False)
    # Somebody else writes the MachineDeployment between our read and our write, once.
    real_patch = env.plugin_management.inner.patch
    calls = {"scale": 0}

    def racing_patch(resource, name, patch, namespace=None, **kw):  # type: ignore[no-untyped-def]
        if kw.get("subresource") == "scale" and calls["scale"] == 0:
            calls["scale"] += 1
            env.api.patch(resource, name, {"metadata": {"labels": {"touched": "1"}}}, namespace)
        return real_patch(resource, name, patch, namespace, **kw)

    monkeypatch.setattr(env.plugin_management.inner, "patch", racing_patch)
    with pytest.raises(ScaleDownFailedError, match="conflicts in a row"):
        env.delete("nc")
    assert env.replicas("md-a") == 1

    with pytest.raises(InstanceNotFoundError):
        env.delete("nc")
    assert env.replicas("md-a") == 0
