"""Restricted label domains behave like Karpenter's IsRestrictedLabel."""

from __future__ import annotations

import pytest

from karpenter_capi.core.api import wellknown


@pytest.mark.parametrize(
    ("key", "restricted"),
    [
        ("kubernetes.io/hostname", True),
        ("kubernetes.io/arch", True),  # well-known: set by the provider, never by us
        ("node.kubernetes.io/role", False),
        ("node-restriction.kubernetes.io/team", False),
        ("kops.k8s.io/instancegroup", False),
        ("karpenter.sh/anything", True),
        ("sub.karpenter.sh/anything", True),
        ("example.com/team", False),
        ("team", False),
    ],
)
def test_node_labels_karpenter_must_not_inject(key: str, restricted: bool) -> None:
    assert wellknown.is_restricted_node_label(key) is restricted


def test_well_known_and_aliases_are_allowed_in_nodepools() -> None:
    for key in (*wellknown.WELL_KNOWN_LABELS, *wellknown.NORMALIZED_LABELS):
        assert wellknown.restricted_label_reason(key) is None, key
    reason = wellknown.restricted_label_reason("k8s.io/thing")
    assert reason is not None
    assert "'k8s.io/thing' is restricted" in reason


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
