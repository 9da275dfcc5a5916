"""The fault-free reference run the fault runs are compared with (one per session)."""

from __future__ import annotations

import pytest

from .harness import UNTIL, FaultRun, burst_scenario


@pytest.fixture(scope="session")
def reference() -> FaultRun:
    reference = FaultRun()
    reference.run(burst_scenario(), until=UNTIL)
    return reference
