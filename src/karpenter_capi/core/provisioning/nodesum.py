"""One node's bound pods summed, kept across rounds and changed by what changed.

``state.ParsedCluster.of`` keeps one per node: summing every bound pod of every node each
round was most of a round's work in a large cluster where little changes, so a node's total
changes only by the pods that came, went or changed (a new ``resourceVersion``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from karpenter_capi.core.values.resources import ResourceList, empty


class NodeSum:
    """One node's bound pods: each one's version and requests, and their running total."""

    __slots__ = ("milli", "names", "requests", "total", "versions")

    def __init__(self) -> None:
        self.versions: dict[str, str] = {}
        self.requests: dict[str, ResourceList] = {}
        self.milli: dict[str, int] = {}
        self.names: dict[str, int] = {}  # how many pods name each resource
        self.total = empty()

    def change(self, uid: str, requests: ResourceList, sign: int) -> None:
        for name, value in requests.as_milli_dict().items():
            self.milli[name] = self.milli.get(name, 0) + sign * value
            self.names[name] = self.names.get(name, 0) + sign
            if not self.names[name]:
                # Named by no pod left: absent, as a fresh sum would have it.
                del self.names[name], self.milli[name]
        if sign > 0:
            self.requests[uid] = requests
        else:
            del self.requests[uid]

    def fill(self, uids: Sequence[str], requests: Sequence[ResourceList]) -> None:
        """``change(uid, requests, +1)`` for each of a node's pods (distinct uids), on a sum
        that counts none yet: equal requests (a Deployment's replicas, parsed to the very same
        list) added once, times their number, in the order of their first pod."""
        milli, names = self.milli, self.names
        for resources, count in Counter(requests).items():
            for name, value in resources.as_milli_dict().items():
                milli[name] = milli.get(name, 0) + value * count
                names[name] = names.get(name, 0) + count
        self.requests.update(zip(uids, requests, strict=True))
