"""The CAPA and Cluster API versions the ``CAPAFleet`` mode needs, checked at start.

The mode writes the AWSMachine CAPA adopts an instance through, and everything about it (its
schema, CAPA's webhooks as the simulator runs them, ``findInstance`` reading ``instanceID``) is
built and tested at ``infrastructure.cluster.x-k8s.io/v1beta2``, which CAPA serves from v2.0.0
(docs/aws.md, *Minimum versions*); current CAPA no longer serves v1beta1. Cluster API core is
needed at v1.0.0, as for every mode. How the versions are read and said on the NodeClass:
``generic_capi.provider_versions``.
"""

from __future__ import annotations

from typing import Final

from karpenter_capi.plugins.generic_capi.provider_versions import (
    cluster_api,
    infrastructure_provider,
)

NEEDED_BY: Final = "spec.launch.mode CAPAFleet"
CAPA: Final = infrastructure_provider(
    "aws",
    "CAPA",
    (2, 0, 0),
    NEEDED_BY,
    "the first release serving infrastructure.cluster.x-k8s.io/v1beta2, the AWSMachine API "
    "it writes and is tested at",
)
NEEDS: Final = (CAPA, cluster_api(NEEDED_BY))
