"""Which domain of a topology key a node is in, and which of the known domains a node could be in.

Shared by the groups (that count pods per domain) and the narrowing (that keeps the domains a
constraint still allows); a domain is one value of a topology key, such as a zone name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.values.requirements import Requirement
from karpenter_capi.core.values.taints import Taint

# A domain's taint sets: one per node shape that yields it (empty: untainted shapes only).
TaintSets = list[tuple[Taint, ...]]
BETA_ALIASES: Final = {ga: beta for beta, ga in wellknown.NORMALIZED_LABELS.items() if beta != ga}


@dataclass(frozen=True)
class NodeInfo:
    """A node an existing pod runs on: its name, labels and taints."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...] = ()


def domain_of(node: NodeInfo, key: str) -> str | None:
    value = node.labels.get(key)
    if value is None:
        beta = BETA_ALIASES.get(key)
        if beta is not None:
            value = node.labels.get(beta)
    # The kubelet may not have set the hostname label yet; the node name stands in, as in
    # Karpenter, so a self-affinity group still sees the pod somewhere.
    if value is None and key == wellknown.LABEL_HOSTNAME:
        return node.name
    return value


def single_value(requirement: Requirement | None) -> str | None:
    if requirement is None or requirement.complement or len(requirement.values) != 1:
        return None
    (value,) = requirement.values
    if requirement.greater_than is None and requirement.less_than is None:
        return value  # listed, and no bounds to meet
    return value if requirement.has(value) else None


def allows(requirement: Requirement | None, domain: str) -> bool:
    return requirement is None or requirement.has(domain)


def candidate_domains(
    domains: Mapping[str, object], node_domains: Requirement | None
) -> Iterator[str]:
    """The known domains a node with ``node_domains`` could be in."""
    if node_domains is None:
        yield from domains
    elif not node_domains.complement:
        # Walking the node's few values beats walking thousands of hostname domains.
        for domain in node_domains.values:
            if domain in domains and node_domains.has(domain):
                yield domain
    else:
        for domain in domains:
            if node_domains.has(domain):
                yield domain
