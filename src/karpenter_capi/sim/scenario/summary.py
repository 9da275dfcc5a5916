"""The summary ``simulate SCENARIO`` prints at the end of a run: a few aligned tables.

A newcomer running ``make run`` should see at a glance what the autoprovisioner bought and
why it cost what it did (nodes by instance type and capacity type, with prices), how fast
pods got a node, what was disrupted and how hard the controllers worked the API server. The
JSON output carries the same figures for machines; this is for people, so it is plain text
in aligned columns that fit 100 columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from karpenter_capi.sim.scenario.result import ScenarioResult

WIDTH = 100
_GAP = "  "


def table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool]) -> str:
    """Aligned columns: text left, numbers right; cells too wide for 100 columns are cut."""
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    spare = WIDTH - sum(widths) - len(_GAP) * (len(widths) - 1)
    if spare < 0:  # shrink the first (the only free-text) column
        widths[0] = max(len(header[0]), widths[0] + spare)
    lines = []
    for row in [list(header), *rows]:
        cells = []
        for cell, width, right in zip(row, widths, numeric, strict=True):
            text = cell if len(cell) <= width else cell[: width - 1] + "~"
            cells.append(text.rjust(width) if right else text.ljust(width))
        lines.append(_GAP.join(cells).rstrip())
    return "\n".join(lines)


def _money(value: float) -> str:
    return f"${value:,.4f}"


def _seconds(value: float) -> str:
    return f"{value:g} s"


def _capacity(result: ScenarioResult) -> str:
    if not result.capacity:
        return "no nodes at the end"
    rows = [
        [
            row.instance_type,
            row.capacity_type,
            str(row.count),
            _money(row.price_per_hour),
            _money(row.cost_per_hour),
        ]
        for row in result.capacity
    ]
    total = sum(row.count for row in result.capacity)
    rows.append(["total", "", str(total), "", _money(result.cost_per_hour)])
    header = ["instance type", "capacity", "nodes", "price/h each", "cost/h"]
    return table(header, rows, [False, False, True, True, True])


def _counts(title: str, counts: dict[str, int], key: str) -> str:
    if not counts:
        return f"{title}: none"
    rows = [[name, f"{count:,}"] for name, count in sorted(counts.items(), key=lambda i: -i[1])]
    if len(rows) > 1:
        rows.append(["total", f"{sum(counts.values()):,}"])
    return f"{title}:\n" + table([key, "count"], rows, [False, True])


def _polls(result: ScenarioResult) -> str:
    if not result.watch_polls:
        return ""
    return f"\n(not counted: {result.watch_polls:,} watch polls, the stepped informers' drains)"


def _violations(result: ScenarioResult, limit: int = 20) -> str:
    """What ``simulate --check`` found (``sim.invariants``); nothing when not asked."""
    if result.violations is None:
        return ""
    if not result.violations:
        return "\ninvariants: all hold"
    lines = [f"\ninvariants: {len(result.violations)} violation(s)"]
    lines.extend(f"  {violation[: WIDTH - 2]}" for violation in result.violations[:limit])
    if len(result.violations) > limit:
        lines.append(f"  ... and {len(result.violations) - limit} more (--json lists them all)")
    return "\n".join(lines)


def _errors(result: ScenarioResult, limit: int = 20) -> str:
    if not result.errors:
        return "errors: none"
    lines = [f"errors: {len(result.errors)}"]
    lines.extend(f"  {error[: WIDTH - 2]}" for error in result.errors[:limit])
    if len(result.errors) > limit:
        lines.append(f"  ... and {len(result.errors) - limit} more (--json lists them all)")
    return "\n".join(lines)


def _beyond_plan(result: ScenarioResult) -> str:
    """NodeClaims launched again for pods the scheduler stranded (``sim.scenario.plans``)."""
    beyond = result.beyond_plan
    if not beyond.nodeclaims_beyond_plan and not beyond.pods_stranded:
        return "launches beyond the plan: none"
    claims = beyond.nodeclaims_beyond_plan
    pods = beyond.pods_stranded
    return (
        f"launches beyond the plan: {claims:,} NodeClaim{'s' if claims != 1 else ''} for "
        f"{pods:,} stranded pod{'s' if pods != 1 else ''} (planned onto a NodeClaim still "
        "alive, then planned again)"
    )


def _repacking(result: ScenarioResult) -> str:
    figures = result.repacking
    if not figures or not figures.get("rounds"):
        return "re-packing: did not run"
    outcomes = ", ".join(f"{name} {count}" for name, count in sorted(figures["by_outcome"].items()))
    return (
        f"re-packing: {figures['rounds']} round(s) ({outcomes}); saved "
        f"{_money(figures['saved_per_hour'])}/h against greedy's plans\n"
        f"  last: {figures['last_reason']}"
    )


def _launch_rounds(result: ScenarioResult) -> str:
    figures = result.launch_rounds
    if not figures or not figures.get("rounds"):
        return "launch rounds: none"
    writes = figures.get("replica_writes_per_resource") or {}
    last = figures.get("last_provider_id_seconds") or {}
    spread = figures.get("provider_id_spread_seconds") or {}
    rows = [
        [
            "replica writes per resource and round",
            f"mean {writes['mean']:g}   max {writes['max']:g}" if writes else "-",
        ],
        [
            "round start to its last provider ID",
            f"p50 {_seconds(last['p50'])}   max {_seconds(last['max'])}" if last else "-",
        ],
        [
            "first to last provider ID of a round",
            f"max {_seconds(spread['max'])}" if spread else "-",
        ],
    ]
    return (
        f"launch rounds: {figures['rounds']}\n"
        + table(["", ""], rows, [False, False]).split("\n", 1)[1]
    )


def _writes(result: ScenarioResult) -> str:
    writes = result.controller_writes
    if not writes:
        return "controller writes: not counted"
    per_node = writes.get("per_launched_node")
    launched = writes.get("launched_nodes", 0)
    pools = writes.get("machine_pools_created", 0)
    return (
        f"controller writes: {writes.get('total', 0):,}"
        + (f", {per_node:g} per launched node ({launched:,} launched)" if per_node else "")
        + (f"; {pools:,} MachinePool{'s' if pools != 1 else ''} created" if pools else "")
    )


def _native_launch(result: ScenarioResult) -> str | None:
    """EC2 Fleet figures of a scenario on the emulated AWS (``sim.scenario.aws``)."""
    figures = result.native_launch
    if not figures:
        return None
    rows = [
        [
            "Fleet calls per launched node",
            f"{figures['fleet_calls_per_node']:g} ({figures['fleet_calls']} calls, "
            f"{figures['fleet_capacity_errors']} refused for capacity, "
            f"{figures['nodes_launched']} nodes)",
        ],
        [
            "EC2 writes per launched node",
            f"{figures.get('ec2_writes_per_node', 0):g} ("
            + ", ".join(f"{n} {op}" for op, n in (figures.get("ec2_writes") or {}).items())
            + ")",
        ],
        [
            "controller's Kubernetes writes per launched node",
            f"{figures['kube_writes_per_node']:g} ({figures['kube_writes']} writes)",
        ],
        [
            "EC2 instances at the end",
            f"{figures['instances_live']} live, {figures['instances_terminated']} terminated, "
            f"{figures['instances_launched_by_capa']} launched by CAPA itself",
        ],
    ]
    return "native launch (EC2 Fleet):\n" + table(["", ""], rows, [False, False]).split("\n", 1)[1]


def _spot_interruption(result: ScenarioResult) -> str | None:
    """How the interrupted Nodes were replaced (``sim.scenario.interruptions``)."""
    f = result.spot_interruption
    if not f:
        return None
    boot = f["replacement_boot_seconds"]
    ready = f["replacement_ready_after_notice_seconds"]
    rows = [
        [
            "nodes interrupted",
            f"{f['nodes_interrupted']} ({f['nodes_gone_before_deadline']} drained and gone "
            "before the deadline)",
        ],
        [
            "replacement Ready",
            "never"
            if ready is None
            else f"{ready:g} s after the notice"
            + (" (before the deadline)" if f["replacement_ready_before_deadline"] else " (LATE)"),
        ],
        ["replacement boot", "-" if boot is None else f"{boot:g} s ({f['replacements']} nodes)"],
        [
            "pods with no place to go longer than the boot",
            f"{f['pods_without_place']} of {f['pods_moved']} moved "
            f"(longest wait {f['pods_waited_max_seconds']:g} s)",
        ],
    ]
    if "queue_messages_left" in f:
        rows.append(["interruption queue", f"{f['queue_messages_left']} messages left"])
    return "spot interruption:\n" + table(["", ""], rows, [False, False]).split("\n", 1)[1]


def render_summary(result: ScenarioResult) -> str:
    """The whole summary, ending with a newline."""
    bound = result.pod_bound_seconds
    latency = (
        "   ".join(f"{name} {_seconds(bound[name])}" for name in ("p50", "p95", "max"))
        if bound
        else "no pod bound"
    )
    overview = table(
        ["", ""],
        [
            [
                "pods",
                f"{result.pods_bound} bound, {result.pods_pending} pending, "
                f"{result.pods_total} in all",
            ],
            ["nodes", f"{result.nodes} (NodeClaims: {result.nodeclaims})"],
            [
                "cost per hour",
                f"{_money(result.cost_per_hour)} now, {_money(result.cost_per_hour_peak)} at peak",
            ],
            ["pod creation to bound", latency],
        ],
        [False, False],
    ).split("\n", 1)[1]
    sections = [
        f"scenario {result.scenario}: {result.virtual_seconds:g} s of virtual time in "
        f"{result.wall_seconds:.1f} s wall",
        overview,
        _capacity(result),
        _beyond_plan(result),
        _repacking(result),
        _launch_rounds(result),
        _writes(result),
        *filter(None, [_native_launch(result), _spot_interruption(result)]),
        _counts("disruptions by reason", result.disruptions, "reason"),
        _counts("API requests by verb", result.api_requests, "verb") + _polls(result),
        _errors(result) + _violations(result),
    ]
    return "\n\n".join(sections) + "\n"
