"""Fixtures of the capz tests (see ``tests.plugins.capz.env``)."""

from __future__ import annotations

import pytest

from tests.plugins.capz.env import CapzWorld


@pytest.fixture
def world() -> CapzWorld:
    """The Cluster ``prod`` on the AzureCluster ``prod`` (eastus) and a fresh simulated Azure."""
    return CapzWorld.new()
