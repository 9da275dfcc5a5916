"""Machinery shared by the native cloud plugins (``capa``, ``capz``, and later their launchers).

Each cloud plugin needs the same three caches with the same semantics, so they live here once:

* ``pricebook``: hourly prices refreshed in the background, the last good prices kept when a
  refresh fails, persisted to a ConfigMap so a restart without cloud access still has prices;
* ``catalog``: a TTL cache of what a cloud sells in a region (shapes, zones);
* ``unavailable``: offerings (instance type, zone, capacity type) a launch found unavailable;
* ``metrics``: the cloud-provider call metrics and the price-age gauge.

Nothing here knows a cloud SDK: the plugins pass in the functions that call their clouds.
"""
