"""Strategic merge patch for built-in kinds: lists merged by key instead of replaced.

``kubectl patch``, ``kubectl label``/``annotate``/``cordon`` and client-go's two-way merge send
``application/strategic-merge-patch+json`` to built-in kinds. Its one difference from a JSON
merge patch that users notice is lists: a patch naming one container, condition or finalizer
merges into the list instead of replacing it. The merge keys below are the ``patchMergeKey``
tags of the Kubernetes Go types that kubectl relies on; lists without one (``tolerations``,
node ``taints``) are replaced, exactly as kube does. The directives ``$patch: replace|delete``,
``$deleteFromPrimitiveList/<field>``, ``$setElementOrder/<field>`` and ``$retainKeys`` are
understood (the last two are accepted and have no effect on content).
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.kube.errors import BadRequest
from karpenter_capi.sim.apiserver.objects import copy_json

JsonObject = dict[str, Any]

_PRIMITIVE_SET = ""  # a list of scalars merged as a set (finalizers, podCIDRs)

# (parent field, list field) -> merge key. Matching on the last two path steps covers pod
# templates (``spec.template.spec.containers``) as well as pods.
_MERGE_KEYS: dict[tuple[str, str], str] = {
    ("metadata", "finalizers"): _PRIMITIVE_SET,
    ("metadata", "ownerReferences"): "uid",
    ("spec", "containers"): "name",
    ("spec", "initContainers"): "name",
    ("spec", "ephemeralContainers"): "name",
    ("spec", "volumes"): "name",
    ("spec", "imagePullSecrets"): "name",
    ("spec", "hostAliases"): "ip",
    ("spec", "schedulingGates"): "name",
    ("spec", "resourceClaims"): "name",
    ("spec", "topologySpreadConstraints"): "topologyKey",
    ("spec", "podCIDRs"): _PRIMITIVE_SET,
    ("containers", "ports"): "containerPort",
    ("initContainers", "ports"): "containerPort",
    ("containers", "env"): "name",
    ("initContainers", "env"): "name",
    ("containers", "volumeMounts"): "mountPath",
    ("initContainers", "volumeMounts"): "mountPath",
    ("containers", "volumeDevices"): "devicePath",
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
}
# Service ports merge by port number; pod specs have no ``spec.ports``, so no clash.
_KIND_MERGE_KEYS: dict[str, dict[tuple[str, str], str]] = {
    "Service": {("spec", "ports"): "port"},
}


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _strip_directives(v)
            for k, v in value.items()
            if not k.startswith("$") and v is not None
        }
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


class _Patcher:
    def __init__(self, kind: str) -> None:
        self._keys = {**_MERGE_KEYS, **_KIND_MERGE_KEYS.get(kind, {})}

    def merge_key(self, path: tuple[str, ...]) -> str | None:
        if len(path) < 2:
            return None
        return self._keys.get((path[-2], path[-1]))

    def merge_map(
        self, original: JsonObject, patch: JsonObject, path: tuple[str, ...]
    ) -> JsonObject:
        directive = patch.get("$patch")
        if directive == "replace":
            replaced: JsonObject = _strip_directives(patch)
            return replaced
        if directive not in (None, "merge"):
            raise BadRequest(f"unknown patch type: {directive!r} in map")
        result = dict(original)
        for key, value in patch.items():
            if key.startswith("$deleteFromPrimitiveList/"):
                field = key.split("/", 1)[1]
                remove = value if isinstance(value, list) else []
                kept = [item for item in result.get(field) or [] if item not in remove]
                result[field] = kept
                continue
            if key.startswith("$"):
                continue  # $setElementOrder/..., $retainKeys, $patch: no effect on content
            self._merge_field(result, key, value, (*path, key))
        return result

    def _merge_field(self, result: JsonObject, key: str, value: Any, path: tuple[str, ...]) -> None:
        """Merge one field of the patch into ``result``: null or a delete directive removes
        it, a map merges, a list merges by its merge key (else replaces), a value replaces."""
        if value is None:
            result.pop(key, None)
            return
        if isinstance(value, dict):
            if value.get("$patch") == "delete":
                result.pop(key, None)
                return
            current = result.get(key)
            result[key] = self.merge_map(current if isinstance(current, dict) else {}, value, path)
        elif isinstance(value, list):
            merge_key = self.merge_key(path)
            current = result.get(key)
            if merge_key is None or not isinstance(current, list):
                result[key] = _strip_directives([v for v in value if not _is_replace_marker(v)])
            else:
                result[key] = self.merge_list(current, value, merge_key, path)
        else:
            result[key] = value

    def merge_list(
        self, original: list[Any], patch: list[Any], merge_key: str, path: tuple[str, ...]
    ) -> list[Any]:
        if any(_is_replace_marker(item) for item in patch):
            replaced: list[Any] = _strip_directives(
                [item for item in patch if not _is_replace_marker(item)]
            )
            return replaced
        if merge_key == _PRIMITIVE_SET:
            merged = list(original)
            merged.extend(item for item in patch if item not in original)
            return merged
        result = list(original)
        for item in patch:
            if not isinstance(item, dict) or merge_key not in item:
                raise BadRequest(f"map: {item!r} does not contain declared merge key: {merge_key}")
            position = next(
                (
                    i
                    for i, old in enumerate(result)
                    if isinstance(old, dict) and old.get(merge_key) == item[merge_key]
                ),
                None,
            )
            if item.get("$patch") == "delete":
                result = [
                    old
                    for old in result
                    if not (isinstance(old, dict) and old.get(merge_key) == item[merge_key])
                ]
            elif position is None:
                result.append(_strip_directives(item))
            else:
                result[position] = self.merge_map(result[position], item, path)
        return result


def _is_replace_marker(item: Any) -> bool:
    return isinstance(item, dict) and item.get("$patch") == "replace" and len(item) == 1


def strategic_merge_patch(original: JsonObject, patch: JsonObject, kind: str) -> JsonObject:
    """Apply a strategic merge patch to a copy of ``original`` (an object of ``kind``)."""
    return _Patcher(kind).merge_map(copy_json(original), copy_json(patch), ())
