"""Fixtures of the workload emulation tests (see ``tests.sim.workloads.harness``)."""

from __future__ import annotations

import pytest

from tests.sim.workloads.harness import Sim, new_sim


@pytest.fixture
def sim() -> Sim:
    """An empty cluster with the workload emulation at its default settings."""
    return new_sim()
