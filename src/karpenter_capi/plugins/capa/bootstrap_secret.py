"""A fleet node's bootstrap data in AWS Secrets Manager, where stock CAPA keeps it.

The launch template is shared by the NodeClass's nodes (``launch_template``), so each node's
kubeadm data travels the way CAPA's own launches carry it: gzipped, in 7,000-byte chunks
(cluster-api-provider-aws ``pkg/cloud/services/secretsmanager/secret.go: Create``), as binary
secrets ``aws.cluster.x-k8s.io/<instance id>-<n>``, tagged for the cluster. CAPA's node IAM
policy (clusterawsadm's ``nodes.cluster-api-provider-aws.sigs.k8s.io``) already lets a node read
and delete ``aws.cluster.x-k8s.io/*``.

The secret can only be written once the fleet has returned the instance ID, so the boothook in
the launch template waits for it: chunks are written last first, and chunk 0 last, so a node
that finds chunk 0 finds them all. The node deletes its chunks after reading them, and the
AWSMachine names them (``cloudInit.secretPrefix``, ``secretCount``), so CAPA deletes them once
the node registered (``controllers/awsmachine_controller.go: deleteEncryptedBootstrapDataSecret``)
if the node could not.

A process that dies after writing the secret and before the AWSMachine leaves secrets CAPA
never hears of; if the NodeClaim then goes (its instance terminated by ``delete``), nobody
would delete them. So each chunk is tagged with its NodeClaim (``karpenter.sh/nodeclaim``) and
the cluster, and ``sweep`` (run with garbage collection, minutes apart) deletes the chunks of
the cluster whose NodeClaim no longer exists.
"""

from __future__ import annotations

import base64
import gzip
import logging
from typing import Any, Final

from karpenter_capi.plugin_api import KubeClient
from karpenter_capi.plugin_api.kube import NODECLAIMS
from karpenter_capi.plugins.capa.fleet import TAG_NODECLAIM, capa_cluster_tag

log = logging.getLogger(__name__)

SECRET_PREFIX: Final = "aws.cluster.x-k8s.io/"
CHUNK_BYTES: Final = 7000
_EXISTS: Final = "ResourceExistsException"
_BOUNDARY: Final = "karpenter-capi-boundary"

_FETCH: Final = """#cloud-boothook
#!/bin/bash
# karpenter-capi: fetch this node's bootstrap data from AWS Secrets Manager, where the
# autoprovisioner puts it once EC2 Fleet returned the instance ID.
set -o nounset -o pipefail
FILE=/etc/secret-userdata.txt
[ -f "$FILE" ] && exit 0
imds() {
  local token
  token=$(curl -sf -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' \\
    http://169.254.169.254/latest/api/token || true)
  curl -sf ${token:+-H "X-aws-ec2-metadata-token: $token"} \\
    "http://169.254.169.254/latest/meta-data/$1"
}
INSTANCE=$(imds instance-id)
PREFIX="aws.cluster.x-k8s.io/${INSTANCE}"
get() {
  aws secretsmanager --region __REGION__ get-secret-value --output text \\
    --query SecretBinary --secret-id "${PREFIX}-$1"
}
for attempt in $(seq 1 90); do get 0 >/dev/null 2>&1 && break; sleep 10; done
rm -f "$FILE.gz"
chunk=0
while data=$(get "$chunk" 2>/dev/null); do
  echo "$data" | base64 -d >>"$FILE.gz"
  chunk=$((chunk + 1))
done
gunzip -f "$FILE.gz"
for i in $(seq 0 $((chunk - 1))); do
  aws secretsmanager --region __REGION__ delete-secret --force-delete-without-recovery \\
    --secret-id "${PREFIX}-$i" >/dev/null 2>&1 || true
done
"""


def prefix_for(instance_id: str) -> str:
    return f"{SECRET_PREFIX}{instance_id}"


def user_data(region: str) -> str:
    """The launch template's user data (base64): CAPA's shape, a MIME document with the
    fetching boothook and an include of the file it writes, for any node of ``region``."""
    script = _FETCH.replace("__REGION__", region)
    document = "\n".join(
        [
            "MIME-Version: 1.0",
            f'Content-Type: multipart/mixed; boundary="{_BOUNDARY}"',
            "",
            f"--{_BOUNDARY}",
            'Content-Type: text/cloud-boothook; charset="utf-8"',
            "",
            script,
            f"--{_BOUNDARY}",
            'Content-Type: text/x-include-url; charset="utf-8"',
            "",
            "file:///etc/secret-userdata.txt",
            "",
            f"--{_BOUNDARY}--",
            "",
        ]
    )
    return base64.b64encode(document.encode()).decode("ascii")


def chunks(data: bytes) -> list[bytes]:
    packed = gzip.compress(data, mtime=0)
    return [packed[i : i + CHUNK_BYTES] for i in range(0, len(packed), CHUNK_BYTES)] or [b""]


def store(secrets: Any, instance_id: str, data: bytes, tags: list[dict[str, str]]) -> int:
    """Write ``data`` for ``instance_id`` (repeatable: chunks already there are kept); returns
    the number of chunks (the AWSMachine's ``secretCount``)."""
    parts = chunks(data)
    prefix = prefix_for(instance_id)
    for index in reversed(range(len(parts))):
        try:
            secrets.create_secret(Name=f"{prefix}-{index}", SecretBinary=parts[index], Tags=tags)
        except Exception as exc:
            code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
            if code != _EXISTS:
                raise
    return len(parts)


def sweep(secrets: Any, cluster: str, workload: KubeClient) -> int:
    """Delete the bootstrap chunks of ``cluster`` whose NodeClaim (their
    ``karpenter.sh/nodeclaim`` tag) is not in ``workload``; returns how many went. The secrets
    are listed before the NodeClaims, so a NodeClaim made meanwhile (its secret comes later
    still) is never taken for gone."""
    cluster_tag, claim_tag = capa_cluster_tag(cluster), TAG_NODECLAIM
    found: list[tuple[str, str]] = []
    pages = secrets.get_paginator("list_secrets").paginate(
        Filters=[
            {"Key": "name", "Values": [SECRET_PREFIX]},
            {"Key": "tag-key", "Values": [claim_tag]},
        ]
    )
    for page in pages:
        for entry in page.get("SecretList") or []:
            tags = {t.get("Key"): t.get("Value") for t in entry.get("Tags") or []}
            if tags.get(cluster_tag) == "owned" and tags.get(claim_tag):
                found.append((str(entry["Name"]), str(tags[claim_tag])))
    if not found:
        return 0
    live = {str(c["metadata"]["name"]) for c in workload.list(NODECLAIMS).items}
    deleted = 0
    for name, claim in found:
        if claim in live:
            continue
        try:
            secrets.delete_secret(SecretId=name, ForceDeleteWithoutRecovery=True)
        except Exception as exc:  # one secret's error must not stop the sweep
            code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
            if code != "ResourceNotFoundException":
                log.warning("could not delete bootstrap secret %s: %s", name, exc)
            continue
        deleted += 1
        log.info("deleted bootstrap secret %s of NodeClaim %s, which is gone", name, claim)
    return deleted
