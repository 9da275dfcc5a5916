"""Fixtures of the disruption tests (see ``tests.core.disruption.builders``)."""

from __future__ import annotations

import pytest

from tests.core.disruption.builders import Cluster


@pytest.fixture
def cluster() -> Cluster:
    """An empty cluster: the NodePool ``default`` (on-demand, consolidation on) and no nodes."""
    return Cluster()
