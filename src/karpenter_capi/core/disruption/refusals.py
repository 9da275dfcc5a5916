"""Asking the providers which NodeClaims they refuse to remove.

``ask_providers`` hands ``karpenter_capi_disruption_blocked`` the models of the NodeClaims a
pass may disrupt. A pass asks about the same NodeClaims, mostly unchanged, every few seconds;
``ClaimModels`` keeps each one's model for its object version, so only the NodeClaims that
changed since the last pass are validated again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from karpenter_capi.core.api.meta import validation_problems
from karpenter_capi.core.api.nodeclaim import NodeClaim
from karpenter_capi.core.errors import ProviderError
from karpenter_capi.core.kube.errors import ApiError
from karpenter_capi.core.plugin_host import PluginError, Plugins
from karpenter_capi.core.scheduling.kept import Kept
from karpenter_capi.core.scheduling.podspec import version_of

log = logging.getLogger("karpenter_capi.core.disruption.controller")


class ClaimModels:
    """The NodeClaim models ``ask_providers`` made, kept across passes: one per object
    version, handed back only for that very object (the informer cache keeps one object per
    version; a dry run's made-up status is a new object, so it is validated afresh). What two
    passes in a row did not ask about is dropped (``Kept``)."""

    def __init__(self) -> None:
        self._kept: Kept[tuple[str, str], tuple[Mapping[str, Any], NodeClaim]] = Kept()
        self.validated = 0
        """How many models were made (for tests)."""

    def new_round(self) -> None:
        self._kept.new_round()

    def model(self, raw: Mapping[str, Any]) -> NodeClaim:
        """``raw`` as a ``NodeClaim``; raises pydantic's ``ValidationError``."""
        key = version_of(raw)
        found = self._kept.get(key) if key is not None else None
        if found is not None and found[0] is raw:
            return found[1]
        self.validated += 1
        model = NodeClaim.model_validate(raw)
        if key is not None:
            self._kept.put(key, (raw, model))
        return model


def ask_providers(
    plugins: Plugins,
    nodeclaims: list[Mapping[str, Any]],
    models: ClaimModels | None = None,
) -> Mapping[str, str]:
    """Which NodeClaims the providers refuse to remove (``karpenter_capi_disruption_blocked``);
    every one of them when the providers cannot be asked. A NodeClaim the model refuses is
    held (naming why; the lifecycle controller marks it) and the others are still asked.
    ``models`` keeps the NodeClaims' models between passes (else each is validated again)."""
    claims: list[NodeClaim] = []
    invalid: dict[str, str] = {}
    if models is not None:
        models.new_round()
    for raw in nodeclaims:
        try:
            claims.append(
                models.model(raw) if models is not None else NodeClaim.model_validate(raw)
            )
        except ValidationError as error:
            name = str((raw.get("metadata") or {}).get("name") or "")
            invalid[name] = "invalid NodeClaim: " + "; ".join(validation_problems(error))
    try:
        return {**invalid, **plugins.disruption_blocked(claims)}
    except (PluginError, ProviderError, ApiError) as error:
        # Unsure what the providers allow: disrupt nothing rather than break a floor.
        log.warning("disruption: cannot ask the providers what may be removed: %s", error)
        return {
            str(c["metadata"]["name"]): f"providers could not be asked: {error}" for c in nodeclaims
        }
