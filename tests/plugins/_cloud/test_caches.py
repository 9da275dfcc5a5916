"""CatalogCache and the unavailable-offerings memory, on a fake clock."""

from __future__ import annotations

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.plugins._cloud.catalog import CatalogCache, CatalogError
from karpenter_capi.plugins._cloud.unavailable import ExpiringMarks, UnavailableOfferings
from karpenter_capi.plugins.generic_capi.inventory import UnavailableOfferings as ResourceMarks


class Loader:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.failing = False

    def __call__(self, region: str) -> dict[str, int]:
        self.calls.append(region)
        if self.failing:
            raise TimeoutError("ec2.us-east-1.amazonaws.com timed out")
        return {"m5.large": len(self.calls)}


def test_a_catalog_is_loaded_once_per_ttl_and_per_key() -> None:
    clock = FakeClock()
    loader = Loader()
    cache = CatalogCache("EC2 catalog", loader, clock, ttl_seconds=600)
    assert cache.get("us-east-1") == {"m5.large": 1}
    assert cache.get("us-east-1") == {"m5.large": 1}
    assert cache.get("eu-west-1") == {"m5.large": 2}
    clock.advance(600)
    assert cache.get("us-east-1") == {"m5.large": 3}
    cache.invalidate("us-east-1")
    assert cache.get("us-east-1") == {"m5.large": 4}


def test_a_failed_reload_serves_the_stale_catalog_and_retries_after_a_while() -> None:
    clock = FakeClock()
    loader = Loader()
    cache = CatalogCache("EC2 catalog", loader, clock, ttl_seconds=600, retry_seconds=60)
    assert cache.get("us-east-1") == {"m5.large": 1}
    clock.advance(600)
    loader.failing = True
    assert cache.get("us-east-1") == {"m5.large": 1}
    clock.advance(30)
    assert cache.get("us-east-1") == {"m5.large": 1}
    assert len(loader.calls) == 2  # no new call within the retry interval
    loader.failing = False
    clock.advance(30)
    assert cache.get("us-east-1") == {"m5.large": 3}


def test_a_key_that_never_loaded_raises_but_does_not_hammer_the_cloud() -> None:
    clock = FakeClock()
    loader = Loader()
    loader.failing = True
    cache = CatalogCache("EC2 catalog", loader, clock, retry_seconds=60)
    for _ in range(3):
        with pytest.raises(CatalogError, match="timed out"):
            cache.get("us-east-1")
    assert len(loader.calls) == 1
    clock.advance(60)
    loader.failing = False
    assert cache.get("us-east-1") == {"m5.large": 2}


def test_unavailable_offerings_expire_after_three_minutes() -> None:
    clock = FakeClock()
    offerings = UnavailableOfferings(clock)
    offerings.mark("m5.large", "us-east-1a", "spot", "InsufficientInstanceCapacity")
    assert offerings.is_unavailable("m5.large", "us-east-1a", "spot")
    assert offerings.reason("m5.large", "us-east-1a", "spot") == "InsufficientInstanceCapacity"
    assert not offerings.is_unavailable("m5.large", "us-east-1a", "on-demand")
    assert not offerings.is_unavailable("m5.large", "us-east-1b", "spot")
    clock.advance(179)
    assert offerings.is_unavailable("m5.large", "us-east-1a", "spot")
    clock.advance(1)
    assert not offerings.is_unavailable("m5.large", "us-east-1a", "spot")
    offerings.mark("m5.large", "us-east-1a", "spot", "again")
    offerings.clear("m5.large", "us-east-1a", "spot")
    assert offerings.reason("m5.large", "us-east-1a", "spot") is None


def test_generic_capi_marks_resources_with_the_same_expiry() -> None:
    clock = FakeClock()
    marks = ResourceMarks(clock)
    assert isinstance(marks, ExpiringMarks)
    assert marks.DEFAULT_TTL_SECONDS == 180.0
    marks.mark("MachineDeployment/default/md", "quota")
    assert marks.reason("MachineDeployment/default/md") == "quota"
    clock.advance(180)
    assert not marks.is_unavailable("MachineDeployment/default/md")
