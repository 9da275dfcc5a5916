"""One EC2 ``CreateFleet`` per NodeClaim: EC2 chooses among every compatible offering at once.

The request is the one Karpenter's AWS provider sends: type ``instant`` (synchronous, no fleet
left behind), ``TotalTargetCapacity`` 1, spot with ``price-capacity-optimized`` or on-demand
with ``lowest-price``, and one launch template config whose overrides are (instance type x
zone) overrides for the 60 cheapest instance types of the NodeClaim's compatible offerings,
each in every zone it is offered in, through the zone's subnet with the most free addresses,
leaving out offerings in the unavailable-offerings cache and subnets recently out of addresses
(``InsufficientFreeAddressesInSubnet``), as upstream Karpenter does.

Spot is asked for whenever the NodeClaim allows spot and some spot offering is left, on-demand
otherwise (one fleet asks for one capacity type, as upstream).

Tags: what stock CAPA puts on the instances it launches (so that after adoption nothing
differs: CAPA rewrites tags it owns), plus ``karpenter.sh/nodeclaim``, which is how a restarted
controller finds an instance it launched before it could record it (``find_launched``) and how
garbage collection finds instances nobody recorded.

``ClientToken``: derived from the NodeClaim's UID and the request itself (the launch template
version and overrides). A retry of the same request (a timeout, a crash before the tags were
visible) returns the instance of the first; after a capacity error the cache changes the
overrides and so the token, since EC2 would otherwise answer the new request with the old
failure (a token is bound to its first request's parameters).

Capacity errors in ``Errors[]`` (``InsufficientInstanceCapacity`` and friends, the codes
Karpenter treats as "unfulfillable") mark their offering unavailable for 3 minutes; when no
instance came back the caller raises ``InsufficientCapacityError`` and the NodeClaim's pods are
scheduled again against what is left.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from karpenter_capi.plugin_api import InstanceType
from karpenter_capi.plugin_api.karpenter import wellknown
from karpenter_capi.plugins._cloud.unavailable import UnavailableOfferings

MAX_OVERRIDES: Final = 60
TAG_NODECLAIM: Final = "karpenter.sh/nodeclaim"
TAG_NODEPOOL: Final = "karpenter.sh/nodepool"
TAG_NODECLASS: Final = "karpenter.cluster.x-k8s.io/nodeclass"
TAG_CAPA_ROLE: Final = "sigs.k8s.io/cluster-api-provider-aws/role"
CAPACITY_ERROR_CODES: Final = frozenset(
    {
        "InsufficientInstanceCapacity",
        "MaxSpotInstanceCountExceeded",
        "VcpuLimitExceeded",
        "UnfulfillableCapacity",
        "Unsupported",
        "InsufficientFreeAddressesInSubnet",
        "MaxFleetCountExceeded",
        "ReservationCapacityExceeded",
    }
)
LIVE_STATES: Final = ("pending", "running", "stopping", "stopped")
FULL_SUBNET: Final = "InsufficientFreeAddressesInSubnet"


def capa_cluster_tag(cluster: str) -> str:
    return f"sigs.k8s.io/cluster-api-provider-aws/cluster/{cluster}"


@dataclass(frozen=True, order=True)
class Candidate:
    """One override: an instance type in one zonal subnet, at its offering's price."""

    price: float
    instance_type: str
    zone: str
    subnet_id: str
    capacity_type: str = field(compare=False)


@dataclass(frozen=True)
class LaunchedInstance:
    """The instance a fleet returned (or one found by its tag)."""

    instance_id: str
    instance_type: str
    zone: str
    subnet_id: str | None
    capacity_type: str
    image_id: str | None = None

    @property
    def provider_id(self) -> str:
        return f"aws:///{self.zone}/{self.instance_id}"


@dataclass(frozen=True)
class FleetOutcome:
    instance: LaunchedInstance | None
    errors: tuple[tuple[str, str, str, str], ...] = ()
    """(instance type, zone, code, message) of each error EC2 reported."""
    full_subnets: tuple[str, ...] = ()
    """Subnets an ``InsufficientFreeAddressesInSubnet`` error named."""


def candidates(
    instance_types: Iterable[InstanceType],
    subnets: Mapping[str, Sequence[str]],
    unavailable: UnavailableOfferings,
) -> list[Candidate]:
    """Every (type, zonal subnet, capacity type) the NodeClaim may launch, cheapest first."""
    found: list[Candidate] = []
    for instance_type in instance_types:
        for offering in instance_type.available_offerings():
            if unavailable.is_unavailable(
                instance_type.name, offering.zone, offering.capacity_type
            ):
                continue
            for subnet in subnets.get(offering.zone, ()):
                found.append(
                    Candidate(
                        offering.price,
                        instance_type.name,
                        offering.zone,
                        subnet,
                        offering.capacity_type,
                    )
                )
    return sorted(found)


def capacity_type_for(found: Sequence[Candidate]) -> str | None:
    """Spot when any spot candidate is left, else on-demand; ``None`` when nothing is."""
    types = {c.capacity_type for c in found}
    if wellknown.CAPACITY_TYPE_SPOT in types:
        return wellknown.CAPACITY_TYPE_SPOT
    if wellknown.CAPACITY_TYPE_ON_DEMAND in types:
        return wellknown.CAPACITY_TYPE_ON_DEMAND
    return None


def zonal_subnets(
    subnets: Mapping[str, Sequence[str]],
    free_addresses: Mapping[str, int],
    full: Callable[[str], bool],
) -> dict[str, str]:
    """Per zone, the subnet to launch into: the one with the most free IP addresses among those
    not recently out of them (upstream Karpenter's ``subnet.go: ZonalSubnetsForLaunch``); a
    subnet whose count is unknown ranks last, ties keep the listed order."""
    chosen: dict[str, str] = {}
    for zone, ids in subnets.items():
        usable = [s for s in ids if not full(s)]
        if usable:
            chosen[zone] = max(usable, key=lambda s: free_addresses.get(s, -1))
    return chosen


def overrides(
    found: Sequence[Candidate], capacity_type: str, zonal: Mapping[str, str]
) -> list[Candidate]:
    """The ``MAX_OVERRIDES`` cheapest instance types of ``capacity_type``, each in every zone
    it is offered in, through that zone's subnet (upstream Karpenter's ``instance.go:
    getOverrides`` after ``Truncate(..., maxInstanceTypes)``), cheapest first."""
    chosen = [
        c for c in found if c.capacity_type == capacity_type and zonal.get(c.zone) == c.subnet_id
    ]
    types = list(dict.fromkeys(c.instance_type for c in chosen))[:MAX_OVERRIDES]
    kept = set(types)
    return [c for c in chosen if c.instance_type in kept]


def client_token(uid: str, template_version: int, chosen: Sequence[Candidate], kind: str) -> str:
    """A token unique to this NodeClaim and request (EC2 allows 64 ASCII characters)."""
    body = json.dumps(
        [template_version, kind, [(c.instance_type, c.subnet_id) for c in chosen]],
        separators=(",", ":"),
    )
    digest = hashlib.sha256(body.encode()).hexdigest()[:16]
    return f"{uid}-{digest}"[:64]


def instance_tags(
    cluster: str,
    machine_name: str,
    nodeclaim: str,
    nodepool: str | None,
    nodeclass: str,
    *,
    namespace: str,
) -> list[dict[str, str]]:
    """The tags of the instance: stock CAPA's for a node (``MachineName`` is
    ``<namespace>/<machine>``, api/v1beta2/tags.go: ``WithMachineName``), then Karpenter's."""
    tags = {
        capa_cluster_tag(cluster): "owned",
        f"kubernetes.io/cluster/{cluster}": "owned",
        TAG_CAPA_ROLE: "node",
        "Name": machine_name,
        "MachineName": f"{namespace}/{machine_name}",
        TAG_NODECLAIM: nodeclaim,
        TAG_NODECLASS: nodeclass,
    }
    if nodepool:
        tags[TAG_NODEPOOL] = nodepool
    return [{"Key": key, "Value": value} for key, value in tags.items()]


def fleet_request(
    *,
    template_id: str,
    template_version: int,
    chosen: Sequence[Candidate],
    capacity_type: str,
    image_id: str,
    token: str,
    tags: Sequence[Mapping[str, str]],
) -> dict[str, Any]:
    """The ``CreateFleet`` parameters (see the module docstring)."""
    spot = capacity_type == wellknown.CAPACITY_TYPE_SPOT
    request: dict[str, Any] = {
        "Type": "instant",
        "ClientToken": token,
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": 1,
            "DefaultTargetCapacityType": "spot" if spot else "on-demand",
        },
        "LaunchTemplateConfigs": [
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateId": template_id,
                    "Version": str(template_version),
                },
                "Overrides": [
                    {
                        "InstanceType": c.instance_type,
                        "SubnetId": c.subnet_id,
                        "AvailabilityZone": c.zone,
                        "ImageId": image_id,
                    }
                    for c in chosen
                ],
            }
        ],
        "TagSpecifications": [
            {"ResourceType": kind, "Tags": [dict(tag) for tag in tags]}
            # An instant fleet tags only itself and its instances; volumes and network
            # interfaces get the NodeClass's tags from the launch template.
            for kind in ("instance", "fleet")
        ],
    }
    if spot:
        request["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized"}
    else:
        request["OnDemandOptions"] = {"AllocationStrategy": "lowest-price"}
    return request


def parse_response(
    response: Mapping[str, Any], chosen: Sequence[Candidate], capacity_type: str
) -> FleetOutcome:
    """The instance a ``CreateFleet`` response carries, and its errors."""
    by_subnet = {c.subnet_id: c.zone for c in chosen}
    errors: list[tuple[str, str, str, str]] = []
    full: list[str] = []
    for error in response.get("Errors") or []:
        override = (error.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        if error.get("ErrorCode") == FULL_SUBNET and override.get("SubnetId"):
            full.append(str(override["SubnetId"]))
        zone = str(
            override.get("AvailabilityZone") or by_subnet.get(str(override.get("SubnetId")), "")
        )
        errors.append(
            (
                str(override.get("InstanceType") or ""),
                zone,
                str(error.get("ErrorCode") or ""),
                str(error.get("ErrorMessage") or ""),
            )
        )
    for launched in response.get("Instances") or []:
        ids = launched.get("InstanceIds") or []
        if not ids:
            continue
        override = (launched.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        subnet = override.get("SubnetId")
        zone = str(override.get("AvailabilityZone") or by_subnet.get(str(subnet), ""))
        lifecycle = str(launched.get("Lifecycle") or "")
        kind = (
            wellknown.CAPACITY_TYPE_SPOT
            if lifecycle == "spot"
            else wellknown.CAPACITY_TYPE_ON_DEMAND
            if lifecycle == "on-demand"
            else capacity_type
        )
        return FleetOutcome(
            LaunchedInstance(
                instance_id=str(ids[0]),
                instance_type=str(launched.get("InstanceType") or override.get("InstanceType")),
                zone=zone,
                subnet_id=str(subnet) if subnet else None,
                capacity_type=kind,
                image_id=override.get("ImageId"),
            ),
            tuple(errors),
            tuple(full),
        )
    return FleetOutcome(None, tuple(errors), tuple(full))


def mark_capacity_errors(
    outcome: FleetOutcome, capacity_type: str, unavailable: UnavailableOfferings
) -> list[str]:
    """Put every offering a capacity error names in the cache; the messages, for logs."""
    messages = []
    for instance_type, zone, code, message in outcome.errors:
        messages.append(f"{instance_type or '?'} in {zone or '?'}: {code}: {message}")
        # An image of another architecture than the type's is that offering's failure too, not
        # one to retry (the inventory filters by the AMI's architecture; this catches an AMI
        # replaced behind the cache).
        mismatch = "architecture" in message.lower()
        if (code in CAPACITY_ERROR_CODES or mismatch) and instance_type and zone:
            unavailable.mark(instance_type, zone, capacity_type, f"{code}: {message}"[:200])
    return messages


def launched_from_description(raw: Mapping[str, Any]) -> LaunchedInstance:
    """A ``DescribeInstances`` instance as a ``LaunchedInstance``."""
    zone = str((raw.get("Placement") or {}).get("AvailabilityZone") or "")
    spot = raw.get("InstanceLifecycle") == "spot"
    return LaunchedInstance(
        instance_id=str(raw["InstanceId"]),
        instance_type=str(raw.get("InstanceType") or ""),
        zone=zone,
        subnet_id=raw.get("SubnetId"),
        capacity_type=wellknown.CAPACITY_TYPE_SPOT if spot else wellknown.CAPACITY_TYPE_ON_DEMAND,
        image_id=raw.get("ImageId"),
    )


def tagged_instances(ec2: Any, filters: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Live instances matching ``filters`` (terminated and shutting-down ones are gone)."""
    found: list[Mapping[str, Any]] = []
    paginator = ec2.get_paginator("describe_instances")
    wanted = [*filters, {"Name": "instance-state-name", "Values": list(LIVE_STATES)}]
    for page in paginator.paginate(Filters=wanted):
        for reservation in page.get("Reservations") or []:
            found.extend(reservation.get("Instances") or [])
    return found


def find_launched(ec2: Any, cluster: str, nodeclaim: str) -> list[LaunchedInstance]:
    """The live instances tagged for ``nodeclaim`` in ``cluster``, oldest first."""
    raw = tagged_instances(
        ec2,
        [
            {"Name": f"tag:{TAG_NODECLAIM}", "Values": [nodeclaim]},
            {"Name": f"tag:{capa_cluster_tag(cluster)}", "Values": ["owned"]},
        ],
    )
    raw = sorted(raw, key=lambda i: (str(i.get("LaunchTime") or ""), str(i["InstanceId"])))
    return [launched_from_description(i) for i in raw]


def terminate(ec2: Any, instance_ids: Sequence[str]) -> None:
    """Terminate instances (already gone is fine)."""
    if not instance_ids:
        return
    try:
        ec2.terminate_instances(InstanceIds=list(instance_ids))
    except Exception as exc:
        code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
        if code != "InvalidInstanceID.NotFound":
            raise
