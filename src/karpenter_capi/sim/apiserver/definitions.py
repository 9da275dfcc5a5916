"""What the in-memory API server serves: one ``ResourceDefinition`` per REST resource.

Built-in kinds and custom resources are described the same way, so the HTTP front can build
discovery (``/api``, ``/apis``, ``/apis/<group>/<version>``) and kubectl tables from one
registry, and the server can apply the same rules (scope, status and scale subresources) to
every kind. A ``CustomResourceDefinition`` object is turned into a definition by
``definition_from_crd`` exactly when it is created, which is how CRD registration works here
as in kube-apiserver.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from karpenter_capi.core.kube.resources import Resource

_KUBE_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


@dataclass(frozen=True)
class ResourceDefinition:
    """A served REST resource. ``versions`` lists served versions, preferred first."""

    group: str
    versions: tuple[str, ...]
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    scale_spec_path: str = ".spec.replicas"
    scale_status_path: str = ".status.replicas"
    scale_selector_path: str | None = ".status.selector"
    printer_columns: tuple[dict[str, Any], ...] = ()
    list_kind: str = ""
    custom: bool = False  # served because a CustomResourceDefinition says so
    field_labels: frozenset[str] = field(default_factory=frozenset)  # beyond metadata.name/ns

    def __post_init__(self) -> None:
        if not self.list_kind:
            object.__setattr__(self, "list_kind", f"{self.kind}List")

    @property
    def group_resource(self) -> str:
        """``plural.group`` as kube's messages spell it (``machines.cluster.x-k8s.io``)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def api_version(self, version: str | None = None) -> str:
        chosen = version or self.versions[0]
        return f"{self.group}/{chosen}" if self.group else chosen

    def resource(self, version: str | None = None) -> Resource:
        """The client-side descriptor for this resource at ``version`` (default: preferred)."""
        return Resource(
            self.group, version or self.versions[0], self.plural, self.kind, self.namespaced
        )

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def has_scale(self) -> bool:
        return "scale" in self.subresources


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Sort key giving kube's version order: GA > beta > alpha, higher numbers first.

    Versions that do not look like Kubernetes versions sort last, alphabetically, as kube does.
    """
    match = _KUBE_VERSION.match(version)
    if match is None:
        return (3, 0, 0, version)
    major = int(match.group(1))
    stage = {None: 0, "beta": 1, "alpha": 2}[match.group(2)]
    minor = int(match.group(3) or 0)
    return (stage, -major, -minor, "")


def sort_versions(versions: list[str]) -> tuple[str, ...]:
    return tuple(sorted(dict.fromkeys(versions), key=version_priority))


def definition_from_crd(crd: dict[str, Any]) -> ResourceDefinition:
    """The definition a ``CustomResourceDefinition`` (apiextensions.k8s.io/v1) asks for.

    Subresources and printer columns are taken from the storage version (CRDs may declare
    them per version; the CAPI ones declare them identically on every version).
    """
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    versions = [v for v in spec.get("versions") or [] if v.get("served", True)]
    storage = next((v for v in versions if v.get("storage")), versions[0] if versions else {})
    subresources: set[str] = set()
    declared = storage.get("subresources") or {}
    scale = declared.get("scale")
    if "status" in declared:
        subresources.add("status")
    if isinstance(scale, dict):
        subresources.add("scale")
    kind = str(names.get("kind", ""))
    return ResourceDefinition(
        group=str(spec.get("group", "")),
        versions=sort_versions([str(v["name"]) for v in versions]),
        plural=str(names.get("plural", "")),
        singular=str(names.get("singular") or kind.lower()),
        kind=kind,
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        short_names=tuple(names.get("shortNames") or ()),
        categories=tuple(names.get("categories") or ()),
        subresources=frozenset(subresources),
        scale_spec_path=str((scale or {}).get("specReplicasPath", ".spec.replicas")),
        scale_status_path=str((scale or {}).get("statusReplicasPath", ".status.replicas")),
        scale_selector_path=(scale or {}).get("labelSelectorPath"),
        printer_columns=tuple(storage.get("additionalPrinterColumns") or ()),
        list_kind=str(names.get("listKind") or f"{kind}List"),
        custom=True,
    )
