"""Host ports, as kube-scheduler's NodePorts plugin sees them.

A pod that asks for ``hostPort: 80`` binds port 80 on its node, so two such pods can never share
a node. kube-scheduler enforces this at bind time; if the solver packed both onto one proposed
NodeClaim, the second would stay pending on a node launched for it. So every proposed NodeClaim
tracks the host ports its pods (and its DaemonSet pods) take, and refuses a pod that collides.

The ports a pod takes are those of its app containers and of its sidecars (init containers with
``restartPolicy: Always``, which run for the pod's whole life), as kube-scheduler's
``GetHostPorts`` lists them (``podspec.parse_pod`` reads them); classic init containers exit
before the app starts and hold nothing.
Only ports with a ``hostPort`` count. A missing protocol means TCP and a missing ``hostIP`` means
every address (``0.0.0.0``), as the API server and the plugin default them.

Two ports collide when protocol and port match and the addresses overlap: they are the same
address, or either is the unspecified address (``0.0.0.0`` or ``::``), which binds them all. This
is Karpenter's ``HostPort.Matches``; kube-scheduler only treats the literal ``0.0.0.0`` as a
wildcard, so for ``::`` we are the more cautious of the two and never promise a pod a port the
scheduler would refuse.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

DEFAULT_PROTOCOL: Final = "TCP"
DEFAULT_HOST_IP: Final = "0.0.0.0"
_BIND_ALL: Final = frozenset({DEFAULT_HOST_IP, "::"})


def _canonical_ip(text: str) -> str:
    """The address in one spelling, so equal addresses compare equal as text.

    ``::ffff:10.0.0.1`` and ``10.0.0.1`` are one socket address, and ``0:0::0`` is ``::``;
    comparing what users wrote would miss both. An unparsable address is kept verbatim (the API
    server rejects those, but a hand-built pod should not crash the solver).
    """
    if not text:
        return DEFAULT_HOST_IP
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(text)
    except ValueError:
        return text
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address)


@dataclass(frozen=True, slots=True)
class HostPort:
    """One ``(hostIP, protocol, hostPort)`` a pod binds on its node.

    An empty ``ip`` or ``protocol`` takes the API default (every address, TCP).
    """

    ip: str
    protocol: str
    port: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "ip", _canonical_ip(self.ip))
        object.__setattr__(self, "protocol", self.protocol or DEFAULT_PROTOCOL)
        object.__setattr__(self, "port", int(self.port))

    @property
    def binds_all_addresses(self) -> bool:
        """Whether it is bound on the unspecified address, so on every address of the node."""
        return self.ip in _BIND_ALL

    def __str__(self) -> str:
        host = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"{host}:{self.port}/{self.protocol}"


class HostPortUsage:
    """The host ports already taken on one node (real or proposed).

    Mutable, because the solver adds pods to a NodeClaim one at a time; ``copy`` gives a
    NodeClaim its own usage seeded from its DaemonSet pods without touching the shared seed.
    """

    __slots__ = ("_by_port", "_shared")

    def __init__(self, ports: Iterable[HostPort] = ()) -> None:
        # (protocol, port) -> the addresses bound on it: a lookup per requested port, not a scan.
        self._by_port: dict[tuple[str, int], set[str]] = {}
        # Whether ``_by_port`` may be another usage's too (``copy``): copied before a change.
        self._shared = False
        self.add(ports)

    def add(self, ports: Iterable[HostPort]) -> None:
        """Record ``ports`` as taken (a pod placed on the node)."""
        for port in ports:
            if self._shared:
                self._by_port = {key: set(ips) for key, ips in self._by_port.items()}
                self._shared = False
            self._by_port.setdefault((port.protocol, port.port), set()).add(port.ip)

    def conflicts(self, ports: Iterable[HostPort]) -> HostPort | None:
        """The first of ``ports`` that is already taken here, or ``None`` if all are free."""
        for port in ports:
            taken = self._by_port.get((port.protocol, port.port))
            if not taken:
                continue
            if port.binds_all_addresses or port.ip in taken or not taken.isdisjoint(_BIND_ALL):
                return port
        return None

    def copy(self) -> HostPortUsage:
        """An independent usage with the same ports. Copy-on-write: a consolidation solve copies
        every existing node's usage (10,000 of them) and changes a few, so the two share what
        they hold until either takes a port."""
        clone = HostPortUsage.__new__(HostPortUsage)  # no empty dict made only to be dropped
        clone._by_port = self._by_port
        clone._shared = self._shared = True
        return clone

    def __iter__(self) -> Iterator[HostPort]:
        for (protocol, port), ips in sorted(self._by_port.items()):
            for ip in sorted(ips):
                yield HostPort(ip, protocol, port)

    def __len__(self) -> int:
        return sum(len(ips) for ips in self._by_port.values())

    def __repr__(self) -> str:
        return f"HostPortUsage({', '.join(str(p) for p in self)})"
