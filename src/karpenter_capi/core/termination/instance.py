"""Removing the machine behind a NodeClaim through the provider plugins' delete hook.

The hook contract (``karpenter_capi_delete``) is asynchronous like launch: a plugin starts the
removal and returns, and the core calls it again on later reconciles until the plugin raises
``InstanceNotFoundError``. Only then may the finalizers go, or a Node could vanish from the API
while its machine still runs, and a NodeClaim could vanish while its machine still costs money.
Both termination controllers need this step (the Node's once it is drained, the NodeClaim's
when it never had a Node), so it lives here once.

A NodeClaim the model refuses (upstream's CRDs admit durations no ``timedelta`` holds) still
owns a machine: the plugin is handed what can be read of it (``readable_nodeclaim``), or the
machine would outlive its NodeClaim and the finalizer would never go.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from pydantic import ValidationError

from karpenter_capi.core.api.meta import ConditionStatus, validation_problems
from karpenter_capi.core.api.nodeclaim import NodeClaimConditionType, readable_nodeclaim
from karpenter_capi.core.clock import Clock, parse_timestamp
from karpenter_capi.core.errors import InstanceNotFoundError, ProviderError
from karpenter_capi.core.kube.errors import Conflict, NotFound
from karpenter_capi.core.kube.events import WARNING
from karpenter_capi.core.kube.resources import NODECLAIMS
from karpenter_capi.core.plugin_host import NotHandledError, PluginError, Plugins
from karpenter_capi.core.termination.actions import Actions, condition_of, set_condition
from karpenter_capi.core.termination.relations import name_of

# How often to ask a plugin again while its machine is going away (upstream polls every 5s).
INSTANCE_POLL_SECONDS: Final = 5.0
# A NodeClaim not even its metadata can be read of cannot be handed to a plugin; look again
# later, someone may fix it.
INVALID_RECHECK_SECONDS: Final = 60.0

INSTANCE_TERMINATING: Final = NodeClaimConditionType.INSTANCE_TERMINATING.value


class SaidOnce:
    """What was last said per object, so a message is logged (and recorded) once per change
    rather than on every reconcile of an object that stays broken."""

    def __init__(self) -> None:
        self._said: dict[str, str] = {}
        self._lock = threading.Lock()

    def first(self, key: str, message: str) -> bool:
        """True when ``message`` is news for ``key`` (and remember it)."""
        with self._lock:
            if self._said.get(key) == message:
                return False
            self._said[key] = message
            return True

    def forget(self, key: str) -> None:
        with self._lock:
            self._said.pop(key, None)


@dataclass(frozen=True)
class InstanceStatus:
    """``gone`` once the plugin reported the machine missing; else when to ask again."""

    gone: bool
    requeue_after: float = INSTANCE_POLL_SECONDS


class InstanceTerminator:
    """Calls the delete hook for one NodeClaim and interprets the answer."""

    def __init__(
        self,
        plugins: Plugins,
        actions: Actions,
        clock: Clock,
        log: logging.Logger,
    ) -> None:
        self._plugins = plugins
        self._actions = actions
        self._clock = clock
        self._log = log
        self._said = SaidOnce()

    def ensure_terminated(self, nodeclaim: Mapping[str, Any]) -> InstanceStatus:
        name = name_of(nodeclaim)
        try:
            model, problems = readable_nodeclaim(nodeclaim)
        except ValidationError as error:
            message = "cannot delete the instance of an unreadable NodeClaim: " + "; ".join(
                validation_problems(error)
            )
            if self._said.first(name, message):
                self._log.warning("nodeclaim %s: %s", name, message)
                self._actions.event(NODECLAIMS, nodeclaim, WARNING, "FailedTermination", message)
            return InstanceStatus(gone=False, requeue_after=INVALID_RECHECK_SECONDS)
        if problems and self._said.first(name, "; ".join(problems)):
            # The lifecycle controller told the user (condition, Event, WARNING) already.
            self._log.info(
                "nodeclaim %s is invalid (%s): deleting its instance from what can be read",
                name,
                "; ".join(problems),
            )
        if self._actions.dry_run:
            # The hook would really delete the machine: in dry run it is not called at all.
            self._log.info("dry run: would call the delete hook for nodeclaim %s", name)
            return InstanceStatus(gone=False)
        try:
            plugin = self._plugins.delete(model)
        except InstanceNotFoundError:
            self._said.forget(name)
            return InstanceStatus(gone=True)
        except NotHandledError:
            # No enabled plugin owns this NodeClaim (its launch never reached one, or the plugin
            # was disabled): there is nothing we could delete, and waiting would hang the
            # NodeClaim forever. ``Plugins.get`` treats an unknown machine the same way.
            message = "no enabled plugin owns this NodeClaim; assuming it has no instance"
            self._log.warning("nodeclaim %s: %s", name, message)
            self._actions.event(NODECLAIMS, nodeclaim, WARNING, "InstanceNotHandled", message)
            self._said.forget(name)
            return InstanceStatus(gone=True)
        except (ProviderError, PluginError) as error:
            self._actions.event(
                NODECLAIMS,
                nodeclaim,
                WARNING,
                "FailedTermination",
                f"deleting the instance failed: {error}",
            )
            raise
        if self._mark_terminating(nodeclaim):
            self._log.info("nodeclaim %s: plugin %s is deleting its instance", name, plugin)
        else:
            self._log.debug("nodeclaim %s: plugin %s is still deleting its instance", name, plugin)
        return InstanceStatus(gone=False)

    def _mark_terminating(self, nodeclaim: Mapping[str, Any]) -> bool:
        """Set ``InstanceTerminating``; True when it was not set before."""
        conditions = set_condition(
            nodeclaim,
            INSTANCE_TERMINATING,
            ConditionStatus.TRUE,
            reason="InstanceTerminating",
            message="the provider is deleting the instance",
            now=self._clock.now(),
        )
        if conditions is None:
            return False
        # Informational only: after a conflict the next poll sets it from a fresh copy.
        with contextlib.suppress(Conflict, NotFound):
            self._actions.patch(
                NODECLAIMS,
                nodeclaim,
                {"status": {"conditions": conditions}},
                subresource="status",
                what=f"set condition {INSTANCE_TERMINATING}",
            )
        return True


def instance_termination_seconds(nodeclaim: Mapping[str, Any], now: datetime) -> float | None:
    """Time from the first successful delete hook call (the ``InstanceTerminating``
    condition's transition) to ``now``; ``None`` when the machine was already gone."""
    condition = condition_of(nodeclaim, INSTANCE_TERMINATING)
    since = condition.get("lastTransitionTime") if condition else None
    if not isinstance(since, str) or not since:
        return None
    return max(0.0, (now - parse_timestamp(since)).total_seconds())
