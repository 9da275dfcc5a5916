"""The JSONPath subset behind CRD printer columns, and kubectl-style ages."""

from __future__ import annotations

import pytest

from karpenter_capi.sim.apiserver.http_tables import JsonPath, human_duration

NODECLAIM = {
    "metadata": {
        "name": "default-abc",
        "labels": {"node.kubernetes.io/instance-type": "m5.large", "karpenter.sh/nodepool": "a"},
    },
    "status": {
        "conditions": [
            {"type": "Launched", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "NotRegistered"},
        ],
        "capacity": {"cpu": "2"},
        "replicas": 3,
    },
}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (".metadata.name", ["default-abc"]),
        ("{.metadata.name}", ["default-abc"]),
        (".metadata.labels.node\\.kubernetes\\.io/instance-type", ["m5.large"]),
        (".metadata.labels['karpenter.sh/nodepool']", ["a"]),
        ('.status.conditions[?(@.type=="Ready")].status', ["False"]),
        (".status.conditions[?(@.type!='Ready')].type", ["Launched"]),
        (".status.conditions[?(@.reason)].reason", ["NotRegistered"]),
        (".status.conditions[0].type", ["Launched"]),
        (".status.conditions[-1].type", ["Ready"]),
        (".status.conditions[*].type", ["Launched", "Ready"]),
        (".status.replicas", [3]),
        (".status.missing.deeper", []),
        (".status.conditions[5].type", []),
    ],
)
def test_json_path_finds_what_printer_columns_ask_for(
    expression: str, expected: list[object]
) -> None:
    assert JsonPath(expression).find(NODECLAIM) == expected


def test_unsupported_json_path_is_rejected_at_parse_time() -> None:
    with pytest.raises(ValueError, match="unbalanced"):
        JsonPath(".status.conditions[?(@.type==")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5, "5s"),
        (119, "119s"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (20 * 3600, "20h"),
        (3 * 86400 + 4 * 3600, "3d4h"),
        (400 * 86400, "400d"),
        (3 * 365 * 86400 + 12 * 86400, "3y12d"),
        (-1, "<invalid>"),
    ],
)
def test_ages_read_like_kubectl(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text
