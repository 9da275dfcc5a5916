"""Errors that say what went wrong, not just that it did: a provider plugin's, and a user's.

``InvalidInputError`` is input a person gave that cannot be used (a flag, a file, a scenario, a
manifest): the command line prints its message as one line, where any other exception that
escapes a command is a bug and is shown with its traceback. Raise it where user input is
validated, with a message that names the input and what to fix.

The core reacts differently to each provider error: insufficient capacity marks the offerings
unavailable for a while and lets the next provisioning round pick another shape; a NodeClass
that is not ready becomes a NodePool condition; a missing instance lets the NodeClaim finish
terminating; a retryable create is requeued after the suggested delay. Anything else from a
plugin is a bug in the plugin and is reported with the plugin's name (see ``core.plugin_host``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Only for annotations: the module stays a leaf that any layer (core.kube too) can import.
    from karpenter_capi.core.instancetype import Offering


class InvalidInputError(ValueError):
    """Input a user gave cannot be used; the message names it and says what to fix.

    A ``ValueError``, so code that validates and catches ``ValueError`` keeps working; but only
    this subclass (not every ``ValueError``, which may be a bug) is a user's mistake.
    """


class ProviderError(Exception):
    """Base of every error a provider plugin raises on purpose."""


class InsufficientCapacityError(ProviderError):
    """The provider could not launch any of the requested offerings (capacity is exhausted).

    ``offerings`` lists the ``(instance type name, Offering)`` pairs that failed, when known, so
    the core can mark exactly those unavailable and retry with the others.
    """

    def __init__(
        self, message: str, offerings: Iterable[tuple[str, Offering]] | None = None
    ) -> None:
        self.offerings: tuple[tuple[str, Offering], ...] = tuple(offerings or ())
        if self.offerings:
            listed = ", ".join(
                f"{name}/{offering.zone}/{offering.capacity_type}"
                for name, offering in self.offerings
            )
            message = f"{message} (unavailable: {listed})"
        super().__init__(f"insufficient capacity: {message}")
        self.reason = message


class NodeClassNotReadyError(ProviderError):
    """The NodeClass exists but cannot be used yet (selector matches nothing, template missing)."""

    def __init__(self, nodeclass_name: str, reason: str) -> None:
        super().__init__(f"node class {nodeclass_name!r} is not ready: {reason}")
        self.nodeclass_name = nodeclass_name
        self.reason = reason


class InstanceNotFoundError(ProviderError):
    """The instance (or Machine) behind a NodeClaim is gone; deleting it again is pointless."""

    def __init__(self, identifier: str, detail: str = "") -> None:
        suffix = f": {detail}" if detail else ""
        super().__init__(f"instance {identifier!r} not found{suffix}")
        self.identifier = identifier


class RetryableCreateError(ProviderError):
    """A create that failed for a transient reason (throttling, a conflict) and may be retried.

    ``retry_after`` is the provider's suggested delay, or None to use the core's backoff.
    """

    def __init__(self, message: str, retry_after: timedelta | None = None) -> None:
        hint = f" (retry after {retry_after.total_seconds():g}s)" if retry_after else ""
        super().__init__(f"create failed, will retry: {message}{hint}")
        self.retry_after = retry_after
        self.reason = message
