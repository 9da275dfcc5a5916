"""``benchmarks/fleet.py --controller-arg``: extra flags for the controller's command line (http
mode), e.g. ``--batch-complete-idle-duration=-1`` for Karpenter's own batch window."""

from __future__ import annotations

import argparse

import pytest

from benchmarks import fleet, fleet_http


def test_controller_args_come_last_on_every_controllers_command_line() -> None:
    args = argparse.Namespace(
        workers=2, fleet_workers=8, controller_arg=["--batch-complete-idle-duration=-1"]
    )
    assert fleet_http._controller_flags(args) == [
        "--workers",
        "2",
        "--fleet-workers",
        "8",
        "--batch-complete-idle-duration=-1",
    ]
    plain = argparse.Namespace(workers=2, fleet_workers=8, controller_arg=[])
    assert fleet_http._controller_flags(plain) == ["--workers", "2", "--fleet-workers", "8"]


def test_controller_args_are_refused_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        fleet.main(["--mode", "inprocess", "--controller-arg=--batch-complete-idle-duration=-1"])
    assert "only http mode" in capsys.readouterr().err
