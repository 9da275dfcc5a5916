"""Test doubles shared by several test packages (a fake cloud provider, a stubbed AWS).

Every folder under ``tests/`` is a package and the repository root is on ``sys.path`` (the
``pythonpath`` setting of pytest in pyproject.toml), so these are imported by their full name:
``from tests.support.provider import FakeProvider``.
"""
