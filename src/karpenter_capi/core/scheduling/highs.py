"""HiGHS, through ``scipy.optimize``: the linear and integer solves of the re-packing stage.

Why a module of its own: it is where the re-packing calls SciPy (imported, like NumPy, only
when a solve runs or ``warm_up`` asks, so a solver that never re-packs pays for neither), the
seam tests replace with a backend that reports its safety net reached, and the home of the
guard against HiGHS printing to stdout.

Each solve is bounded by deterministic work (HiGHS's branch-and-bound node limit), so the same
problem gets the same answer however loaded the machine is. A safety net remains, measured in
the solving thread's CPU time (``time.thread_time``, injectable), which CPU hogs beside the
controller do not inflate as they do the wall clock; HiGHS's own ``time_limit``, wall time, is
set ``WALL_FACTOR`` times further as a last resort. Reaching either raises ``OutOfTime``
instead of returning whatever the clock let HiGHS find (``docs/scheduling.md``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import numpy as np


class _StdoutToStderr:
    """HiGHS can print a stray debug line straight to file descriptor 1 (HiGHS issue 2783),
    which would corrupt ``--json`` output; while a solve runs, fd 1 goes to stderr. Threads
    may solve at once, so the first to enter redirects and the last to leave restores; where
    the descriptors cannot be duplicated, nothing is redirected."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._saved: int | None = None

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                sys.stdout.flush()
                try:
                    self._saved = os.dup(1)
                    os.dup2(2, 1)
                except OSError:
                    self._saved = None
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0 and self._saved is not None:
                    os.dup2(self._saved, 1)
                    os.close(self._saved)
                    self._saved = None


_stdout_to_stderr = _StdoutToStderr()


WALL_FACTOR: Final = 12.0
"""HiGHS's own (wall-clock) ``time_limit`` is this many times a solve's CPU-time safety net:
only a last resort, for a process so starved of CPU that it gets less than a twelfth of a
core; two CPU hogs on a two-core machine leave it about two thirds of one."""


class OutOfTime(Exception):
    """A solve reached its safety net: more CPU seconds than the net (work that normally takes
    milliseconds), or HiGHS's wall-clock last resort (a machine too loaded to run it at all).
    The re-packing keeps greedy's plan and says so."""


def warm_up() -> None:
    """Import SciPy and run HiGHS once, so the first round after start does not pay for it.

    Called when the operator starts; the decisions do not depend on it (they read no clock),
    only the first round's latency does (importing SciPy takes about a second).
    """
    import numpy as np

    backend = HiGHS()
    backend.lp(np.ones(1), -np.ones((1, 1)), -np.ones(1), time_limit=60.0)
    backend.milp(
        np.ones(1),
        np.ones((1, 1)),
        np.ones(1),
        np.full(1, np.inf),
        bounds=(np.zeros(1), np.full(1, 2.0)),
        time_limit=60.0,
        node_limit=10,
        gap=0.0,
    )


LEAN_OPTIONS: Final = {
    "mip_heuristic_run_rens": False,
    "mip_heuristic_run_rins": False,
    "mip_pscost_minreliable": 0,
}
"""HiGHS options of a ``lean`` integer solve (``HiGHS.milp``): no RENS or RINS, whose sub-MIPs
run their own root node and sub-MIPs in turn (six deep on seed 127 of
``benchmarks/packing.py``: 3 rows, 202 columns, 2.5 of its 3.4 CPU seconds at the root), and
pseudo-cost branching without strong branching (which took 16,540 of its 22,840 LP
iterations). Both are counted work HiGHS would do the same on any machine, but work no node
limit bounds; SciPy passes options it does not document to HiGHS verbatim."""

# HiGHS's model status when its node limit (``mip_max_nodes``) stops it: kSolutionLimit, which
# SciPy does not map (its status 4, "not recognized"), so it is read from the message.
_NODE_LIMIT_STATUS = "HiGHS Status 16:"


class HiGHS:
    """The linear and integer solves, through ``scipy.optimize`` (HiGHS).

    A seam: tests substitute a backend that reports its safety net reached. ``cpu_clock``:
    the solving thread's CPU seconds (``time.thread_time``; tests inject a clock that jumps).
    Each call's ``time_limit`` is its safety net in those seconds: a solve that spent more
    raises ``OutOfTime``, and HiGHS itself stops at ``WALL_FACTOR`` times it in wall time.
    """

    def __init__(self, cpu_clock: Callable[[], float] | None = None) -> None:
        self._cpu_clock = cpu_clock or time.thread_time

    def _check(self, started: float, time_limit: float, message: str) -> None:
        spent = self._cpu_clock() - started
        if spent > time_limit:
            raise OutOfTime(f"{spent:.3g} CPU seconds over the {time_limit:g} s net ({message})")

    def lp(
        self, cost: np.ndarray, a_ub: np.ndarray, b_ub: np.ndarray, *, time_limit: float
    ) -> tuple[float, np.ndarray, np.ndarray] | None:
        """Minimize ``cost @ x`` with ``a_ub @ x <= b_ub``, ``x >= 0``: value, row duals and
        ``x`` (``None``: infeasible). The simplex method ends by itself; ``time_limit`` is the
        safety net, CPU seconds (``OutOfTime``)."""
        import numpy as np
        from scipy.optimize import linprog

        started = self._cpu_clock()
        with _stdout_to_stderr():
            result = linprog(
                cost,
                A_ub=a_ub,
                b_ub=b_ub,
                bounds=(0, None),
                method="highs",
                options={"time_limit": time_limit * WALL_FACTOR},
            )
        if result.status == 1:
            raise OutOfTime(result.message)
        self._check(started, time_limit, "linear solve")
        if result.status != 0:
            return None
        return float(result.fun), np.asarray(result.ineqlin.marginals), np.asarray(result.x)

    def milp(
        self,
        cost: np.ndarray,
        matrix: np.ndarray,
        lower: np.ndarray,
        upper: np.ndarray,
        *,
        bounds: tuple[np.ndarray, np.ndarray],
        time_limit: float,
        node_limit: int,
        gap: float,
        lean: bool = False,
    ) -> tuple[str, np.ndarray | None]:
        """Minimize over integers; ``(status, x)`` with status ``optimal``, ``infeasible`` or
        ``budget-exhausted`` (``node_limit`` branch-and-bound nodes explored first: ``x`` the
        best integer plan found by then, or ``None``). ``time_limit`` is only the safety net,
        CPU seconds (``OutOfTime``). ``lean``: with ``LEAN_OPTIONS``, for large programs."""
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, milp

        started = self._cpu_clock()
        with _stdout_to_stderr(), warnings.catch_warnings():
            # SciPy documents five options and passes the others to HiGHS, with a warning.
            warnings.filterwarnings("ignore", "Unrecognized options", RuntimeWarning)
            result: Any = milp(
                cost,
                constraints=LinearConstraint(matrix, lower, upper),
                integrality=np.ones(len(cost)),
                bounds=Bounds(*bounds),
                options={
                    "time_limit": time_limit * WALL_FACTOR,
                    "node_limit": node_limit,
                    "disp": False,
                    "mip_rel_gap": gap,
                    "presolve": False,
                    **(LEAN_OPTIONS if lean else {}),
                },
            )
        if result.status == 1:
            raise OutOfTime(result.message)
        self._check(started, time_limit, "integer solve")
        if result.status == 0:
            return "optimal", np.asarray(result.x)
        if _NODE_LIMIT_STATUS in str(result.message):
            x = getattr(result, "x", None)
            return "budget-exhausted", None if x is None else np.asarray(x)
        return "infeasible", None
