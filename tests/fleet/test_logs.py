"""Every line a fleet member's controllers log names the workload cluster it concerns."""

from __future__ import annotations

import io
import json
import logging
import threading

from karpenter_capi.core.observability.logs import configure_logging, log_fields
from tests.fleet.world import FleetWorld, until


def test_a_members_decision_lines_carry_its_cluster(world: FleetWorld) -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    level = root.level
    handler = configure_logging("json", "INFO", stream)
    try:
        world.add_cluster("alpha")
        world.add_cluster("beta")
        world.start()
        world.deploy("alpha", "web", 3)
        world.deploy("beta", "api", 3)
        assert until(world, lambda: world.bound("alpha") == 3 and world.bound("beta") == 3)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    created = [line for line in lines if line["message"] == "created nodeclaim"]
    # Each cluster's own NodeClaims, and no decision line without its cluster.
    assert {line.get("cluster") for line in created} == {world.key("alpha"), world.key("beta")}


def test_fields_stay_in_their_thread_and_block() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    level = root.level
    handler = configure_logging("text", "INFO", stream)
    log = logging.getLogger("karpenter_capi.test")
    try:
        with log_fields({"cluster": "team-a/alpha"}):
            log.info("inside")
            # A thread started here does not inherit the block: the runtime sets it per thread.
            thread = threading.Thread(target=lambda: log.info("other thread"))
            thread.start()
            thread.join()
            log.info("own extra wins", extra={"cluster": "explicit"})
        log.info("outside")
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("inside cluster=team-a/alpha")
    assert lines[1].endswith("other thread")
    assert lines[2].endswith("own extra wins cluster=explicit")
    assert lines[3].endswith("outside")
