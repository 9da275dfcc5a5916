"""``karpenter-capi simulate SCENARIO``: the default scenario, the summary, progress, pacing."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from karpenter_capi.cli import main
from karpenter_capi.sim.scenario import pacing


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_simulate_without_a_scenario_runs_the_default_one_with_every_json_field() -> None:
    out = io.StringIO()
    assert main(["simulate", "--until", "3m", "--json"], out=out) == 0
    result = json.loads(out.getvalue())
    assert result["scenario"] == "scale-from-zero"
    assert result["pods_bound"] == result["pods_total"] > 0
    assert all(isinstance(n, int) and n > 0 for n in result["disruptions"].values())
    assert result["api_requests"]["create"] > 0
    assert "watch" not in result["api_requests"]  # the stepped informers only poll:
    assert result["watch_polls"] > 0  # their zero-timeout drains are reported apart
    assert sum(row["count"] for row in result["capacity"]) == result["nodeclaims"]
    last = result["samples"][-1]
    assert last["nodeclaims_by_state"]["initialized"] == result["nodeclaims"]
    assert sum(last["nodes_by_instance_type"].values()) == result["nodes"]


def test_the_summary_is_printed_without_progress_when_stdout_is_not_a_terminal() -> None:
    out = io.StringIO()
    # 40 s: every pod bound, before consolidateAfter (30 s after binding) lets anything go.
    assert main(["simulate", "scale-from-zero", "--until", "40s"], out=out) == 0
    text = out.getvalue()
    assert "\r" not in text
    assert text.startswith("scenario scale-from-zero: 40 s of virtual time")
    for heading in ("instance type", "disruptions by reason: none", "API requests by verb:"):
        assert heading in text
    assert text.endswith("errors: none\n")


def test_on_a_terminal_progress_is_drawn_then_erased_before_the_summary() -> None:
    out = _Terminal()
    assert main(["simulate", "scale-from-zero", "--until", "2m"], out=out) == 0
    text = out.getvalue()
    progress, _, summary = text.rpartition("\r\x1b[K")
    assert "pods " in progress
    assert "NodeClaims" in progress
    assert summary.startswith("scenario scale-from-zero:")
    assert "\r" not in summary


def test_speed_paces_virtual_time_through_the_wall_clock_pacer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[Any] = []
    paced: list[float] = []

    class Recording(pacing.WallClockPacer):
        def __init__(self, speed: float = 1.0, **kwargs: Any) -> None:
            super().__init__(speed, **kwargs)
            made.append(self)

        def __call__(self, virtual_seconds: float) -> None:
            paced.append(virtual_seconds)

    monkeypatch.setattr(pacing, "WallClockPacer", Recording)
    out = io.StringIO()
    argv = ["simulate", "scale-from-zero", "--until", "1m", "--speed", "30", "--json"]
    assert main(argv, out) == 0
    assert [pacer.speed for pacer in made] == [30.0]
    assert paced == sorted(paced)
    assert paced[0] == 0  # once setup is done: the pacer's wall clock starts there
    assert paced[-1] == 60
    result = json.loads(out.getvalue())
    # At 30x, a sample every 15 virtual seconds moves the progress line twice a wall second.
    assert [s["at"] for s in result["samples"]][:3] == [0, 15, 30]


def test_setup_time_does_not_count_against_the_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    class Faked(pacing.WallClockPacer):
        def __init__(self, speed: float = 1.0, **kwargs: Any) -> None:
            super().__init__(speed, monotonic=lambda: now[0], sleep=sleep)
            now[0] += 1000  # built before the run; its setup then takes long

    monkeypatch.setattr(pacing, "WallClockPacer", Faked)
    argv = ["simulate", "scale-from-zero", "--until", "1m", "--speed", "30", "--json"]
    assert main(argv, io.StringIO()) == 0
    # 60 virtual seconds at 30x: 2 wall seconds slept, the first step included.
    assert sum(slept) == pytest.approx(2.0)
    assert slept[0] == pytest.approx(0.1)  # pace_step 3 at 30x


def test_realtime_is_speed_one(monkeypatch: pytest.MonkeyPatch) -> None:
    speeds: list[float] = []

    class Recording(pacing.WallClockPacer):
        def __call__(self, virtual_seconds: float) -> None:
            speeds.append(self.speed)

    monkeypatch.setattr(pacing, "WallClockPacer", Recording)
    out = io.StringIO()
    assert main(["simulate", "scale-from-zero", "--until", "5s", "--realtime", "--json"], out) == 0
    assert set(speeds) == {1.0}
    assert [s["at"] for s in json.loads(out.getvalue())["samples"]] == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--demo", "--realtime"], "pace a SCENARIO"),
        (["scale-from-zero", "--realtime", "--speed", "2"], "--realtime is --speed 1"),
        (["scale-from-zero", "--speed", "0"], "must be a positive number"),
    ],
)
def test_bad_pacing_options_are_one_line_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", *argv]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert message in err[0]
