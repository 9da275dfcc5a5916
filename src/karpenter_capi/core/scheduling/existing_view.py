"""The existing nodes read once for many solves: a disruption pass's cluster view.

Each consolidation simulation solves with every node of the cluster but its candidates as
existing capacity. Turning 10,000 nodes and their 70,000 pods into solver input (resource
vectors, label requirements, host ports, the topology domains and the pods' counts) for each
simulation was most of a pass at that size, and it is the same work every time. An
:class:`ExistingView` does it once; :meth:`ExistingView.without` hands a solve the nodes minus
some, and the solve's set-up (``_solver_view``) takes what it needs from the view instead of
rebuilding it. What a solve changes (a node's room, its ports) it changes on its own copies.
The next pass's view is made from this one: only the nodes that changed are read again
(``ExistingView``'s ``previous``), as a status update of 1% of the pods changes 1% of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import overload

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.scheduling.claims import Vector, to_vector
from karpenter_capi.core.scheduling.collector import collection_paused
from karpenter_capi.core.scheduling.hostports import HostPortUsage
from karpenter_capi.core.scheduling.podspec import PodSpec, PodSpecs
from karpenter_capi.core.scheduling.solver_io import ExistingNode
from karpenter_capi.core.scheduling.topology import ExistingPods, NodeInfo
from karpenter_capi.core.values.requirements import Requirements


class _Entry:
    """What the view reads of one node: kept for the next view while the node is the very
    same ``ExistingNode`` (``state.ParsedCluster`` hands back the last round's while nothing
    of it or its pods changed)."""

    __slots__ = ("anti_affinity", "info", "labels", "node", "ports", "requirements", "specs")

    def __init__(
        self, node: ExistingNode, specs: PodSpecs, given: list[PodSpec] | None = None
    ) -> None:
        self.node = node
        self.labels = _labels(node)
        requirements = node.label_requirements
        if requirements is None or node.in_flight:
            requirements = Requirements.from_labels(node.labels)
        self.requirements = requirements
        self.info = NodeInfo(node.name, self.labels, tuple(node.taints))
        # The pods' parses: those the caller read them with (one for one with the very pods),
        # else each one looked up.
        self.specs = given if given is not None else specs.get_all(node.pods)
        self.ports = HostPortUsage()
        for spec in self.specs:
            if spec.host_ports:
                self.ports.add(spec.host_ports)
        # Its pods the topology index lists for their required anti-affinity.
        # Most nodes have none: no empty list kept for the collector to walk.
        self.anti_affinity: list[PodSpec] | tuple[()] = [
            spec
            for spec in self.specs
            if spec.anti_affinity and ExistingPods.counted(spec) is not None
        ] or ()

    def counted(self) -> list[tuple[str, str, object] | None]:
        """What the topology index counts of its pods (``ExistingPods.counted``)."""
        return [ExistingPods.counted(pod) for pod in self.specs]


class ExistingView:
    """``nodes`` as every solve over them starts: built once, shared, never changed.

    ``previous``: the last pass's view. A node that is the very ``ExistingNode`` it held is
    taken from it as it was read (its requirements, host ports, parsed pods), and when the
    nodes are the same names in the same order and the changed ones count the same pods in
    the same label sets (a status update), its topology index and resource vectors are taken
    too, only the changed nodes' entries made again: the view is then what one built from
    scratch would be, for the work of the nodes that changed. ``parses(node)``: the node's
    pods' parses when the caller has them, one for one with ``node.pods`` (``None``: each
    pod's looked up in ``specs``)."""

    @collection_paused()  # tens of thousands of objects, no cycle (see ``collector``)
    def __init__(
        self,
        nodes: Sequence[ExistingNode],
        specs: PodSpecs,
        previous: ExistingView | None = None,
        parses: Callable[[ExistingNode], list[PodSpec] | None] | None = None,
    ) -> None:
        self.nodes = list(nodes)
        self._position = {node.name: index for index, node in enumerate(self.nodes)}
        # How many nodes name each resource, and carry each label value: what the nodes left
        # in a solve name is then these minus the few left out.
        self._resources: dict[str, int] = {}
        self._domains: dict[str, dict[str, int]] = {}
        kept = previous._by_name if previous is not None else {}
        self._entries: list[_Entry] = []
        changed: list[int] = []
        for index, node in enumerate(self.nodes):
            entry = kept.get(node.name)
            if entry is None or entry.node is not node:
                entry = _Entry(node, specs, None if parses is None else parses(node))
                changed.append(index)
            self._entries.append(entry)
        entries = self._entries
        self._by_name: dict[str, _Entry] = {e.node.name: e for e in entries}
        self.requirements: list[Requirements] = [e.requirements for e in entries]
        self.ports: list[HostPortUsage] = [e.ports for e in entries]
        self._vectors: dict[tuple[str, ...], list[tuple[Vector, Vector]]] = {}
        same_names = (
            previous is not None
            and len(previous.nodes) == len(self.nodes)
            and len(self._by_name) == len(self.nodes)
            and all(a.name == b.name for a, b in zip(previous.nodes, self.nodes, strict=True))
        )
        if previous is not None and same_names:
            # The counts as they were, less what the changed nodes counted, plus what they do;
            # counted again from scratch when a resource, label key or value comes or goes (the
            # label keys then in the order counting them from scratch gives).
            self._resources = dict(previous._resources)
            self._domains = {key: dict(values) for key, values in previous._domains.items()}
            steady = True
            for index in changed:
                steady = steady and list(previous._entries[index].labels) == list(
                    entries[index].labels
                )
                steady = self._count(previous._entries[index], -1) and steady
                steady = self._count(entries[index], +1) and steady
            steady = steady and all(self._resources.values())
            steady = steady and all(all(values.values()) for values in self._domains.values())
            if not steady:
                self._resources, self._domains = {}, {}
                for entry in entries:
                    self._count(entry, +1)
        else:
            for entry in entries:
                self._count(entry, +1)
        if previous is not None and same_names:
            pods = _patched(previous, entries, changed)
            if pods is not None:
                self.pods = pods
                for names, vectors in previous._vectors.items():
                    vectors = list(vectors)
                    for index in changed:
                        node = self.nodes[index]
                        vectors[index] = (
                            to_vector(names, node.allocatable),
                            to_vector(names, node.requested),
                        )
                    self._vectors[names] = vectors
                return
        self.pods = ExistingPods((spec, e.info) for e in entries for spec in e.specs)

    def _count(self, entry: _Entry, sign: int) -> bool:
        """Count ``entry``'s resources and label values in (``sign`` 1) or out (-1); whether
        each was counted already."""
        known = True
        for name in entry.node.allocatable:
            known = known and name in self._resources
            self._resources[name] = self._resources.get(name, 0) + sign
        for key, value in entry.labels.items():
            values = self._domains.setdefault(key, {})
            known = known and value in values
            values[value] = values.get(value, 0) + sign
        return known

    def without(self, names: Iterable[str]) -> ExistingSubset:
        """The nodes but those named, in the same order."""
        gone = frozenset(names)
        if len(self._position) == len(self.nodes):
            # Each name at one position: the others are every position but the candidates',
            # made in C rather than by testing each of 10,000 nodes per simulation.
            kept = list(range(len(self.nodes)))
            for position in sorted(
                (self._position[n] for n in gone if n in self._position), reverse=True
            ):
                del kept[position]
        else:
            kept = [i for i, node in enumerate(self.nodes) if node.name not in gone]
        return ExistingSubset(self, kept, frozenset(n for n in gone if n in self._position))

    def named(self, names: Iterable[str]) -> list[ExistingNode]:
        return [self.nodes[self._position[name]] for name in names if name in self._position]

    def vectors(self, names: tuple[str, ...]) -> list[tuple[Vector, Vector]]:
        """Each node's allocatable and requested resources as vectors over ``names``."""
        found = self._vectors.get(names)
        if found is None:
            found = self._vectors[names] = [
                (to_vector(names, n.allocatable), to_vector(names, n.requested)) for n in self.nodes
            ]
        return found

    def resource_names(self, gone: Iterable[ExistingNode]) -> set[str]:
        """The resources the nodes but ``gone`` name."""
        counts = dict(self._resources)
        for node in gone:
            for name in node.allocatable:
                counts[name] -= 1
        return {name for name, count in counts.items() if count > 0}

    def domains(self, gone: Iterable[ExistingNode]) -> dict[str, set[str]]:
        """Every label value the nodes but ``gone`` carry (their hostname included), by key."""
        counts = {key: dict(values) for key, values in self._domains.items()}
        for node in gone:
            for key, value in _labels(node).items():
                counts[key][value] -= 1
        domains: dict[str, set[str]] = {}
        for key, values in counts.items():
            kept = {value for value, count in values.items() if count > 0}
            if kept:
                domains[key] = kept
        return domains


class ExistingSubset(Sequence[ExistingNode]):
    """The nodes of an :class:`ExistingView` but a few (``gone``), as a solve takes them."""

    def __init__(self, view: ExistingView, kept: list[int], gone: frozenset[str]) -> None:
        self.view = view
        self.kept = kept  # the view's index of each node here
        self.gone = gone

    def gone_nodes(self) -> list[ExistingNode]:
        return self.view.named(self.gone)

    def __len__(self) -> int:
        return len(self.kept)

    @overload
    def __getitem__(self, index: int) -> ExistingNode: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[ExistingNode]: ...

    def __getitem__(self, index: int | slice) -> ExistingNode | Sequence[ExistingNode]:
        nodes = self.view.nodes
        if isinstance(index, slice):
            return [nodes[i] for i in self.kept[index]]
        return nodes[self.kept[index]]

    def __iter__(self) -> Iterator[ExistingNode]:
        nodes = self.view.nodes
        return (nodes[i] for i in self.kept)


def _patched(
    previous: ExistingView, entries: list[_Entry], changed: list[int]
) -> ExistingPods | None:
    """The previous view's topology index with the ``changed`` nodes' entries put in, when
    they count the very pods in the very label sets they did (``None`` otherwise): the index
    as ``ExistingPods`` would build it from ``entries``."""
    old_entries = previous._entries
    base = previous.pods
    nodes = list(base.nodes)
    for index in changed:
        old, new = old_entries[index], entries[index]
        if old.counted() != new.counted():
            return None
        position = base.position.get(new.node.name)
        if position is not None:
            nodes[position] = new.info
    anti_affinity = [
        (spec, base.position[e.node.name])
        for e in entries
        if e.anti_affinity
        for spec in e.anti_affinity
    ]
    return base.with_nodes(nodes, anti_affinity)


def _labels(node: ExistingNode) -> dict[str, str]:
    labels = dict(node.labels)
    labels.setdefault(wellknown.LABEL_HOSTNAME, node.name)
    return labels
