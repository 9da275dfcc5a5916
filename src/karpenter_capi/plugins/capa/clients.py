"""How the ``capa`` plugin gets its AWS clients.

Everything that talks to AWS asks an ``AwsClients`` for a client of one region, so tests hand
in moto-backed or Stubber-wrapped clients without monkeypatching, and production uses
``Boto3Clients``: boto3's default credential chain (environment, web identity / IRSA, instance
profile), standard retries, and timeouts short enough that a provisioning round never hangs on
an unreachable endpoint. No credential is ever read or logged here.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

import boto3
from botocore.config import Config

_CONFIG = Config(
    retries={"max_attempts": 5, "mode": "standard"},
    connect_timeout=10,
    read_timeout=30,
    user_agent_extra="karpenter-capi",
)


class AwsClients(Protocol):
    """A factory of boto3 clients; implementations must be thread-safe."""

    def ec2(self, region: str) -> Any:
        """An EC2 client for ``region``."""
        ...

    def pricing(self, region: str) -> Any:
        """A Pricing client whose endpoint is in ``region`` (see ``pricing.pricing_region``)."""
        ...

    def sqs(self, region: str) -> Any:
        """An SQS client for ``region`` (the interruption queue)."""
        ...

    def secretsmanager(self, region: str) -> Any:
        """A Secrets Manager client for ``region`` (``CAPAFleet`` bootstrap data)."""
        ...


class Boto3Clients:
    """``AwsClients`` from one boto3 session, each client created once per region.

    A boto3 session is not thread-safe but its clients are, so clients are created under a lock
    and then shared.
    """

    def __init__(self, session: boto3.session.Session | None = None) -> None:
        self._session = session
        self._lock = threading.Lock()
        self._clients: dict[tuple[str, str], Any] = {}

    def _client(self, service: str, region: str) -> Any:
        with self._lock:
            client = self._clients.get((service, region))
            if client is None:
                if self._session is None:
                    self._session = boto3.session.Session()
                client = self._session.client(service, region_name=region, config=_CONFIG)
                self._clients[(service, region)] = client
            return client

    def ec2(self, region: str) -> Any:
        return self._client("ec2", region)

    def pricing(self, region: str) -> Any:
        return self._client("pricing", region)

    def sqs(self, region: str) -> Any:
        # SQS's ReceiveMessage long poll waits up to 20 s: read_timeout (30 s) leaves room.
        return self._client("sqs", region)

    def secretsmanager(self, region: str) -> Any:
        return self._client("secretsmanager", region)
