"""What a person sees: the end-of-run summary, the live progress line, and realtime pacing."""

from __future__ import annotations

import io

from karpenter_capi.sim.scenario.pacing import WallClockPacer
from karpenter_capi.sim.scenario.progress import ProgressLine, progress_line, render_progress
from karpenter_capi.sim.scenario.result import CapacityRow, Sample, ScenarioResult


def _result(**overrides: object) -> ScenarioResult:
    fields: dict[str, object] = {
        "scenario": "demo-run",
        "pods_total": 1000,
        "pods_bound": 990,
        "pods_pending": 10,
        "nodes": 76,
        "nodeclaims": 77,
        "cost_per_hour": 12.3,
        "cost_per_hour_peak": 15.25,
        "pod_bound_seconds": {"p50": 16.0, "p95": 32.5, "max": 61.0},
        "virtual_seconds": 600.0,
        "wall_seconds": 7.46,
        "capacity": [
            CapacityRow("m-16x-amd64-linux-with-a-rather-long-name", "on-demand", 40, 0.25),
            CapacityRow("c-4x-arm64-linux", "spot", 37, 0.0756),
        ],
        "disruptions": {"Empty": 3, "Drifted": 1},
        "api_requests": {"watch": 30278, "patch/status": 5143, "get": 541},
        "watch_polls": 12345,
        "errors": ["controller provisioning: 2x Boom: it broke"],
    }
    fields.update(overrides)
    return ScenarioResult(**fields)  # type: ignore[arg-type]


def _row(text: str, first: str) -> list[str]:
    return next(line.split() for line in text.splitlines() if line.startswith(first))


def test_the_summary_has_every_figure_in_tables_that_fit_100_columns() -> None:
    text = _result().summary()
    assert all(len(line) <= 100 for line in text.splitlines())
    assert "990 bound, 10 pending, 1000 in all" in text
    assert "$12.3000 now, $15.2500 at peak" in text
    assert "p50 16 s   p95 32.5 s   max 61 s" in text
    assert _row(text, "c-4x-arm64-linux") == [
        "c-4x-arm64-linux",
        "spot",
        "37",
        "$0.0756",
        "$2.7972",
    ]
    assert _row(text, "total") == ["total", "77", "$12.3000"]
    assert _row(text, "Empty") == ["Empty", "3"]
    assert _row(text, "Drifted") == ["Drifted", "1"]
    assert _row(text, "watch") == ["watch", "30,278"]
    assert _row(text, "patch/status") == ["patch/status", "5,143"]
    assert "(not counted: 12,345 watch polls, the stepped informers' drains)" in text
    assert "errors: 1\n  controller provisioning: 2x Boom: it broke" in text


def test_summary_columns_line_up() -> None:
    text = _result().summary()
    header = next(line for line in text.splitlines() if line.startswith("instance type"))
    rows = [line for line in text.splitlines() if "linux" in line]
    # Numbers are right-aligned under their header: every row ends where the header ends.
    assert {len(row) for row in rows} == {len(header)}


def test_a_quiet_run_says_none_rather_than_printing_empty_tables() -> None:
    text = _result(capacity=[], disruptions={}, api_requests={}, errors=[]).summary()
    assert "no nodes at the end" in text
    assert "disruptions by reason: none" in text
    assert "API requests by verb: none" in text
    assert text.endswith("errors: none\n")


def _sample(at: float = 135.0) -> Sample:
    return Sample(
        at=at,
        pods_pending=4,
        pods_bound=11,
        nodes=3,
        nodeclaims=4,
        cost_per_hour=0.556,
        nodeclaims_by_state={"launching": 1, "registered": 1, "initialized": 2, "deleting": 0},
        disruptions={"Empty": 2},
    )


def test_the_progress_line_shows_time_pods_nodes_states_and_cost() -> None:
    line = render_progress(_sample(), width=200)
    assert line == (
        "0:02:15  pods 4 pending, 11 bound  nodes 3  $0.56/h  "
        "NodeClaims 1 launching, 1 registered, 2 initialized  disrupted 2"
    )
    # Cut to the terminal's width; the figures that matter most come first.
    assert (
        render_progress(_sample(), width=51)
        == "0:02:15  pods 4 pending, 11 bound  nodes 3  $0.56/h"
    )


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_line_redraws_in_place_a_few_times_a_second_and_clears() -> None:
    now = [0.0]
    terminal = _Terminal()
    line = ProgressLine(terminal, interval=0.2, monotonic=lambda: now[0], width=lambda: 200)
    line(_sample(15))
    now[0] = 0.1
    line(_sample(30))  # too soon: skipped
    now[0] = 0.25
    line(_sample(45))
    line.clear()
    drawn = terminal.getvalue()
    assert drawn.count("\r\x1b[K") == 3
    assert "0:00:15" in drawn
    assert "0:00:30" not in drawn
    assert "0:00:45" in drawn
    assert drawn.endswith("\r\x1b[K")  # the summary starts on a clean line


def test_no_progress_line_unless_a_terminal_gets_human_output() -> None:
    assert progress_line(io.StringIO(), json_output=False) is None
    assert progress_line(_Terminal(), json_output=True) is None
    assert progress_line(_Terminal(), json_output=False) is not None


def test_the_pacer_sleeps_until_wall_time_catches_up_with_virtual_time() -> None:
    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    pacer = WallClockPacer(2.0, monotonic=lambda: now[0], sleep=sleep)
    pacer(0)  # the run's loop starts
    pacer(10)  # 10 virtual seconds at 2x = 5 wall seconds
    assert slept == [5.0]
    now[0] += 20  # the run fell behind: no sleeping until it is ahead again
    pacer(20)
    assert slept == [5.0]
    pacer(60)
    assert slept == [5.0, 5.0]


def test_the_pacers_wall_clock_starts_at_its_first_call_not_when_it_is_built() -> None:
    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    pacer = WallClockPacer(10.0, monotonic=lambda: now[0], sleep=sleep)
    now[0] += 30  # setup (CRDs, plugins, the first settle) took 30 wall seconds
    pacer(0)
    assert slept == []
    pacer(20)  # 20 virtual seconds at 10x: 2 wall seconds, though 30 passed since it was built
    assert slept == [2.0]
    now[0] += 0.5
    pacer(30)  # due at 3 s after the start; 2.5 s have passed
    assert slept == [2.0, 0.5]


def test_a_pacer_first_called_mid_run_paces_from_there() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    pacer = WallClockPacer(1.0, monotonic=lambda: now[0], sleep=sleep)
    pacer(60)
    pacer(61)
    assert slept == [1.0]
