"""Every bad input at once, applied over HTTP while the controller runs, next to a normal
workload; and the same world without them, to compare with.

The controller (the real ``Operator`` with ``generic_capi``) talks to the in-memory API server
only through the official ``kubernetes`` client and the HTTP front, so it meets the bad
objects exactly as a controller in a real cluster would: through lists, watches and the
server's answers to its writes. The user's ``kubectl apply`` goes over HTTP too (another
client, its own user agent), so what the CRDs' schema and CEL rules refuse is refused at
admission, with the message kubectl would print. The emulated cluster around the controller
(Cluster API, kubelets, the scheduler stand-in) calls the server in process, as the fault
suites' harness does (``tests.reliability.faults.harness``). Everything is stepped on the
runtime's ``FakeClock``: a run costs no wall time beyond the computing and is repeatable.

The schedule: the first half of the catalogue just after the controller starts, the
workload's Deployments at ``DEPLOY_AT``, the second half at ``SECOND_HALF_AT``, while the
workload is being provisioned (the workload selects the catalog NodePool, which is also
weighted first, as a user's main NodePool). The run records what each create answered and
every log record with a traceback; at the end, when the workload's pods were bound (from
their timestamps), the Events, the NodeClaims per NodePool, and the invariant checker's
findings (its dry run with the controller's own plugins).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from karpenter_capi.core.api.wellknown import LABEL_INSTANCE_TYPE, LABEL_NODEPOOL
from karpenter_capi.core.clock import parse_timestamp
from karpenter_capi.core.kube.errors import ApiError, NotFound
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.core.kube.resources import EVENTS, NODECLAIMS, NODEPOOLS, PODS
from karpenter_capi.core.operator import Operator
from karpenter_capi.core.plugin_host import Plugins
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.invariants import check_invariants
from karpenter_capi.sim.scenario.catalog import NAME
from karpenter_capi.sim.scenario.result import ScenarioResult
from karpenter_capi.sim.scenario.runner import run
from karpenter_capi.sim.scenario.schema import Scenario, parse_scenario
from tests.reliability.malformed.world import catalog_templates

from .catalogue import Entry
from .objects import CLUSTER, NAMESPACE, RESOURCES, pinned_pod

CONTROLLER_AGENT: Final = "karpenter-capi-under-test"
USER_AGENT: Final = "kubectl-malformed"
DEPLOY_AT: Final = 5.0
SECOND_HALF_AT: Final = 10.0
UNTIL: Final = 140.0
"""Virtual seconds a run lasts: a clean run binds the workload in about 20; a Node with
Karpenter's labels that no NodeClaim holds is only said after two minutes (it may be one
whose launch has not written its provider ID yet)."""
WORKLOADS: Final = (
    ("web", 12, "500m", "1Gi"),
    ("api", 8, "1", "2Gi"),
    ("batch", 6, "1500m", "3Gi"),
)
"""The normal workload (name, replicas, cpu, memory): 26 pods on the catalog."""


def scenario(scale: int = 1) -> Scenario:
    """A small catalog (2, 4 and 8 vCPU, two families, one zone) and the workload, deployed
    at ``DEPLOY_AT``, its replicas times ``scale``, on the catalog NodePool.

    The workload selects that NodePool so both runs buy it the same nodes: otherwise its pods
    may take the room left on a bad NodePool's node, as Karpenter rightly does with any
    compatible node already launching (``np-limit-huge``'s, bought at 0 s for the pod pinned
    to it, took one ``batch`` pod, and the other 25 were packed on five nodes instead of the
    clean run's three), and the comparison would measure that node, not the controller."""
    return parse_scenario(
        {
            "name": "malformed-http",
            "description": "every bad input at once, next to a 26-pod workload",
            "infrastructure": {
                "catalog": {
                    "cpus": [2, 4, 8],
                    "families": {"c": 2, "m": 4},
                    "archs": ["amd64"],
                    "zones": ["zone-a"],
                    "capacityTypes": ["on-demand"],
                    "consolidationPolicy": "WhenEmpty",
                    "consolidateAfter": "Never",
                    "clusterName": CLUSTER,
                }
            },
            "workloads": [
                {
                    "name": name,
                    "replicas": replicas * scale,
                    "cpu": cpu,
                    "memory": memory,
                    "nodeSelector": {LABEL_NODEPOOL: NAME},
                }
                for name, replicas, cpu, memory in WORKLOADS
            ],
            "timeline": [
                {"at": f"{DEPLOY_AT:g}s", "action": "deploy", "target": name}
                for name, *_ in WORKLOADS
            ],
        },
        "malformed-http",
    )


@dataclass(frozen=True)
class Applied:
    """What the API server answered to a create: ``created``, or ``refused`` and why."""

    answer: str
    message: str = ""


class _Tracebacks(logging.Handler):
    """Every record the controller logged with a traceback attached."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []
        self.warnings: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(record)
        if record.levelno >= logging.WARNING:
            self.warnings.append(record.getMessage())


@contextmanager
def _logged() -> Iterator[_Tracebacks]:
    handler = _Tracebacks()
    logger = logging.getLogger("karpenter_capi")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


@dataclass
class MalformedRun:
    """One run and what it left behind (``entries`` empty: the clean reference)."""

    entries: Sequence[Entry] = ()
    scale: int = 1
    applied: dict[str, Applied] = field(default_factory=dict)
    result: ScenarioResult | None = None
    workload_bound_at: float | None = None
    """Virtual seconds from the workload's first pod created to its last pod bound (None:
    not all were bound)."""
    workload_bound: int = 0
    workload_total: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    nodeclaims: dict[str, int] = field(default_factory=dict)
    """Live NodeClaims at the end by their NodePool label (``-`` for none)."""
    instance_types: dict[str, list[str]] = field(default_factory=dict)
    """The instance types of those NodeClaims by NodePool, sorted: the nodes bought."""
    idle_nodeclaims: list[str] = field(default_factory=list)
    """``pool/name`` of the live NodeClaims whose node holds no pod at the end (or that have
    no node yet): capacity bought for nothing."""
    violations: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    _server: InMemoryAPIServer | None = None
    _front: HttpFront | None = None
    _clients: list[OfficialClient] = field(default_factory=list)
    _user: OfficialClient | None = None
    _plugins: Plugins | None = None
    _second_half_applied: bool = False

    # -- the schedule -------------------------------------------------------------------------

    @property
    def server(self) -> InMemoryAPIServer:
        assert self._server is not None
        return self._server

    def _client(self, agent: str, *, poll: bool) -> OfficialClient:
        assert self._front is not None
        client = OfficialClient.from_url(self._front.url, poll_watches=poll)
        client.api_client.user_agent = agent
        self._clients.append(client)
        return client

    def _on_cluster(self, server: InMemoryAPIServer) -> None:
        self._server = server
        server.apply_manifests(catalog_templates())
        self._front = HttpFront(server).start()

    def _controller_client(self, server: InMemoryAPIServer) -> OfficialClient:
        return self._client(CONTROLLER_AGENT, poll=True)

    def _apply(self, entries: Sequence[Entry]) -> None:
        """``kubectl apply`` of each entry (its companions first), over HTTP."""
        user = self._user
        assert user is not None
        for entry in entries:
            for companion in entry.companions:
                kind = str(companion["kind"])
                user.create(RESOURCES[kind], companion, companion["metadata"].get("namespace"))
            try:
                user.create(RESOURCES[entry.kind], entry.obj, entry.namespace)
            except ApiError as error:
                self.applied[entry.id] = Applied("refused", f"{error.code} {error.message}")
                continue
            self.applied[entry.id] = Applied("created")
            if entry.pinned:
                user.create(PODS, pinned_pod(entry.name), NAMESPACE)

    def _pace(self, now: float) -> None:
        if now == 0:
            self._user = self._client(USER_AGENT, poll=False)
            # The pods that select no NodePool (the impossible ones) go to the catalog
            # NodePool first, as a user's main NodePool would take them; the bad NodePools
            # get only the pods pinned to them (the workload selects the catalog's).
            self.server.patch(NODEPOOLS, NAME, {"spec": {"weight": 100}})
            self._apply(self.entries[0::2])
        if now >= SECOND_HALF_AT and not self._second_half_applied:
            self._second_half_applied = True
            self._apply(self.entries[1::2])

    def _workload(self) -> None:
        """How many workload pods got bound, and the virtual seconds from the first of them
        created to the last one bound (the API's timestamps have one-second precision)."""
        names = {name for name, *_ in WORKLOADS}
        pods = [
            p
            for p in self.server.list(PODS, NAMESPACE).items
            if (p["metadata"].get("labels") or {}).get("app") in names
            and not p["metadata"].get("deletionTimestamp")
        ]
        self.workload_total = sum(replicas for _, replicas, *_ in WORKLOADS) * self.scale
        bound = [moment for p in pods if (moment := _scheduled_at(p)) is not None]
        self.workload_bound = len(bound)
        if pods and len(bound) >= self.workload_total:
            first = min(parse_timestamp(p["metadata"]["creationTimestamp"]) for p in pods)
            self.workload_bound_at = (max(bound) - first).total_seconds()

    def _on_operator(self, operator: Operator) -> None:
        self._plugins = operator.context.plugins

    def _check(self) -> list[str]:
        """``check_invariants`` with the controller's plugins (its dry-run provisioning round
        too); the checker failing on a bad object is a finding, not the end of the report."""
        try:
            found = check_invariants(self.server, clock=self.server.clock, plugins=self._plugins)
        except Exception as error:  # what the checker trips on, the controller does too
            return [f"the invariant checker failed: {type(error).__name__}: {error}"]
        return [str(v) for v in found]

    # -- the run ------------------------------------------------------------------------------

    def run(self, *, until: float = UNTIL, seed: int = 0, pace_step: float = 5.0) -> MalformedRun:
        """Run the schedule for ``until`` virtual seconds (the schedule's steps ``pace_step``
        apart; the controller's own timers are kept between them) and read the outcome."""
        with _logged() as logged:
            try:
                self.result = run(
                    scenario(self.scale),
                    until=until,
                    seed=seed,
                    on_cluster=self._on_cluster,
                    controller_client=self._controller_client,
                    pace=self._pace,
                    pace_step=pace_step,
                    on_operator=self._on_operator,
                )
                # The plugins' dry run reads through the controller's client: before closing.
                self.violations = self._check()
            finally:
                for client in self._clients:
                    client.close()
                if self._front is not None:
                    self._front.close()
        self.tracebacks = [
            f"{r.levelname} {r.name}: {r.getMessage()} ({r.exc_info[0].__name__})"
            for r in logged.records
            if r.exc_info and r.exc_info[0] is not None
        ]
        self.warnings = logged.warnings
        self.events = list(self.server.list(EVENTS).items)
        self._workload()
        holding = {
            str(p["spec"]["nodeName"])
            for p in self.server.list(PODS).items
            if (p.get("spec") or {}).get("nodeName")
        }
        for claim in self.server.list(NODECLAIMS).items:
            if not claim["metadata"].get("deletionTimestamp"):
                pool = (claim["metadata"].get("labels") or {}).get(LABEL_NODEPOOL, "-")
                self.nodeclaims[pool] = self.nodeclaims.get(pool, 0) + 1
                kind = (claim["metadata"].get("labels") or {}).get(LABEL_INSTANCE_TYPE, "-")
                self.instance_types.setdefault(pool, []).append(kind)
                if (claim.get("status") or {}).get("nodeName") not in holding:
                    self.idle_nodeclaims.append(f"{pool}/{claim['metadata']['name']}")
        for kinds in self.instance_types.values():
            kinds.sort()
        return self

    # -- what the user reads ------------------------------------------------------------------

    def _object(self, kind: str, name: str) -> dict[str, Any] | None:
        resource = RESOURCES[kind]
        try:
            return self.server.get(resource, name, NAMESPACE if resource.namespaced else None)
        except NotFound:
            return None

    def conditions(self, kind: str, name: str) -> list[str]:
        """Each line of each condition message on the object, with its type and reason."""
        obj = self._object(kind, name) or {}
        lines: list[str] = []
        for condition in (obj.get("status") or {}).get("conditions") or []:
            head = f"{condition.get('type')}={condition.get('status')} {condition.get('reason')}"
            for line in str(condition.get("message") or "").splitlines() or [""]:
                lines.append(f"{head}: {line}")
        return lines

    def events_about(self, kind: str, name: str) -> list[str]:
        """The controller's Events whose involvedObject is the object."""
        return [
            f"{e.get('type')} {e.get('reason')}: {e.get('message')}"
            for e in self.events
            if (e.get("involvedObject") or {}).get("kind") == kind
            and (e.get("involvedObject") or {}).get("name") == name
            and (e.get("source") or {}).get("component") == "karpenter"
        ]

    def outcome(self, entry: Entry) -> tuple[str | None, str]:
        """The expected outcome the user got for ``entry`` (None: none of them), and what the
        user reads about it (for a failure's message)."""
        applied = self.applied.get(entry.id)
        if applied is None:
            return None, "never applied"
        if applied.answer == "refused":
            return ("refused" if "refused" in entry.expected else None), applied.message
        kind, name = entry.marked_on
        conditions, events = self.conditions(kind, name), self.events_about(kind, name)
        said = "\n".join(
            [f"conditions on {kind} {name}:", *conditions, f"Events about {kind} {name}:", *events]
        )
        if "condition" in entry.expected and any(
            all(w in line for w in entry.words)
            for line in conditions
            if "=True " not in line or entry.where
        ):
            return "condition", said
        if "event" in entry.expected and any(all(w in e for w in entry.words) for e in events):
            return "event", said
        return None, said


def _scheduled_at(pod: dict[str, Any]) -> datetime | None:
    if not (pod.get("spec") or {}).get("nodeName"):
        return None
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return parse_timestamp(condition["lastTransitionTime"])
    return None


def reference(scale: int = 1) -> MalformedRun:
    """The same world without a single bad input."""
    return MalformedRun(scale=scale).run()
