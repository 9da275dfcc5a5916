"""Fixtures of the capa tests (see ``tests.support.aws``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.aws import StubbedAws, fake_credentials, stubbed_aws


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubbedAws]:
    """EC2 from moto and the Pricing API on botocore Stubbers, with fake credentials.

    Test modules that need another AWS (moto's Fleet, the scenario's emulated AWS) define their
    own ``aws``, which wins over this one.
    """
    fake_credentials(monkeypatch)
    with stubbed_aws() as doubles:
        yield doubles
