"""Fixtures of the generic_capi tests (see ``tests.plugins.generic_capi.env``)."""

from __future__ import annotations

import pytest

from tests.plugins.generic_capi.env import Env, new_env


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Env:
    """An empty cluster on the default Cluster API shape, with a NodeClass and a NodePool."""
    return new_env(monkeypatch=monkeypatch)
