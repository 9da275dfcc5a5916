"""``benchmarks/realapi.py`` at a small size: the controller as ``karpenter-capi run`` in its
own process, over HTTP, against the emulated control plane and Cluster API.

The benchmark's figures are wall-clock and not asserted; what a user would notice is: every
pod bound, no node bought that holds none of them, the NodeClaims of one round asked for in one
go (one create each, no retries), and the controller's own requests counted.
"""

from __future__ import annotations

from benchmarks import realapi


def test_26_pods_are_all_bound_on_nodes_that_each_hold_some() -> None:
    figures = realapi.run(pods=26, boot_delay=1.0, timeout=120.0)
    assert figures["bound"] == figures["pods"] == 26
    assert figures["nodes"] == figures["nodeclaims"] > 0
    assert figures["empty_nodes"] == 0
    assert figures["requests_by_verb"]["create nodeclaims"] == figures["nodeclaims"]
    assert figures["controller_requests"] > 0
    assert figures["controller_peak_rss_mb"] > 0
    # The scale-up's CPU by thread: the provisioner's rounds show, and the threads together
    # account for the process's CPU (``(other)``: what none of them does, to a clock tick).
    by_thread = figures["controller_cpu_s_by_thread"]
    assert by_thread["periodic-provisioner"] > 0
    assert abs(by_thread["(other)"]) <= 0.1
