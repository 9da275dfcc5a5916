"""The controller's collector policy (``cli.heap``): survivors of a full collection are left out
of the next ones, churn never brings a walk of the whole heap, growth does, and a cycle that
became garbage while frozen is collected by that walk.

Each case runs in a child interpreter: the policy freezes and tends the whole process's heap,
which this test process must keep as it is."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"


def _run(body: str, growth: float = 0.25) -> dict[str, object]:
    script = (
        textwrap.dedent(
            """
        import gc, json, sys, weakref
        sys.path.insert(0, {src!r})
        from karpenter_capi.cli.heap import TenuredHeap
        heap = TenuredHeap({growth!r})
        heap.install()
        out = {{}}
        """
        ).format(src=str(SRC), growth=growth)
        + textwrap.dedent(body)
        + "\nprint(json.dumps(out))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_full_collection_freezes_what_survived_it() -> None:
    out = _run(
        """
        kept = [[i] for i in range(20_000)]
        before = gc.get_freeze_count()
        gc.collect()
        out["frozen_added"] = gc.get_freeze_count() - before
        out["still_collected"] = any(o is kept for o in gc.get_objects())
        out["partial"] = heap.partial_walks
        """,
        growth=1_000.0,  # a child's heap is small: no growth here may bring a whole walk
    )
    assert out["frozen_added"] >= 20_000
    assert out["still_collected"] is False  # the next collections skip them
    assert out["partial"] == 1


def test_churn_without_growth_never_walks_the_whole_heap() -> None:
    out = _run(
        """
        cache = {i: {"spec": [i]} for i in range(50_000)}
        gc.collect()
        walks = heap.complete_walks
        for round in range(30):  # every object replaced by a new version, 30 times over
            for i in range(50_000):
                cache[i] = {"spec": [i, round]}
            gc.collect()
        out["complete_walks_during_churn"] = heap.complete_walks - walks
        out["partial"] = heap.partial_walks
        """
    )
    assert out["complete_walks_during_churn"] == 0
    assert out["partial"] >= 31


def test_growth_brings_a_whole_walk_that_collects_cycles_hidden_by_a_freeze() -> None:
    out = _run(
        """
        class Node:
            pass

        a, b = Node(), Node()
        a.other, b.other = b, a
        alive = weakref.ref(a)
        gc.collect()  # the cycle survives and is frozen
        del a, b
        gc.collect()
        out["hidden_while_frozen"] = alive() is not None
        walks = heap.complete_walks
        grown = [[i] for i in range(2 * sys.getallocatedblocks())]
        gc.collect()  # grown past a quarter: unfrozen for the next full collection
        gc.collect()  # which walks everything
        out["whole_walks"] = heap.complete_walks - walks
        out["collected_after"] = alive() is None
        """
    )
    assert out["hidden_while_frozen"] is True
    assert out["whole_walks"] >= 1
    assert out["collected_after"] is True


def test_uninstall_gives_every_frozen_object_back() -> None:
    out = _run(
        """
        gc.collect()
        heap.uninstall()
        out["frozen"] = gc.get_freeze_count()
        out["tended"] = any(cb == heap._on_collection for cb in gc.callbacks)
        """
    )
    assert out == {"frozen": 0, "tended": False}


def test_a_growth_that_is_not_positive_is_refused() -> None:
    from karpenter_capi.cli.heap import TenuredHeap

    with pytest.raises(ValueError, match="must be positive"):
        TenuredHeap(growth=0)
