"""``--feature-gates`` / ``FEATURE_GATES``, as upstream Karpenter spells them."""

from __future__ import annotations

import pytest

from karpenter_capi.cli.options import parse_feature_gates
from karpenter_capi.core.errors import InvalidInputError


def test_spot_to_spot_is_off_unless_the_gate_says_true() -> None:
    assert parse_feature_gates("") == {}
    assert parse_feature_gates("SpotToSpotConsolidation=true") == {"SpotToSpotConsolidation": True}
    assert parse_feature_gates(" SpotToSpotConsolidation=False ") == {
        "SpotToSpotConsolidation": False
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SpotToSpotConsolidation", "expected Name=true or Name=false"),
        ("SpotToSpotConsolidation=yes", "expected Name=true or Name=false"),
        ("Drift=true", "unknown feature gate 'Drift'"),
    ],
)
def test_a_malformed_or_unknown_gate_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        parse_feature_gates(text)
