"""Server-side ``Table`` output, which is how ``kubectl get`` asks for its columns.

kubectl sends ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` and prints whatever
columns the server returns, so a simulated cluster that answers plain lists shows nothing but
names. Columns come from the resource's CRD ``additionalPrinterColumns`` (evaluated with a
small JSONPath subset: fields, escaped dots, indexes, ``[*]`` and ``[?(@.x=="y")]`` filters),
or from hand-written rules for the built-ins kubectl users look at most (pods and nodes).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from karpenter_capi.core.clock import parse_timestamp
from karpenter_capi.core.kube.client import JsonObject

if TYPE_CHECKING:
    from karpenter_capi.sim.apiserver.definitions import ResourceDefinition

_NAME_COLUMN: JsonObject = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace.",
    "priority": 0,
}
_AGE_COLUMN: JsonObject = {
    "name": "Age",
    "type": "date",
    "format": "",
    "description": "Time since the object was created.",
    "priority": 0,
}
Cell = Any
CellFunc = Callable[[JsonObject, datetime], Cell]


def wants_table(accept: str) -> bool:
    """Whether the client accepts a ``meta.k8s.io`` Table (kubectl get does)."""
    return "as=Table" in accept


class TableRenderer:
    """Turns objects of one resource into ``meta.k8s.io/v1`` Tables."""

    def __init__(self, now: Callable[[], datetime] | None = None) -> None:
        self._now = now or (lambda: datetime.now(UTC))

    def columns(self, definition: ResourceDefinition) -> list[tuple[JsonObject, CellFunc]]:
        if definition.printer_columns:
            cols: list[tuple[JsonObject, CellFunc]] = [(_NAME_COLUMN, _name_cell)]
            for spec in definition.printer_columns:
                cols.append((_column_definition(spec), _json_path_cell(spec)))
            if not any(str(s.get("name", "")).lower() == "age" for s in definition.printer_columns):
                cols.append((_AGE_COLUMN, _age_cell))
            return cols
        builtin = _BUILTIN_COLUMNS.get((definition.group, definition.plural))
        if builtin is not None:
            return builtin
        return [(_NAME_COLUMN, _name_cell), (_AGE_COLUMN, _age_cell)]

    def render(
        self, definition: ResourceDefinition, objects: list[JsonObject], include_object: str
    ) -> JsonObject:
        columns = self.columns(definition)
        now = self._now()
        return {
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": {},
            "columnDefinitions": [c for c, _ in columns],
            "rows": [_row(obj, columns, now, include_object) for obj in objects],
        }

    def for_watch(self, definition: ResourceDefinition, include_object: str) -> Table:
        return Table(self, definition, include_object)


@dataclass(slots=True)
class Table:
    """The Table encoding of one watch: each event's object becomes a one-row Table."""

    renderer: TableRenderer
    definition: ResourceDefinition
    include_object: str

    def event_object(self, obj: JsonObject) -> JsonObject:
        table = self.renderer.render(self.definition, [obj], self.include_object)
        table["metadata"] = {"resourceVersion": obj.get("metadata", {}).get("resourceVersion")}
        return table


def _row(
    obj: JsonObject, columns: list[tuple[JsonObject, CellFunc]], now: datetime, include: str
) -> JsonObject:
    row: JsonObject = {"cells": [cell(obj, now) for _, cell in columns]}
    if include == "Object":
        row["object"] = obj
    elif include != "None":
        row["object"] = {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata", {}),
        }
    return row


def _column_definition(spec: dict[str, Any]) -> JsonObject:
    return {
        "name": spec.get("name", ""),
        "type": spec.get("type", "string"),
        "format": spec.get("format", ""),
        "description": spec.get("description", ""),
        "priority": int(spec.get("priority", 0)),
    }


# ---------------------------------------------------------------- cells


def human_duration(seconds: float) -> str:
    """kubectl's ``HumanDuration``: 45s, 5m30s, 3h, 2d4h, 400d, 3y12d."""
    if seconds < 0:
        return "<invalid>"
    s = int(seconds)
    minutes, hours, days = s // 60, s // 3600, s // 86400
    if s < 120:
        return f"{s}s"
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 730:
        return f"{days}d"
    years = days // 365
    if years < 8:
        return f"{years}y{days % 365}d" if days % 365 else f"{years}y"
    return f"{years}y"


def _age_since(timestamp: Any, now: datetime) -> str:
    if not isinstance(timestamp, str) or not timestamp:
        return "<unknown>"
    try:
        created = parse_timestamp(timestamp)
    except ValueError:
        return "<unknown>"
    return human_duration((now - created).total_seconds())


def _name_cell(obj: JsonObject, _now: datetime) -> Cell:
    return obj.get("metadata", {}).get("name", "")


def _age_cell(obj: JsonObject, now: datetime) -> Cell:
    return _age_since(obj.get("metadata", {}).get("creationTimestamp"), now)


def _json_path_cell(spec: dict[str, Any]) -> CellFunc:
    path = JsonPath(str(spec.get("jsonPath", "")))
    kind = str(spec.get("type", "string"))

    def cell(obj: JsonObject, now: datetime) -> Cell:
        values = path.find(obj)
        if not values:
            return None
        value = values[0]
        if kind == "date":
            return _age_since(value, now)
        if kind == "integer":
            return value if isinstance(value, int) and not isinstance(value, bool) else None
        if kind == "number":
            return value if isinstance(value, int | float) and not isinstance(value, bool) else None
        if kind == "boolean":
            return value if isinstance(value, bool) else None
        if isinstance(value, str):
            return value
        return json.dumps(value, separators=(",", ":"))

    return cell


def _pod_cells() -> list[tuple[JsonObject, CellFunc]]:
    def ready(pod: JsonObject, _now: datetime) -> Cell:
        statuses = pod.get("status", {}).get("containerStatuses") or []
        total = len(pod.get("spec", {}).get("containers") or [])
        return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"

    def status(pod: JsonObject, _now: datetime) -> Cell:
        if pod.get("metadata", {}).get("deletionTimestamp"):
            return "Terminating"
        pod_status = pod.get("status", {})
        for container in pod_status.get("containerStatuses") or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason"):
                return waiting["reason"]
        return pod_status.get("reason") or pod_status.get("phase") or "Pending"

    def restarts(pod: JsonObject, _now: datetime) -> Cell:
        statuses = pod.get("status", {}).get("containerStatuses") or []
        return sum(int(s.get("restartCount", 0)) for s in statuses)

    def ip(pod: JsonObject, _now: datetime) -> Cell:
        return pod.get("status", {}).get("podIP") or "<none>"

    def node(pod: JsonObject, _now: datetime) -> Cell:
        return pod.get("spec", {}).get("nodeName") or "<none>"

    return [
        (_NAME_COLUMN, _name_cell),
        (_column("Ready", "string", "The aggregate readiness state of this pod."), ready),
        (_column("Status", "string", "The aggregate status of the containers."), status),
        (_column("Restarts", "string", "The number of times the containers restarted."), restarts),
        (_AGE_COLUMN, _age_cell),
        (_column("IP", "string", "IP address assigned to the pod.", 1), ip),
        (_column("Node", "string", "Name of the Node this pod is bound to.", 1), node),
    ]


def _node_status_cell(node: JsonObject, _now: datetime) -> Cell:
    """kubectl's node STATUS: Ready, NotReady or Unknown, and whether it is cordoned."""
    state = "Unknown"
    for condition in node.get("status", {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            state = "Ready" if condition.get("status") == "True" else "NotReady"
    if node.get("spec", {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    return state


def _node_internal_ip_cell(node: JsonObject, _now: datetime) -> Cell:
    for address in node.get("status", {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return address.get("address")
    return "<none>"


def _node_cells() -> list[tuple[JsonObject, CellFunc]]:
    def roles(node: JsonObject, _now: datetime) -> Cell:
        prefix = "node-role.kubernetes.io/"
        labels = node.get("metadata", {}).get("labels") or {}
        found = sorted(k[len(prefix) :] for k in labels if k.startswith(prefix))
        return ",".join(r for r in found if r) or "<none>"

    def version(node: JsonObject, _now: datetime) -> Cell:
        return node.get("status", {}).get("nodeInfo", {}).get("kubeletVersion", "")

    def instance_type(node: JsonObject, _now: datetime) -> Cell:
        labels = node.get("metadata", {}).get("labels") or {}
        return labels.get("node.kubernetes.io/instance-type", "<none>")

    return [
        (_NAME_COLUMN, _name_cell),
        (_column("Status", "string", "The status of the node."), _node_status_cell),
        (_column("Roles", "string", "The roles of the node."), roles),
        (_AGE_COLUMN, _age_cell),
        (_column("Version", "string", "Kubelet Version reported by the node."), version),
        (_column("Internal-IP", "string", "The node's internal IP.", 1), _node_internal_ip_cell),
        (_column("Instance-Type", "string", "The node's instance type.", 1), instance_type),
    ]


def _column(name: str, kind: str, description: str, priority: int = 0) -> JsonObject:
    return {
        "name": name,
        "type": kind,
        "format": "",
        "description": description,
        "priority": priority,
    }


_BUILTIN_COLUMNS: dict[tuple[str, str], list[tuple[JsonObject, CellFunc]]] = {
    ("", "pods"): _pod_cells(),
    ("", "nodes"): _node_cells(),
}


# ---------------------------------------------------------------- JSONPath subset

_FILTER = re.compile(
    r"""^\?\(\s*@((?:\.[\w\-/\\.]+)*)\s*(?:(==|!=)\s*(?:"([^"]*)"|'([^']*)'|([^)\s]+)))?\s*\)$"""
)


@dataclass(frozen=True, slots=True)
class _Step:
    kind: str  # "field", "index", "all", "filter"
    key: str = ""
    index: int = 0
    filter_path: tuple[str, ...] = ()
    op: str = ""
    operand: Any = None


class JsonPath:
    """The JSONPath subset CRD printer columns use.

    For example ``.status.conditions[?(@.type=="Ready")].status`` or
    ``.metadata.labels.karpenter\\.sh/nodepool``.
    """

    def __init__(self, expression: str) -> None:
        text = expression.strip()
        if text.startswith("{") and text.endswith("}"):
            text = text[1:-1]
        self.expression = expression
        self._steps = _parse(text)

    def find(self, obj: Any) -> list[Any]:
        values = [obj]
        for step in self._steps:
            values = [out for value in values for out in _apply(step, value)]
        return values


def _parse(text: str) -> list[_Step]:
    steps: list[_Step] = []
    i = 0
    if text.startswith("$"):
        i = 1
    while i < len(text):
        char = text[i]
        if char == ".":
            i += 1
            key: list[str] = []
            while i < len(text) and text[i] not in ".[":
                if text[i] == "\\" and i + 1 < len(text):
                    i += 1
                key.append(text[i])
                i += 1
            if key:
                steps.append(_Step("field", key="".join(key)))
        elif char == "[":
            end = _closing_bracket(text, i)
            steps.append(_bracket(text[i + 1 : end].strip()))
            i = end + 1
        else:
            raise ValueError(f"unsupported JSONPath {text!r} at {i}")
    return steps


def _closing_bracket(text: str, start: int) -> int:
    depth, quote = 0, ""
    for j in range(start, len(text)):
        char = text[j]
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth == 0:
                return j
    raise ValueError(f"unbalanced [ in JSONPath {text!r}")


def _bracket(inner: str) -> _Step:
    if inner == "*":
        return _Step("all")
    if inner.lstrip("-").isdigit():
        return _Step("index", index=int(inner))
    if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
        return _Step("field", key=inner[1:-1])
    match = _FILTER.match(inner)
    if match is None:
        raise ValueError(f"unsupported JSONPath filter [{inner}]")
    path_text, op, dq, sq, bare = match.groups()
    path = tuple(s.key for s in _parse(path_text or ""))
    operand: Any = dq if dq is not None else sq
    if operand is None and bare is not None:
        try:
            operand = json.loads(bare)
        except ValueError:
            operand = bare
    return _Step("filter", filter_path=path, op=op or "", operand=operand)


def _apply(step: _Step, value: Any) -> list[Any]:
    if step.kind == "field":
        if isinstance(value, dict) and step.key in value:
            return [value[step.key]]
        return []
    if step.kind == "index":
        if isinstance(value, list) and -len(value) <= step.index < len(value):
            return [value[step.index]]
        return []
    if step.kind == "all":
        if isinstance(value, list):
            return list(value)
        return list(value.values()) if isinstance(value, dict) else []
    items = value if isinstance(value, list) else []
    return [item for item in items if _matches(step, item)]


def _matches(step: _Step, item: Any) -> bool:
    current: Any = item
    for key in step.filter_path:
        if not isinstance(current, dict) or key not in current:
            return False
        current = current[key]
    if not step.op:
        return True
    equal = current == step.operand or str(current) == str(step.operand)
    return equal if step.op == "==" else not equal
