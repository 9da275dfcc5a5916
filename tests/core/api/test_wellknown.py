"""Restricted label domains behave like Karpenter's IsRestrictedLabel."""

from __future__ import annotations

import pytest

from karpenter_capi.core.api import wellknown


@pytest.mark.parametrize(
    ("key", "restricted"),
    [
        ("kubernetes.io/hostname", True),
        ("kubernetes.io/arch", False),  # well-known
        ("karpenter.sh/capacity-type", False),  # well-known
        ("karpenter.sh/anything", True),
        ("sub.karpenter.sh/anything", True),
        ("notkarpenter.sh/anything", False),  # a different domain for Go's suffix test
        ("kubernetes.io/custom", False),  # allowed since upstream v1.9
        ("k8s.io/thing", False),
        ("example.com/team", False),
        ("team", False),
    ],
)
def test_restricted_labels_follow_upstream_is_restricted_label(key: str, restricted: bool) -> None:
    reason = wellknown.restricted_label_reason(key)
    assert (reason is not None) is restricted, reason
    if reason:
        assert reason.startswith(f"using label {key} is not allowed")


def test_aliases_normalise_to_stable_labels() -> None:
    assert wellknown.NORMALIZED_LABELS["failure-domain.beta.kubernetes.io/zone"] == (
        wellknown.LABEL_TOPOLOGY_ZONE
    )
    assert set(wellknown.NORMALIZED_LABELS.values()) <= wellknown.WELL_KNOWN_LABELS
    assert wellknown.label_domain("a.b/c") == "a.b"
    assert wellknown.label_domain("c") == ""


def test_capacity_annotations_share_the_autoscaler_prefix() -> None:
    assert (
        wellknown.ANNOTATION_CAPACITY_MAX_PODS
        == "capacity.cluster-autoscaler.kubernetes.io/maxPods"
    )
    assert wellknown.ANNOTATION_CAPACITY_GPU_COUNT.endswith("/gpu-count")
