"""The plugin's launch template: one per NodeClass, one version per NodeClaim being launched.

EC2 Fleet overrides carry no user data, so each node's bootstrap data (the cloud-init that
Cluster API's kubeadm bootstrap provider wrote into the Machine's bootstrap secret) has to be in
a launch template version. The template is named after the cluster and NodeClass and its first
version holds only the image (version 1 is the default and cannot be deleted); each NodeClaim
gets a version described ``nodeclaim <uid>`` with the image, IAM instance profile, security
groups, the template's instance metadata options (CAPA's defaults where unset) and its user
data, which is deleted once the instance exists (the launch template
is not needed to run it).

Both steps are idempotent: a version is looked up by its description before one is created
(a controller that crashed after creating it finds it again, so the Fleet request and its
``ClientToken`` come out the same), and ``CreateLaunchTemplateVersion`` carries a client token
derived from the NodeClaim's UID as well.
"""

from __future__ import annotations

import base64
import gzip
import re
from typing import Any, Final

from karpenter_capi.plugins.capa.fleet_target import FleetTarget

TEMPLATE_PREFIX: Final = "karpenter-capi"
MAX_USER_DATA: Final = 16384
"""EC2's limit on user data before base64; larger bootstrap data is gzipped (cloud-init reads
gzip)."""
_NOT_FOUND: Final = frozenset(
    {
        "InvalidLaunchTemplateName.NotFoundException",
        "InvalidLaunchTemplateId.NotFound",
        "InvalidLaunchTemplateId.VersionNotFound",
        "InvalidLaunchTemplateName.NotFound",
    }
)
_EXISTS: Final = "InvalidLaunchTemplateName.AlreadyExistsException"


def error_code(error: Exception) -> str:
    """The AWS error code of a botocore ``ClientError`` (``""`` for anything else)."""
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))


def template_name(target: FleetTarget) -> str:
    """``karpenter-capi/<namespace>/<cluster>/<nodeclass>`` in the characters EC2 allows."""
    raw = f"{TEMPLATE_PREFIX}/{target.namespace}/{target.cluster}/{target.nodeclass}"
    return re.sub(r"[^A-Za-z0-9()./_-]", "_", raw)[:128]


def version_description(uid: str) -> str:
    return f"nodeclaim {uid}"


def encode_user_data(data: bytes) -> str:
    """Base64 user data, gzipped first when it would exceed EC2's limit."""
    if len(data) > MAX_USER_DATA:
        data = gzip.compress(data, mtime=0)
    return base64.b64encode(data).decode("ascii")


def _base_data(target: FleetTarget) -> dict[str, Any]:
    return {"ImageId": target.image_id}


_METADATA_NAMES: Final = {
    "httpEndpoint": "HttpEndpoint",
    "httpProtocolIpv6": "HttpProtocolIpv6",
    "httpPutResponseHopLimit": "HttpPutResponseHopLimit",
    "httpTokens": "HttpTokens",
    "instanceMetadataTags": "InstanceMetadataTags",
}


def metadata_request(target: FleetTarget) -> dict[str, Any]:
    """The launch template's ``MetadataOptions``: the template's, as CAPA defaults them."""
    return {
        aws: target.metadata_options[name]
        for name, aws in _METADATA_NAMES.items()
        if name in target.metadata_options
    }


def node_data(target: FleetTarget, user_data: bytes) -> dict[str, Any]:
    """One NodeClaim's launch template data (the Fleet overrides add type, subnet, zone)."""
    data: dict[str, Any] = {
        "ImageId": target.image_id,
        "UserData": encode_user_data(user_data),
        "MetadataOptions": metadata_request(target),
    }
    if target.security_groups:
        data["SecurityGroupIds"] = list(target.security_groups)
    if target.instance_profile:
        data["IamInstanceProfile"] = {"Name": target.instance_profile}
    return data


def ensure_template(ec2: Any, target: FleetTarget) -> str:
    """The id of the NodeClass's launch template, created when missing."""
    name = template_name(target)
    try:
        found = ec2.describe_launch_templates(LaunchTemplateNames=[name])
        templates = found.get("LaunchTemplates") or []
        if templates:
            return str(templates[0]["LaunchTemplateId"])
    except Exception as exc:
        if error_code(exc) not in _NOT_FOUND:
            raise
    try:
        created = ec2.create_launch_template(
            LaunchTemplateName=name,
            LaunchTemplateData=_base_data(target),
            TagSpecifications=[
                {
                    "ResourceType": "launch-template",
                    "Tags": [
                        {"Key": "karpenter.cluster.x-k8s.io/nodeclass", "Value": target.nodeclass},
                        {
                            "Key": f"sigs.k8s.io/cluster-api-provider-aws/cluster/{target.cluster}",
                            "Value": "owned",
                        },
                    ],
                }
            ],
        )
    except Exception as exc:
        if error_code(exc) != _EXISTS:
            raise
        found = ec2.describe_launch_templates(LaunchTemplateNames=[name])
        return str(found["LaunchTemplates"][0]["LaunchTemplateId"])
    return str(created["LaunchTemplate"]["LaunchTemplateId"])


def find_version(ec2: Any, template_id: str, uid: str) -> int | None:
    """The version made for NodeClaim ``uid``, if one exists."""
    wanted = version_description(uid)
    paginator = ec2.get_paginator("describe_launch_template_versions")
    for page in paginator.paginate(LaunchTemplateId=template_id):
        for version in page.get("LaunchTemplateVersions") or []:
            if version.get("VersionDescription") == wanted:
                return int(version["VersionNumber"])
    return None


def ensure_version(
    ec2: Any, template_id: str, uid: str, target: FleetTarget, user_data: bytes
) -> int:
    """NodeClaim ``uid``'s version of the template, created with its user data when missing."""
    found = find_version(ec2, template_id, uid)
    if found is not None:
        return found
    created = ec2.create_launch_template_version(
        LaunchTemplateId=template_id,
        VersionDescription=version_description(uid),
        LaunchTemplateData=node_data(target, user_data),
        ClientToken=f"lt-{uid}"[:64],
    )
    return int(created["LaunchTemplateVersion"]["VersionNumber"])


def delete_version(ec2: Any, template_id: str, version: int) -> None:
    """Delete one NodeClaim's version (already gone is fine)."""
    try:
        ec2.delete_launch_template_versions(LaunchTemplateId=template_id, Versions=[str(version)])
    except Exception as exc:
        if error_code(exc) not in _NOT_FOUND:
            raise
