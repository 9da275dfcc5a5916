"""Scenarios as data (``schema``, ``catalog``) and a runner that reports outcomes (``runner``).

See docs/scenarios.md.
"""
