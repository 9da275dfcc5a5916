"""Interruption handling: NodeClaims whose machines the cloud is about to take, replaced early.

``controller`` acts on notices from the plugins' queues (``karpenter_capi_interruptions``) and
from the Nodes' own marks (``signals``); ``docs/aws.md`` and ``docs/lifecycle.md`` describe the
behaviour for users.
"""

from karpenter_capi.core.interruption.controller import InterruptionController
from karpenter_capi.core.interruption.signals import node_notices

__all__ = ["InterruptionController", "node_notices"]
