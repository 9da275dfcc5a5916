"""Machinery shared by the native cloud plugins (``capa``, ``capz``, and later their launchers).

A library, not a plugin: no entry point names it, and the underscore says it is private to the
plugins of this distribution (a third-party plugin does not import it). It imports no plugin,
so each plugin can use it without depending on another (the import-linter contracts in
pyproject.toml hold both).

Each cloud plugin needs the same three caches with the same semantics, so they live here once:

* ``pricebook``: hourly prices refreshed in the background, the last good prices kept when a
  refresh fails, persisted to a ConfigMap so a restart without cloud access still has prices;
* ``catalog``: a TTL cache of what a cloud sells in a region (shapes, zones);
* ``unavailable``: offerings (instance type, zone, capacity type) a launch found unavailable;
* ``metrics``: the cloud-provider call metrics and the price-age gauge.

Nothing here knows a cloud SDK: the plugins pass in the functions that call their clouds.
"""
