"""The stand-in's pod status writes take the in-memory server's answer ``shared`` (the stored
object itself, no copy): it only reads what a write returns. Stored objects must then stay
exactly as written; this catches the stand-in (or anything it hands the answer to) changing
one. (A binding answers a Status, not the pod: nothing to share.)"""

from __future__ import annotations

from typing import Any

import orjson

from karpenter_capi.core.kube import PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from tests.sim.scheduler.harness import new_sim


def test_the_pods_the_scheduler_writes_stay_as_stored() -> None:
    sim = new_sim()
    answers: list[tuple[Any, bytes]] = []
    patch = InMemoryAPIServer.patch

    def recording(*args: Any, **kwargs: Any) -> Any:
        answer = patch(sim.api, *args, **kwargs)
        if kwargs.get("shared"):
            answers.append((answer, orjson.dumps(answer)))
        return answer

    sim.api.patch = recording  # type: ignore[method-assign]
    sim.node("n1", cpu="1")
    sim.pod("fits", cpu="500m")
    sim.pod("too-big", cpu="2")
    sim.settle()
    assert sim.node_of("fits") == "n1"
    too_big = sim.scheduled("too-big")
    assert too_big is not None
    assert too_big["reason"] == "Unschedulable"
    # One status write (the failure), answered with the stored object itself ...
    assert len(answers) == 1
    assert answers[0][0] is sim.api.get(PODS, "too-big", "default", shared=True)
    # ... none of which changed since it was stored.
    assert [orjson.dumps(a) for a, _ in answers] == [b for _, b in answers]
