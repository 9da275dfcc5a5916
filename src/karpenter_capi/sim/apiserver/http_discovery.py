"""The HTTP front's discovery documents: which groups, versions and resources are served.

kubectl and the official client find out what a server offers before they call it (``/api``,
``/apis``, ``/apis/<group>``, ``/apis/<group>/<version>``); short names, categories and
subresources come from here, and a CRD's kind becomes visible once its resource is served.
Each document is built from the in-memory server's current definitions on every request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.sim.apiserver.subresources import BINDINGS

if TYPE_CHECKING:
    from karpenter_capi.sim.apiserver import InMemoryAPIServer
    from karpenter_capi.sim.apiserver.definitions import ResourceDefinition

_OBJECT_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def host_port(host: str, port: int) -> str:
    """``host:port`` for a URL, an IPv6 literal in brackets (``[::1]:6443``)."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def api_versions(host: str, port: int) -> JsonObject:
    """``/api``: the core group's versions, and where clients reach the server."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": host_port(host, port)}
        ],
    }


def _groups(api: InMemoryAPIServer) -> dict[str, list[str]]:
    """Served versions per named group, preferred first."""
    groups: dict[str, list[str]] = {}
    for definition in api.definitions():
        if not definition.group:
            continue
        versions = groups.setdefault(definition.group, [])
        for version in definition.versions:
            if version not in versions:
                versions.append(version)
    for group, versions in groups.items():
        preferred = api.served_versions(group)
        versions.sort(key=lambda v: preferred.index(v) if v in preferred else len(preferred))
    return groups


def _group_document(group: str, versions: list[str]) -> JsonObject:
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": entries, "preferredVersion": entries[0]}


def api_group_list(api: InMemoryAPIServer) -> JsonObject:
    """``/apis``: every named group."""
    groups = [_group_document(g, vs) for g, vs in sorted(_groups(api).items())]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(api: InMemoryAPIServer, group: str) -> JsonObject:
    """``/apis/<group>``: one group's versions (404 if nothing in it is served)."""
    versions = _groups(api).get(group)
    if not versions:
        raise NotFound(f"the server could not find the requested resource (group {group})")
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_document(group, versions)}


def api_resource_list(api: InMemoryAPIServer, group: str, version: str) -> JsonObject:
    """``/api/v1`` or ``/apis/<group>/<version>``: the resources served there, by name (core/v1
    lists the ``bindings`` collection too, as kube does)."""
    resources: list[JsonObject] = []
    for definition in sorted(_definitions_in(api, group, version), key=lambda d: d.plural):
        resources.extend(_discovery_entries(definition))
    if not resources:
        raise NotFound(f"the server could not find the requested resource ({group} {version})")
    group_version = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


def _definitions_in(api: InMemoryAPIServer, group: str, version: str) -> list[ResourceDefinition]:
    found = [d for d in api.definitions() if d.group == group and version in d.versions]
    if (group, version) == (BINDINGS.group, BINDINGS.versions[0]):
        found.append(BINDINGS)
    return found


def lookup(
    api: InMemoryAPIServer, group: str, version: str, plural: str
) -> ResourceDefinition | None:
    """The resource ``plural`` served in ``group/version``, or None (``bindings`` in core/v1:
    the create-only collection, ``subresources.BINDINGS``)."""
    if (group, version, plural) == (BINDINGS.group, BINDINGS.versions[0], BINDINGS.plural):
        return BINDINGS
    return api.find_definition(group, version, plural)


def _discovery_entries(definition: ResourceDefinition) -> list[JsonObject]:
    entry: JsonObject = {
        "name": definition.plural,
        "singularName": definition.singular,
        "namespaced": definition.namespaced,
        "kind": definition.kind,
        "verbs": ["create"] if definition is BINDINGS else list(_OBJECT_VERBS),
    }
    if definition.short_names:
        entry["shortNames"] = list(definition.short_names)
    if definition.categories:
        entry["categories"] = list(definition.categories)
    entries = [entry]
    for sub in sorted(definition.subresources):
        sub_entry: JsonObject = {
            "name": f"{definition.plural}/{sub}",
            "singularName": "",
            "namespaced": definition.namespaced,
            "kind": definition.kind,
            "verbs": ["get", "patch", "update"],
        }
        if sub == "scale":
            sub_entry.update(group="autoscaling", version="v1", kind="Scale")
        elif sub == "eviction":
            sub_entry.update(group="policy", version="v1", kind="Eviction", verbs=["create"])
        elif sub == "binding":
            sub_entry.update(kind="Binding", verbs=["create"])
        entries.append(sub_entry)
    return entries
