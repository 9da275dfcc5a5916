"""One run with every bad input and one clean reference run, shared by the whole folder.

Each costs a few tens of seconds of computing (no wall-clock waiting: the clock is virtual), so
the catalogue's entries are checked one test each against the same run.
"""

from __future__ import annotations

import pytest

from .catalogue import catalogue
from .harness import MalformedRun, reference


@pytest.fixture(scope="session")
def malformed() -> MalformedRun:
    return MalformedRun(catalogue()).run()


@pytest.fixture(scope="session")
def clean() -> MalformedRun:
    return reference()
