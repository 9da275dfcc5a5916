"""Fixtures of the two-cluster tests (see ``tests.reliability.two_clusters.env``)."""

from __future__ import annotations

import pytest

from tests.reliability.two_clusters.env import TwoClusters


@pytest.fixture
def env() -> TwoClusters:
    """The management and workload API servers on one virtual clock, no controller yet."""
    return TwoClusters()
