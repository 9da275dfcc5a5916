"""The scenario file: what a simulated run starts with and what happens to it over time.

A scenario written as data (YAML) instead of Python lets anyone compare the autoprovisioner's
behaviour on the same inputs across changes, and lets the shipped benchmarks (upstream
Karpenter's perf "basic" test, hostname spreads...) be read and tweaked without code. The model
is strict (unknown fields are errors) so a typo fails loudly, and every error names the path of
the bad field (``timeline[1].at: ...``), in the words ``core.api.meta.validation_problems``
uses for API objects.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from karpenter_capi.core.api.meta import validation_problems
from karpenter_capi.core.errors import InvalidInputError
from karpenter_capi.core.values.quantity import QuantityError, parse_quantity


class ScenarioError(InvalidInputError):
    """A scenario file that cannot be used; ``problems`` are ``path: reason`` lines."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


class _Strict(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        extra="forbid",
        frozen=True,
    )


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


def parse_duration(value: str | float) -> float:
    """Seconds in ``"90s"``, ``"5m"``, ``"1h30m"`` or a plain number of seconds."""
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    match = _DURATION.match(value.strip())
    if not value.strip() or match is None or not any(match.groups()):
        raise ValueError(f"{value!r} is not a duration like 30s, 5m or 1h30m")
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def _check_quantity(value: str | float) -> str:
    text = str(value)
    try:
        parse_quantity(text)
    except QuantityError as exc:
        raise ValueError(f"{text!r} is not a quantity: {exc}") from None
    return text


class StaticNodePool(_Strict):
    """A static NodePool (``spec.replicas``) beside the catalog's dynamic one, on the same
    NodeClass and requirements, with the template label ``nodepool-type: static``."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=50)
    replicas: int = Field(ge=0)
    limit_nodes: int | None = Field(default=None, ge=0)
    """``spec.limits.nodes``: the most NodeClaims it may have at once (replacements included)."""


class Catalog(_Strict):
    """A generated catalog in the style of upstream Karpenter's kwok provider.

    One MachineDeployment per (shape, arch, zone, capacity type); a shape is a vCPU count and a
    family whose memory per vCPU is ``families[family]`` GiB.
    """

    cpus: list[int] = Field(default=[2, 4, 8], min_length=1)
    families: dict[str, int] = Field(default={"c": 2, "s": 4, "m": 8}, min_length=1)
    archs: list[Literal["amd64", "arm64"]] = Field(default=["amd64"], min_length=1)
    zones: list[str] = Field(default=["zone-a", "zone-b"], min_length=1)
    capacity_types: list[Literal["on-demand", "spot"]] = Field(default=["on-demand"], min_length=1)
    price_per_cpu: float = Field(default=0.025, ge=0)
    price_per_gib: float = Field(default=0.001, ge=0)
    spot_discount: float = Field(default=0.7, gt=0, le=1)
    max_pods: int = Field(default=110, gt=0)
    max_size: int = Field(default=100, ge=0)
    cluster_name: str = "sim"
    namespace: str = "default"
    nodepool_limits: dict[str, str] = Field(default_factory=dict)
    static_nodepools: list[StaticNodePool] = Field(default_factory=list)
    consolidation_policy: Literal["WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"] = "WhenEmpty"
    consolidate_after: str = "Never"
    expire_after: str = "Never"
    """The NodePool's ``spec.template.spec.expireAfter``: how long a node lives before
    Karpenter replaces it (``Expired``)."""
    rollout_strategy: Literal["OnDelete", "RollingUpdate"] = "OnDelete"
    """How the MachineDeployments roll out a template change. ``OnDelete`` (the default, and
    what docs/generic-capi.md recommends) leaves drifted Machines to Karpenter's drift
    replacement; ``RollingUpdate`` lets Cluster API replace them itself."""

    @field_validator("cpus")
    @classmethod
    def _positive_cpus(cls, value: list[int]) -> list[int]:
        if any(cpu <= 0 for cpu in value):
            raise ValueError("vCPU counts must be positive")
        return value

    @field_validator("families")
    @classmethod
    def _positive_ratios(cls, value: dict[str, int]) -> dict[str, int]:
        if any(ratio <= 0 for ratio in value.values()):
            raise ValueError("memory per vCPU must be positive")
        return value


class CapacityShortage(_Strict):
    """A ``CreateFleet`` whose cheapest override is this offering launches nothing and names
    it in ``Errors[]`` with ``code`` (the next ``times`` such calls)."""

    instance_type: str = Field(min_length=1)
    zone: str = Field(min_length=1)
    capacity_type: Literal["spot", "on-demand"] = "spot"
    code: str = "InsufficientInstanceCapacity"
    times: int = Field(default=1, ge=1)


class AwsEnvironment(_Strict):
    """An emulated AWS for the run (``sim.scenario.aws``; needs moto): a VPC with a subnet per
    zone, the price book below, and capacity shortages. Manifests may name what moto generated:
    ``${aws.subnet.<zone>}``, ``${aws.securityGroup.node}``, ``${aws.ami}``, ``${aws.vpc}``,
    ``${aws.region}``."""

    region: str = "us-east-1"
    zones: list[str] = Field(min_length=1)
    on_demand_prices: dict[str, float] = Field(min_length=1)
    """USD per hour by instance type (the Pricing API's answer); other types are not offered."""
    spot_prices: dict[str, dict[str, float]] = Field(default_factory=dict)
    """USD per hour by instance type, then zone (``DescribeSpotPriceHistory``'s answer)."""
    capacity_errors: list[CapacityShortage] = Field(default_factory=list)
    interruption_queue: str | None = Field(default=None, min_length=1)
    """An SQS queue (its name) made in moto and given to ``capa`` as its
    ``interruption-queue``: where ``interrupt`` actions with ``via: queue`` send EventBridge's
    spot interruption warnings."""


class Infrastructure(_Strict):
    """Either literal ``manifests`` or a generated ``catalog``, never both; ``aws`` runs the
    scenario against an emulated AWS."""

    manifests: list[dict[str, Any]] | None = None
    catalog: Catalog | None = None
    aws: AwsEnvironment | None = None

    @field_validator("manifests")
    @classmethod
    def _kubernetes_objects(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for index, obj in enumerate(value or []):
            if "apiVersion" not in obj or "kind" not in obj:
                raise ValueError(
                    f"item {index} is not a Kubernetes object (needs apiVersion, kind)"
                )
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> Infrastructure:
        if (self.manifests is None) == (self.catalog is None):
            raise ValueError("give exactly one of manifests or catalog")
        return self


class Workload(_Strict):
    """A Deployment of ``replicas`` identical pods; the optional fields go into its pod spec."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=50)
    namespace: str = "default"
    replicas: int = Field(ge=0)
    cpu: str
    memory: str
    labels: dict[str, str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    topology_spread_constraints: list[dict[str, Any]] = Field(default_factory=list)
    affinity: dict[str, Any] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)

    _quantities = field_validator("cpu", "memory", mode="before")(_check_quantity)


def _duration_field(value: Any) -> float | None:
    """A duration field's value (``None`` stays ``None``), or a ``ValueError`` naming the form."""
    if value is None:
        return None
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ValueError("a duration is text like 30s, 5m or 1h30m, or seconds")
    return parse_duration(value)


class Window(_Strict):
    """Where in every period a repeating action may fall: the ``first`` part of every ``of``
    (``{first: 40m, of: 1h}``: minutes :00 to :40 of each hour; the rest is quiet)."""

    first: float
    of: float

    _durations = field_validator("first", "of", mode="before")(_duration_field)

    @model_validator(mode="after")
    def _inside(self) -> Window:
        if not 0 < self.first <= self.of:
            raise ValueError("first must be positive and no longer than of")
        return self

    def admits(self, at: float) -> bool:
        return at % self.of < self.first


INTERRUPTIBLE: Final = frozenset({"spot", "on-demand", "*"})
DEFAULT_NOTICE: Final = 120.0
"""EC2's spot interruption notice: two minutes."""

REPETITION: Final = "${n}"
"""Replaced, in a repeating patch's strings, by the repetition's number (1 for the first)."""


class TimelineAction(_Strict):
    """At ``at`` after the start: ``scale`` a workload, ``deploy`` it, or ``delete`` it; or
    ``patch`` an object of the infrastructure (``kind``, ``target`` its name or ``*`` for
    every one of that kind) with a JSON merge patch, as a user's ``kubectl patch`` would; or
    ``scale`` a static NodePool (``kind: NodePool``) through its scale subresource, as
    ``kubectl scale nodepool`` does. ``interrupt`` gives the Nodes of capacity type ``target``
    (``spot``, ``on-demand`` or ``*``; at most ``replicas`` of them, oldest name first) the
    cloud's interruption notice, ``notice`` (default 2m) before it takes them
    (``sim.scenario.interruptions``): by default as aws-node-termination-handler's taint on the
    Node, with ``via: queue`` as EventBridge's warning on the ``infrastructure.aws``
    ``interruptionQueue`` (capa's native path).

    With ``every``, the action repeats at ``at``, ``at + every``, ... up to ``until`` (default:
    the end of the run), so a day of churn is a few lines instead of thousands: a repeating
    ``scale`` may give ``replicas`` as a list, taken in turn (the n-th repetition takes item
    ``(n - 1) % len``), and a repeating ``patch`` has ``${n}`` in its strings replaced by the
    repetition's number (``version: v1.31.${n}``: a new version each time). A ``window``
    keeps the repetitions to part of every period (``{first: 40m, of: 1h}``), leaving the rest
    quiet; the repetitions it skips are not counted."""

    at: float
    action: Literal["scale", "deploy", "delete", "patch", "interrupt"]
    target: str
    replicas: int | list[int] | None = None
    kind: Literal["MachineDeployment", "MachineSet", "MachinePool", "NodePool"] | None = None
    patch: dict[str, Any] | None = None
    every: float | None = None
    until: float | None = None
    window: Window | None = None
    notice: float | None = None
    via: Literal["taint", "queue"] | None = None

    _durations = field_validator("at", "every", "until", "notice", mode="before")(_duration_field)

    @field_validator("replicas")
    @classmethod
    def _non_negative(cls, value: int | list[int] | None) -> int | list[int] | None:
        counts = value if isinstance(value, list) else [] if value is None else [value]
        if any(count < 0 for count in counts):
            raise ValueError("replicas cannot be negative")
        if isinstance(value, list) and not value:
            raise ValueError("a list of replicas needs at least one count")
        return value

    @model_validator(mode="after")
    def _replicas_for_scale(self) -> TimelineAction:
        if self.action == "scale" and self.replicas is None:
            raise ValueError("scale needs replicas")
        self._check_repetition()
        self._check_kind_and_patch()
        self._check_interrupt()
        return self

    def _check_repetition(self) -> None:
        """until, window and a list of replicas belong to a repeating action."""
        repeating_only = self.until is not None or self.window is not None
        if self.every is None and (repeating_only or isinstance(self.replicas, list)):
            raise ValueError("until, window and a list of replicas need every (a repeating action)")
        if self.every is not None and self.every <= 0:
            raise ValueError("every must be a positive duration")
        if self.until is not None and self.until < self.at:
            raise ValueError("until comes before at")

    def _check_kind_and_patch(self) -> None:
        """kind and patch go with the actions that take them."""
        if self.action == "patch" and (self.kind is None or self.patch is None):
            raise ValueError("patch needs kind and patch")
        if self.action == "scale" and self.kind not in (None, "NodePool"):
            raise ValueError("scale takes kind NodePool or no kind (a workload)")
        if self.action != "patch" and self.patch is not None:
            raise ValueError("only patch takes patch")
        if self.action not in ("patch", "scale") and self.kind is not None:
            raise ValueError("only patch and scale take kind")

    def _check_interrupt(self) -> None:
        """target, notice and via go with interrupt."""
        if self.action == "interrupt" and self.target not in INTERRUPTIBLE:
            raise ValueError(f"interrupt takes a capacity type as target: {sorted(INTERRUPTIBLE)}")
        if self.notice is not None and (self.action != "interrupt" or self.notice <= 0):
            raise ValueError("only interrupt takes notice, a positive duration")
        if self.via is not None and self.action != "interrupt":
            raise ValueError("only interrupt takes via")

    @property
    def count(self) -> int | None:
        """``replicas`` of a single action (a repeating one's list is unrolled by
        ``occurrences``)."""
        if isinstance(self.replicas, list):
            raise ValueError("a list of replicas belongs to a repeating action: unroll it first")
        return self.replicas

    def occurrences(self, end: float) -> list[TimelineAction]:
        """The single actions this one stands for up to ``end`` (itself when it does not repeat),
        each with one ``replicas`` count, ``${n}`` replaced, and no ``every``."""
        if self.every is None:
            return [self] if self.at <= end else []
        last = end if self.until is None else min(end, self.until)
        actions = []
        number = 1
        step = 0
        # Multiplying rather than adding keeps a day of 5m steps free of drift in the float sum.
        while (at := self.at + step * self.every) <= last:
            step += 1
            if self.window is not None and not self.window.admits(at):
                continue
            replicas = self.replicas
            if isinstance(replicas, list):
                replicas = replicas[(number - 1) % len(replicas)]
            patch = None if self.patch is None else _numbered(self.patch, number)
            actions.append(
                self.model_copy(
                    update={
                        "at": at,
                        "replicas": replicas,
                        "patch": patch,
                        "every": None,
                        "until": None,
                        "window": None,
                    }
                )
            )
            number += 1
        return actions


def _numbered(value: Any, number: int) -> Any:
    """``value`` with ``${n}`` replaced by ``number`` in every string of it."""
    if isinstance(value, str):
        return value.replace(REPETITION, str(number))
    if isinstance(value, dict):
        return {key: _numbered(item, number) for key, item in value.items()}
    if isinstance(value, list):
        return [_numbered(item, number) for item in value]
    return value


class SimulatedAzure(_Strict):
    """The simulated Azure (``karpenter_capi.sim.azure``: eastus's VM sizes and retail prices)
    the ``capz`` plugin is enabled over, and the emulated CAPZ's capacity failures."""

    unavailable_sizes: list[str] = Field(default_factory=list)
    """VM sizes Azure cannot allocate: ``Standard_B2s`` anywhere, ``Standard_B2s@1`` in zone 1
    only (the emulation's ``azure_unavailable_sizes``)."""


class FleetGroup(_Strict):
    """Workload clusters of one shape in a fleet scenario: ``count`` of them, named
    ``<name>-1``, ``<name>-2``, ... (``<name>`` alone when ``count`` is 1). Each starts from the
    scenario's catalog with ``catalog``'s fields (the same camelCase names) over it, has its own
    workloads and workload timeline, the ``n``-th cluster's timeline ``stagger`` later than the
    first's."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    count: int = Field(default=1, ge=1, le=500)
    catalog: dict[str, Any] = Field(default_factory=dict)
    machine_pools: bool = False
    """MachinePools (with MachinePool Machines) instead of MachineDeployments."""
    existing_nodes: int = Field(default=0, ge=0)
    """Nodes already there before the controller serves the cluster: a MachineDeployment not
    opted in to Karpenter, of the catalog's first shape, with this many replicas."""
    workloads: list[Workload] = Field(default_factory=list)
    timeline: list[TimelineAction] = Field(default_factory=list)
    stagger: float = 0.0

    _durations = field_validator("stagger", mode="before")(_duration_field)

    def cluster_names(self) -> list[str]:
        if self.count == 1:
            return [self.name]
        return [f"{self.name}-{index}" for index in range(1, self.count + 1)]

    def problems(self, path: str, base: Catalog) -> list[str]:
        """What no single field shows: workload names, actions, the catalog's overrides."""
        problems = []
        try:
            Catalog.model_validate({**base.model_dump(by_alias=True), **self.catalog})
        except ValidationError as exc:
            problems += [f"{path}.catalog.{line}" for line in validation_problems(exc)]
        names = set()
        for index, workload in enumerate(self.workloads):
            if workload.name in names:
                problems.append(f"{path}.workloads[{index}].name: {workload.name!r} is used twice")
            names.add(workload.name)
        for index, action in enumerate(self.timeline):
            where = f"{path}.timeline[{index}]"
            if action.action not in ("scale", "deploy", "delete") or action.kind is not None:
                problems.append(
                    f"{where}.action: a fleet cluster's timeline scales, deploys "
                    "or deletes its workloads"
                )
            elif action.target not in names:
                problems.append(f"{where}.target: no workload named {action.target!r}")
        return problems


class FleetOutage(_Strict):
    """The controller cannot reach workload cluster ``cluster``'s API server from ``at`` to
    ``until`` (the cluster itself keeps running: its users deploy, its scheduler binds)."""

    cluster: str = Field(min_length=1)
    at: float
    until: float

    _durations = field_validator("at", "until", mode="before")(_duration_field)

    @model_validator(mode="after")
    def _ordered(self) -> FleetOutage:
        if self.until <= self.at:
            raise ValueError("until must come after at")
        return self


class FleetSpec(_Strict):
    """A Cluster API fleet: one management cluster and the workload clusters of ``groups``,
    served by one fleet-mode controller (``sim.scenario.fleet``)."""

    groups: list[FleetGroup] = Field(min_length=1)
    outages: list[FleetOutage] = Field(default_factory=list)

    def clusters(self) -> list[tuple[str, FleetGroup, int]]:
        """Every workload cluster: its name, its group, its index in the group (0 first)."""
        return [
            (name, group, index)
            for group in self.groups
            for index, name in enumerate(group.cluster_names())
        ]

    def problems(self, base: Catalog | None) -> list[str]:
        if base is None:
            return ["infrastructure.catalog: a fleet scenario's clusters start from a catalog"]
        problems = []
        seen: set[str] = set()
        for index, group in enumerate(self.groups):
            problems += group.problems(f"fleet.groups[{index}]", base)
            for name in group.cluster_names():
                if name in seen:
                    problems.append(f"fleet.groups[{index}].name: cluster {name!r} is named twice")
                seen.add(name)
        for index, outage in enumerate(self.outages):
            if outage.cluster not in seen:
                problems.append(
                    f"fleet.outages[{index}].cluster: no cluster named {outage.cluster!r}"
                )
        return problems


class Scenario(_Strict):
    """One scenario file."""

    name: str = Field(min_length=1)
    description: str = Field(min_length=1)
    infrastructure: Infrastructure
    azure: SimulatedAzure | None = None
    workloads: list[Workload] = Field(default_factory=list)
    timeline: list[TimelineAction] = Field(default_factory=list)
    fleet: FleetSpec | None = None
    """A fleet of workload clusters (``sim.scenario.fleet``) instead of one cluster: the
    ``infrastructure`` catalog is then every cluster's starting point, and the workloads and
    timeline are each group's."""

    @field_validator("description")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if "\n" in value.strip():
            raise ValueError("the description is one line")
        return value.strip()

    def actions(self, end: float) -> list[TimelineAction]:
        """Every single action up to ``end`` virtual seconds, repetitions unrolled, in time
        order (actions at the same time in file order)."""
        unrolled = [one for action in self.timeline for one in action.occurrences(end)]
        return sorted(unrolled, key=lambda action: action.at)

    def deferred(self) -> set[str]:
        """Workloads a ``deploy`` action creates later (the others exist from the start)."""
        return {a.target for a in self.timeline if a.action == "deploy"}

    def cross_problems(self) -> list[str]:
        """Problems no single field shows: duplicate workloads, actions naming none."""
        problems = []
        if self.fleet is not None:
            if self.workloads or self.timeline:
                problems.append("workloads: a fleet scenario's workloads belong to its groups")
            problems += self.fleet.problems(self.infrastructure.catalog)
        names: set[str] = set()
        for index, workload in enumerate(self.workloads):
            if workload.name in names:
                problems.append(f"workloads[{index}].name: {workload.name!r} is used twice")
            names.add(workload.name)
        for index, action in enumerate(self.timeline):
            if action.kind is None and action.action != "interrupt" and action.target not in names:
                problems.append(f"timeline[{index}].target: no workload named {action.target!r}")
            aws = self.infrastructure.aws
            if action.via == "queue" and (aws is None or aws.interruption_queue is None):
                problems.append(
                    f"timeline[{index}].via: queue needs infrastructure.aws.interruptionQueue "
                    "(the SQS queue the warnings go to)"
                )
        return problems


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate already-parsed YAML; raise ``ScenarioError`` naming every bad path."""
    if not isinstance(data, dict):
        raise ScenarioError(source, ["a scenario is a mapping (name, description, ...)"])
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(source, validation_problems(exc)) from None
    problems = scenario.cross_problems()
    if problems:
        raise ScenarioError(source, problems)
    return scenario


def parse_scenario_text(text: str, source: str = "<scenario>") -> Scenario:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(source, [f"not valid YAML: {exc}"]) from None
    return parse_scenario(data, source)


SHIPPED = Path(__file__).resolve().parent / "shipped"
"""Where the shipped scenario files live (``sim/scenario/shipped``), package data beside the
code that reads them."""


def shipped_scenarios() -> list[str]:
    """Names of the shipped scenarios (files in ``sim/scenario/shipped`` that are scenarios)."""
    return sorted(
        path.stem
        for path in SHIPPED.glob("*.yaml")
        if path.stem != "demo"  # demo.yaml is a manifest file for ``simulate --demo``
    )


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A shipped scenario by name (``basic-1000``), else a scenario file by path."""
    text_name = str(name_or_path)
    if text_name == "demo":
        raise ScenarioError(
            text_name,
            ["the demo is a manifest file, not a scenario: run `karpenter-capi simulate --demo`"],
        )
    candidate = SHIPPED / f"{text_name}.yaml"
    if "/" not in text_name and not text_name.endswith((".yaml", ".yml")) and candidate.exists():
        path = candidate
    else:
        path = Path(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        known = ", ".join(shipped_scenarios())
        raise ScenarioError(
            str(name_or_path), [f"{exc.strerror or exc} (shipped scenarios: {known})"]
        ) from None
    return parse_scenario_text(text, str(path))
