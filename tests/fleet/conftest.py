"""Fixtures of the fleet tests (see ``tests.fleet.world``)."""

from __future__ import annotations

import pytest

from tests.fleet.world import FleetWorld


@pytest.fixture
def world() -> FleetWorld:
    """A management API server and no workload cluster yet, on one virtual clock."""
    return FleetWorld()
