"""``benchmarks/controller_process.py``: a benchmark stopped by SIGTERM stops its controller.

Python's default for SIGTERM ends the process at once, past the ``finally`` that stops the
controller it started; a killed ``realapi.py`` left its controller running, busy, for 24
minutes beside later runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_sigterm_runs_the_benchmarks_finally_blocks(tmp_path: Path) -> None:
    marker = tmp_path / "stopped"
    script = textwrap.dedent(
        f"""
        import os, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from benchmarks.controller_process import stop_on_sigterm
        stop_on_sigterm()
        try:
            print("ready", flush=True)
            time.sleep(60)
        finally:
            open({str(marker)!r}, "w").write("stopped")
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, env={**os.environ}
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == b"ready"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 128 + signal.SIGTERM
    assert marker.read_text() == "stopped"
