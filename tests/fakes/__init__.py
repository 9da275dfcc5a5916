"""Test doubles shared by several test directories.

``tests/`` has no ``__init__.py`` and holds the root ``conftest.py``, so pytest puts ``tests/``
on ``sys.path``: import these as ``from fakes.provider import FakeProvider``.
"""
