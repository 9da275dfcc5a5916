"""Fixtures of the NodeClaim lifecycle tests (see ``lifecycle_harness``)."""

from __future__ import annotations

import pytest
from lifecycle_harness import Env, new_env


@pytest.fixture
def env() -> Env:
    """A cluster with a ClusterAPINodeClass ``default`` and a NodePool ``general``."""
    return new_env()
