"""The ``capz`` plugin: real shapes, zones and prices for Cluster API's Azure templates.

``generic_capi`` owns the inventory of CAPI node groups; for a group whose infrastructure
template is an ``AzureMachineTemplate`` it asks this plugin (``describe_machine_template``) what
the template makes. The answer comes from Azure itself: the VM size's shape and zones from the
Resource SKUs API (``skus``), its hourly prices from the public Retail Prices API (``retail``),
the location and subscription from the Cluster's ``AzureCluster`` (``cluster``). ``provider``
ties them together with the shared caches of ``plugins._cloud``; ``plugin`` is the hook module.
"""
