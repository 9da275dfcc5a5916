"""HiGHS, through ``scipy.optimize``: the linear and integer solves of the re-packing stage.

Why a module of its own: it is where the re-packing calls SciPy (imported, like NumPy, only
when a solve runs, so a solver that never re-packs pays for neither), the seam tests replace
with a backend that reports its time limit reached, and the home of the guard against HiGHS
printing to stdout.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

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


class HiGHS:
    """The linear and integer solves, through ``scipy.optimize`` (HiGHS).

    A seam: tests substitute a backend that reports its time limit reached.
    """

    def lp(
        self, cost: np.ndarray, a_ub: np.ndarray, b_ub: np.ndarray
    ) -> tuple[float, np.ndarray] | None:
        """Minimize ``cost @ x`` with ``a_ub @ x <= b_ub``, ``x >= 0``: value and row duals."""
        import numpy as np
        from scipy.optimize import linprog

        with _stdout_to_stderr():
            result = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
        if result.status != 0:
            return None
        return float(result.fun), np.asarray(result.ineqlin.marginals)

    def milp(
        self,
        cost: np.ndarray,
        matrix: np.ndarray,
        lower: np.ndarray,
        upper: np.ndarray,
        *,
        bounds: tuple[np.ndarray, np.ndarray],
        time_limit: float,
        gap: float,
    ) -> tuple[str, np.ndarray | None]:
        """Minimize over integers; ``(status, x)`` with status optimal, infeasible or timed-out
        (``x`` then the best integer plan found before the limit, or ``None``)."""
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, milp

        with _stdout_to_stderr():
            result: Any = milp(
                cost,
                constraints=LinearConstraint(matrix, lower, upper),
                integrality=np.ones(len(cost)),
                bounds=Bounds(*bounds),
                options={
                    "time_limit": max(time_limit, 0.001),
                    "disp": False,
                    "mip_rel_gap": gap,
                    "presolve": False,
                },
            )
        if result.status == 0:
            return "optimal", np.asarray(result.x)
        if result.status == 1:
            # The time limit stopped it; ``x`` is its best plan so far, if it found one.
            x = getattr(result, "x", None)
            return "timed-out", None if x is None else np.asarray(x)
        return "infeasible", None
