"""The simulator's toleration rules follow kube's code, not the controller's."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.values.taints import Taint
from karpenter_capi.sim.workloads.tolerations import tolerates, untolerated, with_daemon_tolerations

GPU = Taint("dedicated", "NoSchedule", "gpu")


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"key": "dedicated", "operator": "Exists"}, True),
        ({"key": "dedicated", "value": "gpu"}, True),
        ({"key": "dedicated", "operator": "Equal", "value": "cpu"}, False),
        ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"operator": "Exists"}, True),
        # ToleratesTaint: an empty key matches any key, whatever the operator.
        ({"operator": "Equal", "value": "gpu"}, True),
        # An operator kube does not know tolerates nothing.
        ({"key": "dedicated", "operator": "Gt", "value": "gpu"}, False),
    ],
)
def test_tolerates_as_kube_does(toleration: dict[str, Any], expected: bool) -> None:
    assert tolerates(toleration, GPU) is expected


def test_untolerated_only_looks_at_the_chosen_effects() -> None:
    soft = Taint("spot", "PreferNoSchedule")
    evict = Taint("gone", "NoExecute")
    assert untolerated([], [soft, GPU, evict]) == GPU
    assert untolerated([], [soft, GPU, evict], effects=("NoExecute",)) == evict
    assert untolerated([{"operator": "Exists"}], [GPU, evict]) is None


def test_host_network_daemons_also_tolerate_network_unavailable() -> None:
    keys = [t["key"] for t in with_daemon_tolerations({"hostNetwork": True})]
    assert keys[-1] == "node.kubernetes.io/network-unavailable"
    assert "node.kubernetes.io/network-unavailable" not in [
        t["key"] for t in with_daemon_tolerations({})
    ]
