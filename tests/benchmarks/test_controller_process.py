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


def test_reconcile_seconds_are_read_per_cluster_and_the_extra_one_set_apart() -> None:
    """What ``fleet.py`` reports as each cluster's hold on the workers over the waves."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from benchmarks.controller_process import reconcile_seconds
    from benchmarks.fleet_http import _held

    text = (
        b'controller_runtime_reconcile_time_seconds_sum{cluster="c-1/c-1",controller="a"} 1.5\n'
        b'controller_runtime_reconcile_time_seconds_sum{cluster="c-1/c-1",controller="b"} 0.5\n'
        b'controller_runtime_reconcile_time_seconds_sum{cluster="c-2/c-2",controller="a"} 3.0\n'
        b'controller_runtime_reconcile_time_seconds_sum{cluster="c-3/c-3",controller="a"} 0.25\n'
        b'controller_runtime_reconcile_time_seconds_count{cluster="c-3/c-3",controller="a"} 9\n'
    )

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, *_args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Metrics)
    thread = threading.Thread(target=server.handle_request, daemon=True)
    thread.start()
    try:
        after = reconcile_seconds(server.server_address[1])
    finally:
        thread.join(10)
        server.server_close()
    assert after == {"c-1/c-1": 2.0, "c-2/c-2": 3.0, "c-3/c-3": 0.25}
    before = {"c-1/c-1": 1.0, "c-2/c-2": 1.0, "c-3/c-3": 0.0}
    held = _held(before, after, ["c-3"])
    assert held == {"extra_cluster": 0.25, "others_median": 2.0, "others_max": 2.0}
