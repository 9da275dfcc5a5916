"""Why a check says no: the one result type the scheduling checks return.

The requirement, topology and solver checks used to answer with a bare string for "no" and
``None`` for "yes", so ``if reqs.compatible(x):`` read backwards, and the flags topology attaches
to a refusal (may it change during the solve?) were lost once the reason was formatted. A check
now returns ``Refusal | None``, named for the question it answers (``incompatibility``,
``conflict_with``, ``_node_refusal``), and ``None`` always means "nothing stands in the way".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why something cannot take a pod (``reason`` is the text a user sees), and for how long.

    ``permanent`` refusals stay true for the rest of the solve (counts only grow): a hostname
    domain already holding a pod the anti-affinity selects, a hostname spread whose node is at
    its skew, a node whose taints or labels the pod rejects. ``local`` refusals depend only on
    what is on that one node, so they hold until a pod is added to it; every permanent refusal
    is also local. The solver uses both to stop offering a node to pods of the same shape.
    """

    reason: str
    permanent: bool = False
    local: bool = False

    def __post_init__(self) -> None:
        if self.permanent and not self.local:
            object.__setattr__(self, "local", True)

    def __str__(self) -> str:
        return self.reason
