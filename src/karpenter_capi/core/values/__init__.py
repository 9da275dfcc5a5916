"""The value types every layer shares: quantities, resource lists, requirements, taints, selectors.

They lived in ``core/scheduling`` (and selectors in ``core/kube``) though most of their users are
elsewhere: the lifecycle, disruption, the plugins' inventories, the simulator. Kept apart here,
they depend on nothing but the well-known label names, so the solver can stop importing
``core.kube`` and the simulator can share the values without sharing the controller's scheduling
rules (docs/design.md decision 16, "Layers import one way"). The modules are imported by
name; this package re-exports nothing.
"""
