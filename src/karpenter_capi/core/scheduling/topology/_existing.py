"""The pods already bound, indexed once for every topology group to count from.

A solve indexes them by namespace, label set and node, so counting a new group touches each
distinct shape once. A disruption pass runs many solves over the same cluster, each without a
few candidate nodes: indexing 70,000 pods for each one was most of a simulation at 10,000
nodes. So the index is a value of its own, built once and shared; a :class:`Topology` leaves
out the nodes its solve removes and the pods it places itself, without copying it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from karpenter_capi.core.scheduling.podspec import PodSpec
from karpenter_capi.core.scheduling.topology._domains import NodeInfo

# namespace -> repr(labels) -> (labels, node index -> pods): replicas on one node with one label
# set collapse.
Buckets = dict[str, dict[str, tuple[Mapping[str, str], dict[int, int]]]]
NO_NODES: Final[frozenset[int]] = frozenset()


def pod_identity(pod: PodSpec) -> object:
    return pod.uid or (pod.namespace or "default", pod.name)


_FINISHED: Final = ("Succeeded", "Failed")


def ignored(pod: PodSpec) -> bool:
    # Finished and terminating pods no longer occupy their domain (Karpenter's
    # IgnoredForTopology).
    return not pod.active or pod.deleting


_INDEX_BITS: Final = 32
_INDEX_MASK: Final = (1 << _INDEX_BITS) - 1
"""A pod's place in ``ExistingPods.where``: its label set's number, then its node's index."""


class ExistingPods:
    """Bound pods by namespace, label set and node (``buckets``), the nodes that hold at least
    one (``nodes``, by first appearance), and the pods with required anti-affinity."""

    __slots__ = ("again", "anti_affinity", "buckets", "nodes", "position", "shapes", "where")

    def __init__(self, existing_pods: Iterable[tuple[PodSpec, NodeInfo]]) -> None:
        self.nodes: list[NodeInfo] = []
        self.position: dict[str, int] = {}  # node name -> index in ``nodes``
        self.buckets: Buckets = {}
        self.anti_affinity: list[tuple[PodSpec, int]] = []
        # identity -> where the pod is counted, one int (its label set's number in
        # ``shapes``, then its node's index): what leaving a pod out subtracts. An int per
        # pod, no tuple: an int is no object for the collector to walk, nor is a dict that
        # holds only strings and ints (70,000 pods). A pod listed twice (``again``) is rare.
        self.where: dict[object, int] = {}
        self.again: dict[object, list[int]] = {}
        self.shapes: list[tuple[str, str]] = []
        """Each namespace and label set counted, by its number in ``where``."""
        position, where, buckets, shapes = self.position, self.where, self.buckets, self.shapes
        # Each label set read once: the pods of one class share their labels' dict (and their
        # namespace), so its text and its bucket are found by the dict's identity (each kept
        # alive here, so no other takes its id).
        seen: dict[int, tuple[str, str, dict[int, int], int, Mapping[str, str]]] = {}
        numbers: dict[tuple[str, str], int] = {}
        for pod, node in existing_pods:
            # ``ignored`` and ``pod_identity``, written out: once per bound pod.
            if pod.deleting or pod.phase in _FINISHED:
                continue
            index = position.get(node.name)
            if index is None:
                index = position[node.name] = len(self.nodes)
                self.nodes.append(node)
            namespace = pod.namespace or "default"
            labels = pod.labels
            found = seen.get(id(labels))
            if found is None or found[0] != namespace:
                shape = repr(labels)
                entry = buckets.setdefault(namespace, {}).setdefault(shape, (labels, {}))
                number = numbers.setdefault((namespace, shape), len(numbers))
                if number == len(shapes):
                    shapes.append((namespace, shape))
                found = seen[id(labels)] = (namespace, shape, entry[1], number, labels)
            counts = found[2]
            counts[index] = counts.get(index, 0) + 1
            identity = pod.uid or (namespace, pod.name)
            place = found[3] << _INDEX_BITS | index
            if identity in where:
                self.again.setdefault(identity, []).append(place)
            else:
                where[identity] = place
            if pod.anti_affinity:
                self.anti_affinity.append((pod, index))

    @staticmethod
    def counted(pod: PodSpec) -> tuple[str, str, object] | None:
        """What the index counts of ``pod`` (namespace, label set, identity); ``None``: not
        counted (finished, terminating)."""
        if ignored(pod):
            return None
        return (pod.namespace or "default", repr(pod.labels), pod_identity(pod))

    def with_nodes(
        self, nodes: list[NodeInfo], anti_affinity: list[tuple[PodSpec, int]]
    ) -> ExistingPods:
        """The same counts over ``nodes`` (one for one with this index's: the same names, new
        labels or taints) and ``anti_affinity`` (the same pods in new versions): what building
        the index again would give when no pod came, went or changed what is counted of it.
        The counts are shared, as every solve shares them: neither index changes them."""
        other = ExistingPods(())
        other.nodes = nodes
        other.position = self.position
        other.buckets = self.buckets
        other.where = self.where
        other.again = self.again
        other.shapes = self.shapes
        other.anti_affinity = anti_affinity
        return other

    def _places(self, identity: object) -> list[tuple[str, str, int]]:
        """Where the index counts the pod of ``identity`` (none, once, or more)."""
        first = self.where.get(identity)
        if first is None:
            return []
        places = []
        for place in (first, *self.again.get(identity, ())):
            namespace, shape = self.shapes[place >> _INDEX_BITS]
            places.append((namespace, shape, place & _INDEX_MASK))
        return places

    def node_indexes(self, names: Iterable[str]) -> frozenset[int]:
        """The indexes of the nodes named (those holding no pod have none)."""
        return frozenset(i for i in map(self.position.get, names) if i is not None)

    def left_out(
        self, identities: Iterable[object], excluded: frozenset[int]
    ) -> tuple[dict[tuple[str, str], dict[int, int]], frozenset[int]]:
        """What leaving out the pods of ``identities`` takes from the counts (namespace and
        label set -> node index -> pods), and the nodes it leaves without a pod; pods on
        ``excluded`` nodes are left out already."""
        minus: dict[tuple[str, str], dict[int, int]] = {}
        touched: dict[int, int] = {}
        for identity in identities:
            for namespace, shape, index in self._places(identity):
                if index in excluded:
                    continue
                per_node = minus.setdefault((namespace, shape), {})
                per_node[index] = per_node.get(index, 0) + 1
                touched[index] = touched.get(index, 0) + 1
        if not touched:
            return minus, NO_NODES
        held: dict[int, int] = {}
        for labels_buckets in self.buckets.values():
            for _, per_node in labels_buckets.values():
                for index in touched.keys() & per_node.keys():
                    held[index] = held.get(index, 0) + per_node[index]
        emptied = frozenset(i for i, n in touched.items() if held.get(i, 0) <= n)
        return minus, emptied
