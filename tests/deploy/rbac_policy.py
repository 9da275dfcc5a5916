"""Kubernetes RBAC, evaluated: which requests a set of Roles and bindings allows one subject.

Small on purpose, and only what the shipped RBAC uses, with kube-apiserver's RBAC authorizer's
rules (``k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac``):

* a ClusterRole bound by a ClusterRoleBinding applies everywhere; a Role (or a ClusterRole)
  bound by a RoleBinding applies only in the binding's namespace, so it never allows a request
  on a cluster-scoped resource or across all namespaces;
* a rule matches when its ``apiGroups``, ``resources`` and ``verbs`` each contain the request's
  (or ``*``); a subresource is named ``resource/subresource`` and is not matched by the bare
  resource; ``*`` matches every resource and subresource;
* ``resourceNames``, when present, also require the request to name one of them, which a
  ``create`` (and a ``list`` or ``watch`` of a collection) never does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from karpenter_capi.sim.apiserver.audit import AuditRecord

RBAC_GROUP = "rbac.authorization.k8s.io"


@dataclass(frozen=True)
class Rule:
    api_groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    resource_names: frozenset[str]

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Rule:
        assert not raw.get("nonResourceURLs"), "the shipped roles grant no non-resource URL"
        return cls(
            frozenset(raw.get("apiGroups") or ()),
            frozenset(raw.get("resources") or ()),
            frozenset(raw.get("verbs") or ()),
            frozenset(raw.get("resourceNames") or ()),
        )

    def matches(self, group: str, resource: str, verb: str) -> bool:
        """Whether this rule covers ``verb`` on ``resource`` (``plural[/subresource]``)."""
        return (
            _contains(self.api_groups, group)
            and _contains(self.resources, resource)
            and _contains(self.verbs, verb)
        )


def _contains(allowed: frozenset[str], value: str) -> bool:
    return "*" in allowed or value in allowed


@dataclass(frozen=True)
class Grant:
    """A rule and where it applies: everywhere (``namespace`` None) or in one namespace."""

    rule: Rule
    namespace: str | None
    source: str
    """``Role ns/name`` or ``ClusterRole name``, for messages."""

    def allows(self, request: AuditRecord) -> bool:
        if request.path is not None:
            return False  # no shipped rule grants a non-resource URL
        if self.namespace is not None and request.namespace != self.namespace:
            return False
        resource = request.resource + (f"/{request.subresource}" if request.subresource else "")
        if not self.rule.matches(request.group, resource, request.verb):
            return False
        if self.rule.resource_names:
            return request.name is not None and request.name in self.rule.resource_names
        return True


def grants_for(
    objects: Iterable[Mapping[str, Any]], service_account: str, namespace: str
) -> list[Grant]:
    """Every grant the ServiceAccount ``namespace/service_account`` gets from ``objects``."""
    objects = list(objects)
    roles = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for o in objects
        if o.get("kind") in ("Role", "ClusterRole")
    }
    grants: list[Grant] = []
    for binding in objects:
        kind = binding.get("kind")
        if kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        subjects = binding.get("subjects") or []
        if not any(
            s.get("kind") == "ServiceAccount"
            and s.get("name") == service_account
            and s.get("namespace") == namespace
            for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        assert ref["apiGroup"] == RBAC_GROUP, ref
        scope = binding["metadata"].get("namespace") if kind == "RoleBinding" else None
        role_namespace = scope if ref["kind"] == "Role" else None
        role = roles.get((ref["kind"], role_namespace, ref["name"]))
        assert role is not None, f"{kind} {binding['metadata']['name']} refers to a missing role"
        source = f"{ref['kind']} {role_namespace + '/' if role_namespace else ''}{ref['name']}"
        grants.extend(Grant(Rule.parse(raw), scope, source) for raw in role.get("rules") or [])
    return grants


def allowed(grants: Iterable[Grant], request: AuditRecord) -> bool:
    return any(grant.allows(request) for grant in grants)


def granted_triples(grant: Grant) -> list[tuple[str, str, str]]:
    """Each (group, resource, verb) the grant's rule names, for the over-grant check."""
    rule = grant.rule
    return sorted(
        (group, resource, verb)
        for group in rule.api_groups
        for resource in rule.resources
        for verb in rule.verbs
    )


def needed_by(grant: Grant, triple: tuple[str, str, str], request: AuditRecord) -> bool:
    """Whether ``request`` is one the ``triple`` of ``grant`` is there for: the grant allows
    it, and the triple alone (its group, resource or ``*``, verb) covers it."""
    group, resource, verb = triple
    alone = Grant(
        Rule(
            frozenset({group}), frozenset({resource}), frozenset({verb}), grant.rule.resource_names
        ),
        grant.namespace,
        grant.source,
    )
    return alone.allows(request)
