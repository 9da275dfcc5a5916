"""What EC2 gives a fleet's instances from their launch template and moto leaves out.

moto's ``CreateFleet`` launches each instance from the override's type, subnet and image but
drops most of the launch template: the instance gets moto's default metadata options (IMDSv1
allowed, hop limit 1) and the subnet's default security group, whatever the template says. The
emulated CAPA compares exactly those with its AWSMachine and rewrites them when they differ
(``ensureInstanceMetadataOptions``, ``ensureSecurityGroups``), so with moto alone an instance
launched right would look wrong and the other way round. ``LaunchTemplateEffects`` is attached
to the plugin's EC2 client and, after each ``CreateFleet``, gives the launched instances the
launch template version's ``MetadataOptions`` and ``SecurityGroupIds`` the way EC2 does, through
a client of its own so the plugin's EC2 call counts stay its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

_METADATA_FIELDS: Final = (
    "HttpTokens",
    "HttpPutResponseHopLimit",
    "HttpEndpoint",
    "HttpProtocolIpv6",
    "InstanceMetadataTags",
)


class LaunchTemplateEffects:
    """Applies a fleet's launch template to the instances moto launched for it."""

    def __init__(self, ec2: Any) -> None:
        self.ec2 = ec2
        """The client that reads the template and writes the instances (not the plugin's)."""
        self._request: dict[str, Any] = {}

    def attach(self, client: Any) -> Any:
        """Watch ``client``'s ``CreateFleet`` calls; returns ``client``."""
        events = client.meta.events
        events.register("provide-client-params.ec2.CreateFleet", self._remember)
        events.register("after-call.ec2.CreateFleet", self._apply)
        return client

    def _remember(self, params: Mapping[str, Any], **_: Any) -> None:
        self._request = dict(params)

    def _template_data(self) -> Mapping[str, Any]:
        configs = self._request.get("LaunchTemplateConfigs") or []
        spec = (configs[0] if configs else {}).get("LaunchTemplateSpecification") or {}
        if not spec.get("LaunchTemplateId"):
            return {}
        found = self.ec2.describe_launch_template_versions(
            LaunchTemplateId=spec["LaunchTemplateId"],
            Versions=[str(spec.get("Version", "$Default"))],
        )["LaunchTemplateVersions"]
        return found[0].get("LaunchTemplateData") or {} if found else {}

    def _apply(self, parsed: Mapping[str, Any], **_: Any) -> None:
        launched = [
            i for entry in parsed.get("Instances") or [] for i in entry.get("InstanceIds") or []
        ]
        if not launched:
            return
        data = self._template_data()
        options = {
            k: v for k, v in (data.get("MetadataOptions") or {}).items() if k in _METADATA_FIELDS
        }
        interfaces = data.get("NetworkInterfaces") or [{}]
        groups = list(data.get("SecurityGroupIds") or interfaces[0].get("Groups") or [])
        for instance_id in launched:
            if options:
                # moto's modify clears every option it is not given; EC2 keeps them.
                current = self.ec2.describe_instances(InstanceIds=[instance_id])
                have = current["Reservations"][0]["Instances"][0].get("MetadataOptions") or {}
                merged = {k: have[k] for k in _METADATA_FIELDS if have.get(k) is not None}
                self.ec2.modify_instance_metadata_options(
                    InstanceId=instance_id, **{**merged, **options}
                )
            if groups:
                self.ec2.modify_instance_attribute(InstanceId=instance_id, Groups=groups)
