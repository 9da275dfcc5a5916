"""The facts of a disruption pass, kept across passes: each object version read once.

``PassFacts`` holds what earlier passes read of each version of a pod, Node and NodeClaim
(``facts``), and what a pass derived from the whole cluster (``remember``). A pass reads only
the objects that are not the very objects of the last pass (``carried``): what it carries over
is found by identity in C, so what it reads, and what its readers rebuild, is in proportion to
what changed since.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import compress, islice, repeat
from operator import attrgetter, is_, lt
from typing import Any, Generic, TypeAlias, TypeVar

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.disruption import carried
from karpenter_capi.core.disruption.facts import (
    ClaimFacts,
    NodeFacts,
    PodFacts,
    _is_active_phase,
    _meta,
)
from karpenter_capi.core.provisioning.state import ClusterSnapshot, ParsedCluster
from karpenter_capi.core.scheduling.kept import Kept
from karpenter_capi.core.scheduling.podspec import PodObject, PodSpec, version_of

T = TypeVar("T")
_RAW = attrgetter("raw")


class _NotRead:
    """What ``PassFacts.parses`` finds for a pod the read did not parse: no pod's parse."""

    raw = None


_NOT_READ = _NotRead()


_Carry: TypeAlias = tuple[
    tuple[list[int], list[int], list[int]],
    tuple[list["PodFacts"], list["NodeFacts"], list["ClaimFacts"]],
    tuple[list[int], list[int], list[int]],
]
"""Where each object of a pass was in the last one's lists, what that pass read of them, and
the positions there of the objects not carried over (updated or gone)."""


class _ByVersion(Generic[T]):
    """One kind's facts by object version: those of the last pass's objects (``live``, kept
    while they are in the pass, whatever time goes by), and for two rounds (``Kept``) those of
    objects that left it or were asked for apart from a pass."""

    __slots__ = ("kept", "live")

    def __init__(self) -> None:
        self.live: dict[object, T] = {}
        self.kept: Kept[object, T] = Kept()

    def get(self, key: object) -> T | None:
        found = self.live.get(key)
        return found if found is not None else self.kept.get(key)

    def settle(
        self, keys: list[object], facts: list[T], new: list[int] | None, gone: list[object]
    ) -> None:
        """The pass's objects are at ``keys`` with ``facts``; ``new``: the positions of those
        not carried over (``None``: none was), ``gone``: the versions of the last pass's
        objects that were not."""
        live = self.live
        if new is None:
            self.live = dict(zip(keys, facts, strict=True))
            for key in live.keys() - self.live.keys():
                self.kept.put(key, live[key])
            return
        now = set()
        for index in new:
            live[keys[index]] = facts[index]
            now.add(keys[index])
        for key in gone:
            if key not in now:
                value = live.pop(key, None)
                if value is not None:
                    self.kept.put(key, value)


def _gone(count: int, found: list[int]) -> list[int]:
    """The positions of the last pass's ``count`` objects that ``found`` does not carry over,
    in order."""
    return sorted(set(range(count)).difference(found))


def _in_order(found: list[int]) -> bool:
    """Whether the objects carried over keep the order they had (a store lists them so: an
    update keeps an object's place, a new object comes last)."""
    kept = list(filter(carried.NEW.__ne__, found))
    return all(map(lt, kept, islice(kept, 1, None)))


def cluster_versions(snapshot: ClusterSnapshot) -> tuple[object, ...] | None:
    """Every pod's, Node's and NodeClaim's ``(uid, resourceVersion)``, in order: equal for two
    snapshots only when they hold the same versions of the same objects. ``None`` when some
    object has no version (then nothing can be known to be unchanged)."""
    keys: list[object] = []
    for objects in (snapshot.pods, snapshot.nodes, snapshot.nodeclaims):
        for obj in objects:
            meta = obj.get("metadata") or {}
            uid, version = meta.get("uid"), meta.get("resourceVersion")
            if not uid or not version:
                return None
            keys.append((str(uid), str(version)))
        keys.append(None)  # where one kind ends
    return tuple(keys)


class PassFacts:
    """Facts by object version, kept across passes; ``reads`` counts the objects read.

    ``derived`` keeps what a pass computed from the whole cluster (its pods grouped by node,
    the simulator's reading), with the ``cluster_versions`` it was computed from: a pass over
    the same versions takes it as it is (``remember``).
    """

    def __init__(self) -> None:
        self._pods: _ByVersion[PodFacts] = _ByVersion()
        self._nodes: _ByVersion[NodeFacts] = _ByVersion()
        self._claims: _ByVersion[ClaimFacts] = _ByVersion()
        self._derived: dict[str, tuple[object, Any]] = {}
        self.versions: tuple[object, ...] | None = None
        """``cluster_versions`` of this pass's cluster (``begin``)."""
        self._claim_versions: tuple[object, ...] | None = None
        self._kind_versions: tuple[list[object], list[object], list[object]] | None = None
        """``versions`` cut into the pods', Nodes' and NodeClaims', for the next pass to carry."""
        self._carry: _Carry | None = None
        self._new: list[int] | None = None
        """The positions of this pass's pods read anew (``read_all``), not carried over."""
        self._previous: tuple[object, object] = (None, None)
        """The last pass's ``versions``, and its versions by kind."""
        self._lists: tuple[object, object, object] = (None, None, None)
        self._read: tuple[list[PodFacts], list[NodeFacts], list[ClaimFacts]] | None = None
        """The facts of this pass's pods, Nodes and NodeClaims, in their order (``read_all``)."""
        self._parses: dict[int, PodSpec] = {}
        self._parse_versions: dict[int, tuple[str, str]] = {}
        self._handed: dict[int, tuple[Sequence[PodObject], list[PodSpec]]] = {}
        """The pods ``read_all`` parsed, and their versions, by the pod object's ``id`` (the
        very object: ``raw``), until ``done_reading``."""
        self._sorted_labels: Kept[str, tuple[tuple[str, str], ...]] = Kept()
        """A class's labels sorted (``PodFacts.labels``), by its ``class_key``."""
        self.reads = 0
        self.reused = 0
        """How many times ``remember`` found its value kept (for tests and figures)."""

    def remember(self, slot: str, key: object | None, build: Callable[[], T]) -> T:
        """``build()``, or what it gave for the same ``key`` (``None``: never kept)."""
        if key is not None:
            found = self._derived.get(slot)
            if found is not None and (found[0] is key or found[0] == key):
                self.reused += 1
                return found[1]  # type: ignore[no-any-return]
        value = build()
        if key is None:
            self._derived.pop(slot, None)
        else:
            self._derived[slot] = (key, value)
        return value

    def last_key(self, slot: str) -> object:
        """The key ``remember`` last kept ``slot``'s value for (``None``: none)."""
        found = self._derived.get(slot)
        return None if found is None else found[0]

    def last(self, slot: str) -> object:
        """What ``remember`` last kept in ``slot``, whatever it was kept for (``None``: none)."""
        found = self._derived.get(slot)
        return None if found is None else found[1]

    def new_round(self) -> None:
        """A new pass: facts no object asked for during the last one go at the end of it."""
        for by_version in (self._pods, self._nodes, self._claims):
            by_version.kept.new_round()
        self._sorted_labels.new_round()

    def begin(self, snapshot: ClusterSnapshot) -> bool:
        """A new pass over ``snapshot``; whether it holds the very versions of the last pass.
        Then its facts stay as they are: what it derived is taken whole, so they are not asked
        for again and must not age out.

        The versions of the objects that are the very objects of the last pass are that pass's
        (``carried``): only the others' are looked up."""
        lists = (snapshot.pods, snapshot.nodes, snapshot.nodeclaims)
        old = self._kind_versions
        found = self._found(lists)
        versions = self._versions_now(lists, found)
        same = versions is not None and versions == self.versions
        read = self._read
        if not same:
            self.new_round()
            self._read = None
        # What ``read_all`` carries over: the last pass's facts, where each object is now.
        self._carry = None
        self._new = None
        if found is not None and read is not None and old is not None:
            gone = (
                _gone(len(old[0]), found[0]),
                _gone(len(old[1]), found[1]),
                _gone(len(old[2]), found[2]),
            )
            self._carry = (found, read, gone)
        self._previous = (self.versions, old)
        self.versions = versions
        self._claim_versions = None
        self._lists = lists
        self.done_reading()
        return same

    def parses(
        self, pods: Sequence[PodObject]
    ) -> tuple[list[tuple[str, str]], list[PodSpec]] | None:
        """The versions and parses ``read_all`` read ``pods`` with, one for one, when it
        parsed each of these very objects (``None`` otherwise: a pod carried over from the
        last pass, or read apart from one): what the simulator's set-up sums and indexes a
        node's pods from, without looking each one up again (``state.existing_nodes``,
        ``ExistingView``)."""
        if not self._parses:
            return None
        ids = list(map(id, pods))
        found = list(map(self._parses.get, ids, repeat(_NOT_READ)))
        if not all(map(is_, map(_RAW, found), pods)):
            return None
        specs: list[PodSpec] = found  # type: ignore[assignment]
        self._handed[id(pods)] = (pods, specs)
        return list(map(self._parse_versions.__getitem__, ids)), specs

    def specs_of(self, pods: Sequence[PodObject]) -> list[PodSpec] | None:
        """The parses of ``parses``, those it handed for the very list ``pods`` already if it
        did (a node's sum, then its view: looked up once)."""
        handed = self._handed.pop(id(pods), None)
        if handed is not None and handed[0] is pods:
            return handed[1]
        found = self.parses(pods)
        if found is None:
            return None
        self._handed.pop(id(pods), None)
        return found[1]

    def done_reading(self) -> None:
        """Forget what ``parses`` hands out: kept past the pass's read, the 70,000 references
        of a first pass over 10,000 nodes were walked by the collector for nothing."""
        self._parses, self._parse_versions, self._handed = {}, {}, {}

    def _found(
        self, lists: tuple[list[Any], list[Any], list[Any]]
    ) -> tuple[list[int], list[int], list[int]] | None:
        """Where each object of ``lists`` was in the last pass's (``carried.positions``)."""
        if self._kind_versions is None:
            return None
        old = self._lists
        if not (isinstance(old[0], list) and isinstance(old[1], list) and isinstance(old[2], list)):
            return None
        return (
            carried.positions(old[0], lists[0]),
            carried.positions(old[1], lists[1]),
            carried.positions(old[2], lists[2]),
        )

    def _versions_now(
        self,
        lists: tuple[list[Any], list[Any], list[Any]],
        found: tuple[list[int], list[int], list[int]] | None,
    ) -> tuple[object, ...] | None:
        """``cluster_versions`` of ``lists``, the last pass's objects' carried over."""
        if found is None or self._kind_versions is None:
            versions = cluster_versions(ClusterSnapshot(lists[0], lists[1], lists[2], []))
            self._kind_versions = None if versions is None else _split(versions, lists)
            return versions
        kinds: list[list[object]] = []
        for objects, where, old in zip(lists, found, self._kind_versions, strict=True):
            now = carried.carried(old, where, None)
            for index in carried.new_ones(where):
                key = version_of(objects[index])
                if key is None:
                    self._kind_versions = None
                    return None
                now[index] = key
            kinds.append(now)
        self._kind_versions = (kinds[0], kinds[1], kinds[2])
        return (*kinds[0], None, *kinds[1], None, *kinds[2], None)

    def read_all(self, snapshot: ClusterSnapshot, parsed: ParsedCluster | None) -> None:
        """Read each object version of ``snapshot`` that no earlier pass read: unless the pod
        finished, its parse (``parsed.specs``, shared with provisioning) and its facts taken
        from it (``PodFacts.of``), else its facts; each Node's and NodeClaim's facts, each
        Node's allocatable and, once registered, its labels as requirements.

        The pass would read them where it first needs them; read first, what reading costs
        (work in proportion to the objects that changed, what informer events bring) is told
        apart from what the pass itself costs (``PassReport.read_seconds``). An object without
        a version (a hand-made cluster) leaves it all to the pass. Call after ``begin``.
        """
        if self.versions is None or self._kind_versions is None:
            return
        keys = self._kind_versions
        specs = parsed.specs if parsed is not None else None
        sorted_labels = self._sorted_labels
        parses: dict[int, PodSpec] = {}
        versions: dict[int, Any] = {}
        self._parses, self._parse_versions = parses, versions

        def pod_read(pod: PodObject, key: object) -> PodFacts:
            if specs is None or not _is_active_phase(pod):
                return PodFacts.read(pod)
            # The pod's parse (shared with provisioning), and its facts taken from it; the
            # pods of one class share their labels, sorted once.
            spec = specs.of_version(pod, key)  # type: ignore[arg-type]
            labels = None
            if spec.problem is None:
                labels = sorted_labels.get(spec.class_key)
                if labels is None:
                    labels = tuple(sorted(spec.labels.items()))
                    sorted_labels.put(spec.class_key, labels)
            if spec.raw is pod:
                parses[id(pod)] = spec
                versions[id(pod)] = key
            return PodFacts.of(spec, labels)

        def node_read(node: Mapping[str, Any], _: object) -> NodeFacts:
            if parsed is not None:
                meta = _meta(node)
                parsed.allocatable(node)
                labels = dict(meta.get("labels") or {})
                # A node not registered yet takes its NodeClaim's labels (``existing_nodes``,
                # which makes its requirements then, with them): made here, they were made
                # twice.
                if wellknown.LABEL_REGISTERED in labels:
                    labels.setdefault(wellknown.LABEL_HOSTNAME, str(meta.get("name")))
                    parsed.label_requirements(node, labels)
            return NodeFacts.read(node)

        pods = self._read_kind(0, snapshot.pods, keys=keys[0], by_version=self._pods, read=pod_read)
        nodes = self._read_kind(
            1, snapshot.nodes, keys=keys[1], by_version=self._nodes, read=node_read
        )
        claims = self._read_kind(
            2,
            snapshot.nodeclaims,
            keys=keys[2],
            by_version=self._claims,
            read=lambda claim, _: ClaimFacts.read(claim),
        )
        self._read = (pods, nodes, claims)

    def _read_kind(
        self,
        kind: int,
        objects: list[Any],
        *,
        keys: list[object],
        by_version: _ByVersion[T],
        read: Callable[[Any, object], T],
    ) -> list[T]:
        """The facts of ``objects``: the last pass's for each that is the very object it read
        (``carried``), those of each other one's version looked up, or read (``read``, given
        the object and its version, also reads what the simulator takes of it)."""
        carry = self._carry
        facts: list[Any]
        if carry is None:
            facts, new, gone = [None] * len(objects), None, []
        else:
            facts = carried.carried(carry[1][kind], carry[0][kind], None)
            old = self._previous[1]
            assert isinstance(old, tuple)
            new, gone = _to_read(facts), [old[kind][index] for index in carry[2][kind]]
        # Nothing kept (a first pass): no version to look up.
        look_up = by_version.get if by_version.live or len(by_version.kept) else _nothing
        for index in range(len(objects)) if new is None else new:
            key = keys[index]
            found = look_up(key)
            if found is None:
                self.reads += 1
                found = read(objects[index], key)
            facts[index] = found
        by_version.settle(keys, facts, new, gone)
        if kind == 0:
            self._new = new
        return facts

    def pod_changes(
        self, pods: object, made_for: object
    ) -> tuple[list[int], list[PodFacts]] | None:
        """What changed among the pods since the last pass, when ``pods`` are this pass's and
        ``made_for`` the last pass's ``versions`` (what a reader made from them): the
        positions of the pods that are not the very pods of the last pass, and the last
        pass's facts of its pods not carried over (updated or gone). ``None`` when that is
        not known (no last pass, a relist, the pods in another order): read them all."""
        carry, last = self._carry, self._previous[0]
        if (
            carry is None
            or self._new is None
            or self._read is None
            or pods is not self._lists[0]
            or made_for is None
            or not (made_for is last or made_for == last)
            or not _in_order(carry[0][0])
        ):
            return None
        old = carry[1][0]
        return self._new, [old[index] for index in carry[2][0]]

    def pod_facts(self) -> list[PodFacts]:
        """This pass's pods' facts, in their order (after ``read_all``)."""
        assert self._read is not None
        return self._read[0]

    def pods(self, pods: Iterable[PodObject]) -> Iterable[tuple[PodObject, PodFacts]]:
        """Each of ``pods`` with its facts, in order: those ``read_all`` read when they are
        this pass's pods (no version looked up again), else each one's asked for."""
        if self._read is not None and pods is self._lists[0]:
            return zip(pods, self._read[0], strict=True)
        return ((pod, self.pod(pod)) for pod in pods)

    def nodes(self, nodes: Iterable[Mapping[str, Any]]) -> Iterable[tuple[Any, NodeFacts]]:
        """Each of ``nodes`` with its facts, in order (see ``pods``)."""
        if self._read is not None and nodes is self._lists[1]:
            return zip(nodes, self._read[1], strict=True)
        return ((node, self.node(node)) for node in nodes)

    def claims(self, claims: Iterable[Mapping[str, Any]]) -> Iterable[tuple[Any, ClaimFacts]]:
        """Each of ``claims`` with its facts, in order (see ``pods``)."""
        if self._read is not None and claims is self._lists[2]:
            return zip(claims, self._read[2], strict=True)
        return ((claim, self.claim(claim)) for claim in claims)

    def claim_versions(self, nodeclaims: object) -> tuple[object, ...] | None:
        """The NodeClaims' part of ``versions_of``, when ``nodeclaims`` are this pass's:
        equal for two passes only when they hold the same versions of the same NodeClaims."""
        if self.versions is None or nodeclaims is not self._lists[2]:
            return None
        if self._claim_versions is None:
            # The NodeClaims' versions come last, after the pods', the Nodes' and a None each.
            start = len(self.versions) - len(self._lists[2]) - 1  # type: ignore[arg-type]
            self._claim_versions = self.versions[start:]
        return self._claim_versions

    def node_versions(self, nodes: object, nodeclaims: object) -> tuple[object, ...] | None:
        """The Nodes' and NodeClaims' part of ``versions``, when they are this pass's: equal
        for two passes only when they hold the same versions of the same Nodes and
        NodeClaims."""
        pods = self._lists[0]
        if self.versions is None or nodes is not self._lists[1] or not isinstance(pods, list):
            return None
        if nodeclaims is not self._lists[2]:
            return None
        return self.versions[len(pods) + 1 :]

    def has_read(self, snapshot: ClusterSnapshot) -> bool:
        """Whether ``read_all`` read this very snapshot's lists: then ``pods``, ``nodes`` and
        ``claims`` hand out its facts without a lookup, a walk cheaper than one of the raw
        objects."""
        return (
            self._read is not None
            and self.versions_of(snapshot.pods, snapshot.nodes, snapshot.nodeclaims) is not None
        )

    def versions_of(
        self,
        pods: object,
        nodes: object | None = None,
        nodeclaims: object | None = None,
    ) -> tuple[object, ...] | None:
        """This pass's ``cluster_versions`` when ``pods`` (and ``nodes``, ``nodeclaims`` when
        given) are the very lists ``begin`` was given; else ``None`` (another cluster: nothing
        derived from this pass's may be taken for it)."""
        pass_pods, pass_nodes, pass_claims = self._lists
        if pods is not pass_pods:
            return None
        if nodes is not None and nodes is not pass_nodes:
            return None
        if nodeclaims is not None and nodeclaims is not pass_claims:
            return None
        return self.versions

    def _of(self, by_version: _ByVersion[T], obj: Mapping[str, Any], read: Callable[[Any], T]) -> T:
        key = version_of(obj)
        if key is None:
            self.reads += 1
            return read(obj)
        found = by_version.get(key)
        if found is None:
            self.reads += 1
            found = read(obj)
            by_version.kept.put(key, found)
        return found

    def pod(self, pod: PodObject) -> PodFacts:
        return self._of(self._pods, pod, PodFacts.read)

    def node(self, node: Mapping[str, Any]) -> NodeFacts:
        return self._of(self._nodes, node, NodeFacts.read)

    def claim(self, claim: Mapping[str, Any]) -> ClaimFacts:
        return self._of(self._claims, claim, ClaimFacts.read)


def _nothing(_: object) -> None:
    return None


def _to_read(facts: list[Any]) -> list[int]:
    """The positions of the objects whose facts were not carried over."""
    return list(compress(range(len(facts)), map(is_, facts, repeat(None))))


def _split(
    versions: tuple[object, ...], lists: tuple[list[Any], list[Any], list[Any]]
) -> tuple[list[object], list[object], list[object]]:
    """``cluster_versions`` cut into the pods', the Nodes' and the NodeClaims'."""
    pods, nodes = len(lists[0]), len(lists[1])
    return (
        list(versions[:pods]),
        list(versions[pods + 1 : pods + 1 + nodes]),
        list(versions[pods + 2 + nodes : -1]),
    )


def pass_facts(parsed: ParsedCluster | None) -> PassFacts:
    """The facts ``parsed`` keeps across passes (fresh ones without it)."""
    if parsed is None:
        return PassFacts()
    if not isinstance(parsed.facts, PassFacts):
        parsed.facts = PassFacts()
    return parsed.facts
