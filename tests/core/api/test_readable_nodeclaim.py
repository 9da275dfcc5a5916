"""``readable_nodeclaim``: what termination can still hand a plugin of a NodeClaim the model
refuses, and what it says is wrong with it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodeclaim import readable_nodeclaim

REF = {"group": wellknown.NODECLASS_GROUP, "kind": wellknown.NODECLASS_KIND, "name": "default"}


def _raw(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": "hand",
            "labels": {wellknown.LABEL_NODEPOOL: "general"},
            "annotations": {"example.com/machine": "m-1"},
            "finalizers": [wellknown.FINALIZER_TERMINATION],
        },
        "spec": {"nodeClassRef": REF, "requirements": [], **spec},
        "status": {"providerID": "docker:///m-1"},
    }


def test_a_valid_nodeclaim_is_read_whole_with_no_problem() -> None:
    model, problems = readable_nodeclaim(_raw(expireAfter="720h"))
    assert problems == []
    assert str(model.spec.expire_after) == "720h"


def test_every_failing_field_is_named_and_dropped_and_the_rest_is_kept() -> None:
    requirement = {"key": "example.com/k", "operator": "In", "values": ["v"]}
    raw = _raw(
        expireAfter="99999999999h",
        terminationGracePeriod="99999999999h",
        requirements=[requirement] * 101,
        nodeClassRef={**REF, "kind": ""},
    )

    model, problems = readable_nodeclaim(raw)

    named = " ".join(problems)
    for field in ("expireAfter", "terminationGracePeriod", "requirements", "nodeClassRef"):
        assert f"spec.{field}" in named, named
    assert "2562047h47m16s" in named
    assert model.metadata.name == "hand"
    assert model.metadata.labels == {wellknown.LABEL_NODEPOOL: "general"}
    assert model.metadata.annotations == {"example.com/machine": "m-1"}
    assert model.status.provider_id == "docker:///m-1"
    assert model.spec.termination_grace_period is None
    assert model.spec.requirements == []
    # The raw object is left as it was: it is what the controllers keep reading.
    assert raw["spec"]["expireAfter"] == "99999999999h"


def test_a_nodeclaim_of_another_kind_cannot_be_read() -> None:
    with pytest.raises(ValidationError):
        readable_nodeclaim({**_raw(), "kind": "NodePool"})
