"""The NodeClaims this process created that its NodeClaim cache does not show yet.

Why: a provisioning round reads the informer caches, and a watch delivers this process's own
creates some time after the API answered them: on a loaded machine (a fleet of 100 clusters on
two cores) seconds later. A round run in that gap saw the pods the last round launched for still
pending and no NodeClaim for them, and launched for them again (issue 28's 100-cluster benchmark
made 110 NodeClaims too many that way). Upstream Karpenter refuses to schedule until its cluster
state is synced with the API (``cluster.Synced``); here the round counts each created NodeClaim
as the API answered it, without waiting, until the cache shows it or has followed the API past
it (it was deleted meanwhile: the cache is right not to show it). A watch delivers a resource's
events in resourceVersion order, so a cache that has reached a create's resourceVersion shows
it or what came after it; an answer whose resourceVersion is not an integer is not kept (the
cache's view holds, as before).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from karpenter_capi.core.kube.writelog import resource_version_number


class UnseenClaims:
    """Created NodeClaims by name, each with the resourceVersion its create answered with."""

    def __init__(self) -> None:
        self._created: dict[str, tuple[int, Mapping[str, Any]]] = {}

    def created(self, claim: Mapping[str, Any]) -> None:
        """Remember the API's answer to a create."""
        metadata = claim.get("metadata") or {}
        version = resource_version_number(metadata.get("resourceVersion"))
        if version is not None and metadata.get("name"):
            self._created[str(metadata["name"])] = (version, claim)

    def merged(self, cached: Sequence[Mapping[str, Any]], position: str) -> list[Mapping[str, Any]]:
        """``cached`` and the created NodeClaims it does not show yet; ``position`` is the
        resourceVersion the cache has followed the API to."""
        if not self._created:
            return list(cached)
        shown = {str(c["metadata"]["name"]) for c in cached}
        reached = resource_version_number(position)
        for name, (version, _) in list(self._created.items()):
            if name in shown or (reached is not None and reached >= version):
                del self._created[name]
        return [*cached, *(claim for _, claim in self._created.values())]

    def __len__(self) -> int:
        return len(self._created)


__all__ = ["UnseenClaims"]
