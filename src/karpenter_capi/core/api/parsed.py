"""Validating API objects into their models once per resourceVersion.

The NodeClaim lifecycle controller reads a NodeClaim, its NodePool and its NodeClass from the
informer caches at every reconcile and every launch poll, seconds apart, and hands them to the
plugins. The stored object changes only with its ``resourceVersion``, so its model is kept and
made again only when that changes. Models are frozen (``meta.KubeModel``), so one model can be
handed to every reader, the plugins' hooks among them. An object without a resourceVersion
(built in code, never stored) is validated every time.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from karpenter_capi.core.api.meta import TypedObject

M = TypeVar("M", bound=TypedObject)


class ParsedObjects(Generic[M]):
    """The latest model of each object of one kind, by namespace and name. Thread-safe.

    Holds one entry per object it was asked about; ``forget`` one that was deleted.
    """

    def __init__(self, model: type[M]) -> None:
        self._model = model
        self._lock = threading.Lock()
        self._parsed: dict[tuple[str, str], tuple[str, M]] = {}

    def parse(self, raw: Mapping[str, Any]) -> M:
        """``raw`` as the model; raises pydantic's ``ValidationError`` (nothing is kept)."""
        meta = raw.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        version = str(meta.get("resourceVersion") or "")
        if version:
            with self._lock:
                found = self._parsed.get(key)
            if found is not None and found[0] == version:
                return found[1]
        model = self._model.model_validate(raw)
        if version:
            with self._lock:
                self._parsed[key] = (version, model)
        return model

    def forget(self, name: str, namespace: str = "") -> None:
        with self._lock:
            self._parsed.pop((namespace, name), None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._parsed)
