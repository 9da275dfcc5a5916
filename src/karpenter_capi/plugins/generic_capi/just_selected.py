"""The inventory a launch call's ``instance_types`` hook has just built, kept for its ``create``.

The core resolves a NodeClaim's instance types (a selection of the management cluster's
scalable resources and an inventory built from them) right before each ``create`` call, and
``create`` then selected again to map the chosen offering to its resources: two lists of every
scalable kind per launch call, about a thousand requests of a 1,000-pod scale-up over HTTP
(issue 25). The second is the first made a few milliseconds later, so the launch takes what the
hook built on the same thread for the same NodeClass (name and resourceVersion), and forgets it
when the ``create`` call returns, so that no later call can take an old one.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from karpenter_capi.plugins.generic_capi.inventory import Inventory


class JustSelected:
    """The inventory this thread's last ``instance_types`` hook built, until ``forget``."""

    def __init__(self) -> None:
        self._local = threading.local()

    def keep(self, nodeclass: Mapping[str, Any], inventory: Inventory) -> None:
        self._local.kept = (_version(nodeclass), inventory)

    def take(self, nodeclass: Mapping[str, Any]) -> Inventory | None:
        kept: tuple[tuple[str, str], Inventory] | None = getattr(self._local, "kept", None)
        return kept[1] if kept is not None and kept[0] == _version(nodeclass) else None

    def forget(self) -> None:
        self._local.kept = None


def _version(nodeclass: Mapping[str, Any]) -> tuple[str, str]:
    meta = nodeclass.get("metadata") or {}
    return str(meta.get("name") or ""), str(meta.get("resourceVersion") or "")
