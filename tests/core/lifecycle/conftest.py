"""Fixtures of the NodeClaim lifecycle tests (see ``tests.core.lifecycle.harness``)."""

from __future__ import annotations

import pytest

from tests.core.lifecycle.harness import Env, new_env


@pytest.fixture
def env() -> Env:
    """A cluster with a ClusterAPINodeClass ``default`` and a NodePool ``general``."""
    return new_env()
