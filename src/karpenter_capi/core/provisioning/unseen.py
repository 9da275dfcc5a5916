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

A create whose answer was lost (a timeout, a connection reset, a 5xx: the outcome is unknown)
may have made a NodeClaim all the same, whose name this process never learnt (NodeClaims are
named by the server, ``generateName``). The round is retried, and a retry before the watch
shows that NodeClaim planned its pods afresh and created a second one for them (issue 25: a
lost answer under load was an extra Node). So after such a create the next round first lists
the NodeClaims from the API, once, and counts those the cache does not show yet as if it had
created them (``lost``, ``needs_list``, ``listed``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from karpenter_capi.core.kube.errors import ApiError
from karpenter_capi.core.kube.writelog import resource_version_number


def outcome_unknown(error: BaseException) -> bool:
    """Whether a write that failed with ``error`` may have happened all the same: the answer
    was lost (a timeout, a connection reset or refused, which the clients map to 503 and 504)
    or the server failed part way (another 5xx). A 4xx, 429 included, says it did not."""
    return isinstance(error, ApiError) and error.code >= 500


class UnseenClaims:
    """Created NodeClaims by name, each with the resourceVersion its create answered with."""

    def __init__(self) -> None:
        self._created: dict[str, tuple[int, Mapping[str, Any]]] = {}
        self.needs_list = False
        """A create's outcome is unknown: the next round lists the NodeClaims first."""

    def created(self, claim: Mapping[str, Any]) -> None:
        """Remember the API's answer to a create."""
        metadata = claim.get("metadata") or {}
        version = resource_version_number(metadata.get("resourceVersion"))
        if version is not None and metadata.get("name"):
            self._created[str(metadata["name"])] = (version, claim)

    def lost(self) -> None:
        """A create failed in a way that may have made its NodeClaim (``outcome_unknown``)."""
        self.needs_list = True

    def listed(
        self, listed: Sequence[Mapping[str, Any]], cached: Sequence[Mapping[str, Any]]
    ) -> None:
        """The NodeClaims a list of the API showed after a lost create: those ``cached`` does
        not show count as created by this process until it does."""
        shown = {str(c["metadata"]["name"]) for c in cached}
        for claim in listed:
            if str(claim["metadata"]["name"]) not in shown:
                self.created(claim)
        self.needs_list = False

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


__all__ = ["UnseenClaims", "outcome_unknown"]
