"""The plugin's launch template: one per NodeClass, a new version only when the NodeClass drifts.

EC2 Fleet overrides carry no user data, and a kubeadm node's bootstrap data (its join token)
is its own, so the data cannot be in a template shared by every node. It goes where stock CAPA
puts it: AWS Secrets Manager, under CAPA's prefix ``aws.cluster.x-k8s.io/`` (which CAPA's
node IAM policy lets nodes read and delete), named after the instance:
``aws.cluster.x-k8s.io/<instance id>-<chunk>`` (``bootstrap_secret``). The launch template's
user data is the same for every node of the NodeClass: a cloud-init boothook that reads the
instance's ID from the instance metadata service, waits for that secret, writes the data out
for cloud-init and deletes the secret, as CAPA's own ``secret_fetch_script.go`` does for a
prefix it knows in advance. The AWSMachine then names the secret (``cloudInit.secretPrefix``,
``secretCount``), so CAPA deletes it once the node registered if the node did not.

The template is named after the cluster and NodeClass. What it launches (image, instance
profile, security groups, metadata options, volumes, SSH key, placement, tags of volumes and
network interfaces, the boothook) is hashed into the version's description; a launch whose
NodeClass changed (a new AMI, another security group) adds a version and makes it the default
(drift), every other launch reuses the current one without writing to EC2. So the EC2 writes of
one node are its ``CreateFleet`` and the tags it carries.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Mapping
from typing import Any, Final

from karpenter_capi.plugins.capa.fleet_target import FleetTarget

TEMPLATE_PREFIX: Final = "karpenter-capi"
DESCRIPTION_PREFIX: Final = "karpenter-capi nodeclass "
_NOT_FOUND: Final = frozenset(
    {
        "InvalidLaunchTemplateName.NotFoundException",
        "InvalidLaunchTemplateId.NotFound",
        "InvalidLaunchTemplateId.VersionNotFound",
        "InvalidLaunchTemplateName.NotFound",
    }
)
_EXISTS: Final = "InvalidLaunchTemplateName.AlreadyExistsException"
_METADATA_NAMES: Final = {
    "httpEndpoint": "HttpEndpoint",
    "httpProtocolIpv6": "HttpProtocolIpv6",
    "httpPutResponseHopLimit": "HttpPutResponseHopLimit",
    "httpTokens": "HttpTokens",
    "instanceMetadataTags": "InstanceMetadataTags",
}
_VOLUME_NAMES: Final = {
    "size": "VolumeSize",
    "type": "VolumeType",
    "iops": "Iops",
    "throughput": "Throughput",
    "encrypted": "Encrypted",
    "encryptionKey": "KmsKeyId",
}
ROOT_DEVICE: Final = "/dev/xvda"
"""The root device of the Amazon Linux and Ubuntu AMIs CAPA publishes; see ``_volumes``."""


def error_code(error: Exception) -> str:
    """The AWS error code of a botocore ``ClientError`` (``""`` for anything else)."""
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))


def template_name(target: FleetTarget) -> str:
    """``karpenter-capi/<namespace>/<cluster>/<nodeclass>`` in the characters EC2 allows."""
    raw = f"{TEMPLATE_PREFIX}/{target.namespace}/{target.cluster}/{target.nodeclass}"
    return re.sub(r"[^A-Za-z0-9()./_-]", "_", raw)[:128]


def metadata_request(target: FleetTarget) -> dict[str, Any]:
    """The launch template's ``MetadataOptions``: the template's, as CAPA defaults them."""
    return {
        aws: target.metadata_options[name]
        for name, aws in _METADATA_NAMES.items()
        if name in target.metadata_options
    }


def _ebs(volume: Mapping[str, Any]) -> dict[str, Any]:
    ebs = {aws: volume[name] for name, aws in _VOLUME_NAMES.items() if volume.get(name)}
    ebs["DeleteOnTermination"] = True
    return ebs


def _volumes(machine: Mapping[str, Any]) -> list[dict[str, Any]]:
    """CAPA's ``rootVolume`` and ``nonRootVolumes`` as block device mappings. CAPA reads the
    AMI's root device name; the AMIs it publishes use ``/dev/xvda``, which is used unless the
    template names one."""
    found: list[dict[str, Any]] = []
    root = machine.get("rootVolume")
    if isinstance(root, Mapping):
        found.append({"DeviceName": str(root.get("deviceName") or ROOT_DEVICE), "Ebs": _ebs(root)})
    for volume in machine.get("nonRootVolumes") or []:
        if isinstance(volume, Mapping) and volume.get("deviceName"):
            found.append({"DeviceName": str(volume["deviceName"]), "Ebs": _ebs(volume)})
    return found


def _placement(machine: Mapping[str, Any]) -> dict[str, Any]:
    placement: dict[str, Any] = {}
    if machine.get("tenancy"):
        placement["Tenancy"] = str(machine["tenancy"])
    if machine.get("placementGroupName"):
        placement["GroupName"] = str(machine["placementGroupName"])
    if machine.get("placementGroupPartition"):
        placement["PartitionNumber"] = int(machine["placementGroupPartition"])
    return placement


def resource_tags(target: FleetTarget) -> list[dict[str, str]]:
    """The tags CAPA puts on what it launches for the cluster, and the NodeClass's."""
    tags = {
        f"sigs.k8s.io/cluster-api-provider-aws/cluster/{target.cluster}": "owned",
        f"kubernetes.io/cluster/{target.cluster}": "owned",
        "sigs.k8s.io/cluster-api-provider-aws/role": "node",
        "karpenter.cluster.x-k8s.io/nodeclass": target.nodeclass,
    }
    additional = target.machine_spec.get("additionalTags") or {}
    if isinstance(additional, Mapping):
        tags.update({str(k): str(v) for k, v in additional.items()})
    return [{"Key": key, "Value": value} for key, value in tags.items()]


def template_data(target: FleetTarget, user_data: str) -> dict[str, Any]:
    """What every instance of the NodeClass is launched with (overrides add type and subnet)."""
    machine = target.machine_spec
    data: dict[str, Any] = {
        "ImageId": target.image_id,
        "UserData": user_data,
        "MetadataOptions": metadata_request(target),
        "TagSpecifications": [
            {"ResourceType": kind, "Tags": resource_tags(target)}
            for kind in ("volume", "network-interface")
        ],
    }
    public = machine.get("publicIP")
    if isinstance(public, bool):
        # As upstream Karpenter (launchtemplate.go: generateNetworkInterfaces): the primary
        # interface asks for the address and carries the groups, since EC2 refuses
        # SecurityGroupIds next to NetworkInterfaces; the subnet still comes from the override.
        data["NetworkInterfaces"] = [
            {
                "DeviceIndex": 0,
                "AssociatePublicIpAddress": public,
                "Groups": list(target.security_groups),
                "DeleteOnTermination": True,
            }
        ]
    elif target.security_groups:
        data["SecurityGroupIds"] = list(target.security_groups)
    if target.instance_profile:
        data["IamInstanceProfile"] = {"Name": target.instance_profile}
    volumes = _volumes(machine)
    if volumes:
        data["BlockDeviceMappings"] = volumes
    if machine.get("sshKeyName"):
        data["KeyName"] = str(machine["sshKeyName"])
    placement = _placement(machine)
    if placement:
        data["Placement"] = placement
    return data


def fingerprint(data: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:32]


class LaunchTemplates:
    """The NodeClasses' launch templates, remembered between launches (one EC2 read after a
    restart, none after that while the NodeClass is unchanged)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[tuple[str, str], tuple[str, int]] = {}
        self.writes = 0
        """Launch template writes (creations and new versions): drift, not launches."""

    def ensure(self, ec2: Any, target: FleetTarget, user_data: str) -> tuple[str, int]:
        """``(template id, version)`` launching ``target``'s current data, written if missing."""
        name = template_name(target)
        data = template_data(target, user_data)
        description = DESCRIPTION_PREFIX + fingerprint(data)
        with self._lock:
            known = self._known.get((name, description))
        if known is not None:
            return known
        found = self._find(ec2, name, description)
        if found is None:
            found = self._write(ec2, name, data, description, target)
        with self._lock:
            self._known[(name, description)] = found
        return found

    def forget(self, target: FleetTarget) -> None:
        """Read the template again next time (it was deleted or changed behind our back)."""
        name = template_name(target)
        with self._lock:
            for key in [k for k in self._known if k[0] == name]:
                del self._known[key]

    def _find(self, ec2: Any, name: str, description: str) -> tuple[str, int] | None:
        try:
            found = ec2.describe_launch_template_versions(
                LaunchTemplateName=name, Versions=["$Default"]
            )
        except Exception as exc:
            if error_code(exc) not in _NOT_FOUND:
                raise
            return None
        for version in found.get("LaunchTemplateVersions") or []:
            if version.get("VersionDescription") == description:
                return str(version["LaunchTemplateId"]), int(version["VersionNumber"])
        return None

    def _write(
        self,
        ec2: Any,
        name: str,
        data: dict[str, Any],
        description: str,
        target: FleetTarget,
    ) -> tuple[str, int]:
        with self._lock:
            self.writes += 1
        try:
            created = ec2.create_launch_template(
                LaunchTemplateName=name,
                VersionDescription=description,
                LaunchTemplateData=data,
                TagSpecifications=[
                    {"ResourceType": "launch-template", "Tags": resource_tags(target)}
                ],
            )
            template = created["LaunchTemplate"]
            return str(template["LaunchTemplateId"]), int(template["LatestVersionNumber"])
        except Exception as exc:
            if error_code(exc) != _EXISTS:
                raise
        # Another launch of the NodeClass may have just written this very data.
        again = self._find(ec2, name, description)
        if again is not None:
            return again
        # The NodeClass drifted: its new data becomes the template's default version.
        version = ec2.create_launch_template_version(
            LaunchTemplateName=name,
            VersionDescription=description,
            LaunchTemplateData=data,
            ClientToken=description[-32:],
        )["LaunchTemplateVersion"]
        number = int(version["VersionNumber"])
        ec2.modify_launch_template(LaunchTemplateName=name, DefaultVersion=str(number))
        return str(version["LaunchTemplateId"]), number
