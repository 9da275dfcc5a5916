"""``CAPAFleet`` launch and delete: the steps of one NodeClaim, each safe to repeat.

``create`` is called again and again until it answers with a provider ID (the hook contract);
every call starts over from what exists, so a controller killed between any two steps finds
the work done so far and goes on:

1. the Machine, then its KubeadmConfig (``adopt``), named after the NodeClaim;
2. an AWSMachine already there means the launch is over: answer from it;
3. an instance already tagged for the NodeClaim (a crash after ``CreateFleet``) is used
   instead of launching again (any further one is a duplicate and is terminated);
4. no bootstrap data yet (``Machine.spec.bootstrap.dataSecretName`` unset): answer without a
   provider ID, naming the cheapest candidate, and be asked again;
5. the NodeClass's launch template (``launch_template``: written only when missing or when the
   NodeClass drifted, never per node);
6. ``CreateFleet`` (``fleet``): capacity errors go to the unavailable cache, and with no
   instance the NodeClaim fails with ``InsufficientCapacityError``;
7. the bootstrap data in Secrets Manager under the instance's ID (``bootstrap_secret``), where
   the instance's boothook is waiting for it;
8. the AWSMachine naming the instance and the secret (stock CAPA adopts it), and the answer
   carries the instance's provider ID, type, zone and capacity type.

``delete`` deletes the Machine (CAPI drains the node, CAPA terminates the instance) and, while
no AWSMachine exists (CAPA knows no instance to terminate), terminates the instances tagged for
the NodeClaim itself; it raises ``InstanceNotFoundError`` once neither Machine nor live
instance is left. ``get`` and ``list`` read the AWSMachines and the tagged instances; garbage
collection hands ``delete`` an orphan whose ``Instance.name`` says which Machine or instance.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from karpenter_capi.plugin_api import (
    Clock,
    Instance,
    InstanceNotFoundError,
    InstanceType,
    InsufficientCapacityError,
    KubeClient,
    LaunchResult,
    NodeClaim,
    NodeClassNotReadyError,
    RetryableCreateError,
)
from karpenter_capi.plugin_api.karpenter import NodeClass, wellknown
from karpenter_capi.plugin_api.kube import (
    CAPI_INFRASTRUCTURE_GROUP,
    CLUSTER_API_NODE_CLASSES,
    SECRETS,
    AlreadyExists,
    ApiError,
    CapiResources,
    JsonObject,
    NotFound,
    capi_resources,
)
from karpenter_capi.plugins._cloud.unavailable import ExpiringMarks, UnavailableOfferings
from karpenter_capi.plugins.capa import adopt, bootstrap_secret, fleet, launch_template
from karpenter_capi.plugins.capa.clients import AwsClients
from karpenter_capi.plugins.capa.fleet_target import (
    FleetTarget,
    fleet_launch,
    resolve_target,
)

log = logging.getLogger(__name__)

ORPHAN_ANNOTATION: Final = "karpenter.cluster.x-k8s.io/orphaned-instance"
"""Set by the core's garbage collector on the stand-in NodeClaim of an orphan."""
NAME_PREFIX: Final = "capa-fleet"
ANNOTATION_REGION: Final = "karpenter.cluster.x-k8s.io/capa-region"
ANNOTATION_CLUSTER: Final = "karpenter.cluster.x-k8s.io/capa-cluster"
AWS_PREFIX: Final = "aws:///"
INDEX_TTL_SECONDS: Final = 5.0
SUBNET_TTL_SECONDS: Final = 60.0
"""How long free-address counts of the subnets are reused (upstream Karpenter caches them)."""


def _raw(nodeclaim: NodeClaim) -> Mapping[str, Any]:
    return nodeclaim.to_json()


def parse_provider_id(provider_id: str) -> tuple[str, str] | None:
    """``(zone, instance id)`` of ``aws:///<zone>/<id>``, else ``None``."""
    if not provider_id.startswith(AWS_PREFIX):
        return None
    zone, slash, instance_id = provider_id[len(AWS_PREFIX) :].partition("/")
    if not slash or not instance_id.startswith("i-"):
        return None
    return zone, instance_id


def region_of_zone(zone: str) -> str:
    """``us-east-1a`` -> ``us-east-1`` (local zones ``us-west-2-lax-1a`` -> ``us-west-2``)."""
    parts = zone.split("-")
    for i, part in enumerate(parts):
        if part and part[0].isdigit():
            return "-".join([*parts[:i], "".join(ch for ch in part if ch.isdigit())])
    return zone


def orphan_name(region: str, cluster: str, what: str) -> str:
    """``Instance.name`` of a fleet machine: ``capa-fleet:<region>:<cluster>:<what>``, where
    ``what`` is ``<namespace>/<machine>`` or ``instance/<id>``."""
    return f"{NAME_PREFIX}:{region}:{cluster}:{what}"


@dataclass(frozen=True)
class _Names:
    name: str
    uid: str
    nodepool: str | None


class FleetLauncher:
    """The fleet hooks over one management cluster (per ``PluginContext``).

    ``client`` is the management cluster (Cluster API objects, templates, Secrets); ``workload``
    the cluster the ClusterAPINodeClasses live in (the same one unless they are apart).
    """

    def __init__(
        self,
        client: KubeClient,
        clients: AwsClients,
        clock: Clock,
        unavailable: UnavailableOfferings,
        *,
        region_option: str | None = None,
        workload: KubeClient | None = None,
    ) -> None:
        self._client = client
        self._workload = workload or client
        self._clients = clients
        self._clock = clock
        self._unavailable = unavailable
        self._region_option = region_option
        self._capi: CapiResources | None = None
        self._lock = threading.Lock()
        self.fleet_calls = 0
        """``CreateFleet`` calls made (the simulator reports them per launched node)."""
        self.launched = 0
        self._index: dict[str, tuple[str, str, str]] = {}
        self.templates = launch_template.LaunchTemplates()
        self._full_subnets: ExpiringMarks[str] = ExpiringMarks(clock)
        self._free: dict[str, int] = {}
        self._free_at: dict[str, float] = {}
        self._index_at = -1e18

    @property
    def capi(self) -> CapiResources:
        if self._capi is None:
            self._capi = capi_resources(self._client, os.environ)
        return self._capi

    # -- create ----------------------------------------------------------------------------------

    def create(
        self, nodeclaim: NodeClaim, instance_types: Sequence[InstanceType], nodeclass: NodeClass
    ) -> LaunchResult | None:
        if fleet_launch(nodeclass) is None:
            return None
        raw = _raw(nodeclaim)
        meta = raw.get("metadata") or {}
        names = _Names(
            str(meta.get("name") or ""),
            str(meta.get("uid") or meta.get("name") or ""),
            (meta.get("labels") or {}).get(wellknown.LABEL_NODEPOOL),
        )
        target = resolve_target(self._client, nodeclass, self._region_option)
        try:
            return self._create(raw, names, list(instance_types), target)
        except ApiError as exc:
            raise RetryableCreateError(f"Cluster API request failed: {exc}") from exc

    def _annotations(self, target: FleetTarget, name: str) -> dict[str, str]:
        return {
            adopt.ANNOTATION_MACHINE: f"{target.namespace}/{name}",
            ANNOTATION_REGION: target.region,
            ANNOTATION_CLUSTER: target.cluster,
        }

    def _get(self, resource: Any, name: str, namespace: str) -> JsonObject | None:
        try:
            return self._client.get(resource, name, namespace)
        except NotFound:
            return None

    def _ensure(self, resource: Any, obj: JsonObject) -> JsonObject:
        meta = obj["metadata"]
        try:
            return self._client.create(resource, obj)
        except AlreadyExists:
            found = self._get(resource, meta["name"], meta["namespace"])
            if found is None:
                raise RetryableCreateError(f"{obj['kind']} {meta['name']} vanished") from None
            return found

    def _create(
        self,
        claim: Mapping[str, Any],
        names: _Names,
        instance_types: list[InstanceType],
        target: FleetTarget,
    ) -> LaunchResult:
        name, ns = names.name, target.namespace
        machine = self._get(self.capi.machines, name, ns)
        if machine is None:
            machine = self._ensure(
                self.capi.machines,
                adopt.machine(self.capi, target, name, names.uid, names.nodepool),
            )
        owner_uid = ((machine.get("metadata") or {}).get("annotations") or {}).get(
            adopt.ANNOTATION_NODECLAIM_UID
        )
        if owner_uid not in (None, names.uid):
            raise NodeClassNotReadyError(
                target.nodeclass, f"Machine {ns}/{name} belongs to another NodeClaim"
            )
        if adopt.is_deleting(machine):
            raise RetryableCreateError(f"Machine {ns}/{name} is being deleted")
        configs = adopt.kubeadm_configs(target.bootstrap_api_version)
        if self._get(configs, name, ns) is None:
            self._ensure(configs, adopt.kubeadm_config(target, claim, machine, names.nodepool))
        resource = adopt.aws_machines(target.machine_api_version)
        existing = self._get(resource, name, ns)
        if existing is not None:
            return self._result(target, name, _from_aws_machine(existing))
        ec2 = self._clients.ec2(target.region)
        found = fleet.find_launched(ec2, target.cluster, name)
        secret_name = adopt.data_secret_name(machine)
        if found:
            instance = found[0]
            fleet.terminate(ec2, [i.instance_id for i in found[1:]])
        elif secret_name is None:
            return self._waiting(target, name, instance_types)
        else:
            instance = self._launch(ec2, target, names, instance_types)
        if secret_name is None:
            raise RetryableCreateError(f"Machine {ns}/{name} lost its bootstrap data secret")
        # The instance is waiting for its data: it goes to Secrets Manager before anything else.
        count = bootstrap_secret.store(
            self._clients.secretsmanager(target.region),
            instance.instance_id,
            self._user_data(ns, secret_name),
            [*launch_template.resource_tags(target), {"Key": fleet.TAG_NODECLAIM, "Value": name}],
        )
        self._ensure(
            resource,
            adopt.aws_machine(target, name, machine, names.nodepool, instance, secret_count=count),
        )
        with self._lock:
            self.launched += 1
        return self._result(target, name, instance)

    def _waiting(
        self, target: FleetTarget, name: str, instance_types: list[InstanceType]
    ) -> LaunchResult:
        cheapest = fleet.candidates(instance_types, target.subnets, self._unavailable)
        kind = fleet.capacity_type_for(cheapest)
        if kind is None:
            raise InsufficientCapacityError(
                "no compatible offering is left in the NodeClass's subnets"
            )
        first = next(c for c in cheapest if c.capacity_type == kind)
        return LaunchResult(
            instance_type=first.instance_type,
            capacity_type=kind,
            annotations=self._annotations(target, name),
        )

    def _user_data(self, namespace: str, secret_name: str) -> bytes:
        secret = self._get(SECRETS, secret_name, namespace)
        value = ((secret or {}).get("data") or {}).get("value")
        if not value:
            raise RetryableCreateError(f"bootstrap secret {namespace}/{secret_name} has no value")
        return base64.b64decode(value)

    def _launch(
        self,
        ec2: Any,
        target: FleetTarget,
        names: _Names,
        instance_types: list[InstanceType],
    ) -> fleet.LaunchedInstance:
        zonal = fleet.zonal_subnets(
            target.subnets, self._free_addresses(ec2, target), self._full_subnets.is_unavailable
        )
        found = [
            c
            for c in fleet.candidates(instance_types, target.subnets, self._unavailable)
            if zonal.get(c.zone) == c.subnet_id
        ]
        kind = fleet.capacity_type_for(found)
        if kind is None:
            raise InsufficientCapacityError(
                "every compatible offering is recently unavailable or outside the subnets"
            )
        chosen = fleet.overrides(found, kind, zonal)
        template_id, version = self.templates.ensure(
            ec2, target, bootstrap_secret.user_data(target.region)
        )
        request = fleet.fleet_request(
            template_id=template_id,
            template_version=version,
            chosen=chosen,
            capacity_type=kind,
            image_id=target.image_id,
            token=fleet.client_token(names.uid, version, chosen, kind),
            tags=fleet.instance_tags(
                target.cluster,
                names.name,
                names.name,
                names.nodepool,
                target.nodeclass,
                namespace=target.namespace,
            ),
        )
        with self._lock:
            self.fleet_calls += 1
        outcome = fleet.parse_response(ec2.create_fleet(**request), chosen, kind)
        if any(code.startswith("InvalidLaunchTemplate") for _, _, code, _ in outcome.errors):
            self.templates.forget(target)  # deleted behind our back: written again next time
        messages = fleet.mark_capacity_errors(outcome, kind, self._unavailable)
        for subnet in outcome.full_subnets:
            self._full_subnets.mark(subnet, fleet.FULL_SUBNET)
        if outcome.instance is None:
            detail = "; ".join(messages) or "CreateFleet returned no instance"
            codes = {code for _, _, code, _ in outcome.errors}
            if codes and not codes <= fleet.CAPACITY_ERROR_CODES:
                raise RetryableCreateError(f"CreateFleet failed: {detail}")
            raise InsufficientCapacityError(f"CreateFleet launched nothing: {detail}")
        return outcome.instance

    def _free_addresses(self, ec2: Any, target: FleetTarget) -> dict[str, int]:
        """Free IP addresses of the NodeClass's subnets (``DescribeSubnets``, reused a minute)."""
        ids = sorted({s for group in target.subnets.values() for s in group})
        now = self._clock.monotonic()
        with self._lock:
            fresh = all(now - self._free_at.get(s, -1e18) < SUBNET_TTL_SECONDS for s in ids)
            if fresh:
                return {s: self._free[s] for s in ids if s in self._free}
        described = ec2.describe_subnets(SubnetIds=ids).get("Subnets") or []
        with self._lock:
            for subnet in described:
                self._free[str(subnet["SubnetId"])] = int(
                    subnet.get("AvailableIpAddressCount") or 0
                )
                self._free_at[str(subnet["SubnetId"])] = now
            return {s: self._free[s] for s in ids if s in self._free}

    def _result(
        self, target: FleetTarget, name: str, instance: fleet.LaunchedInstance
    ) -> LaunchResult:
        return LaunchResult(
            instance_type=instance.instance_type,
            capacity_type=instance.capacity_type,
            zone=instance.zone,
            provider_id=instance.provider_id,
            image_id=instance.image_id,
            annotations=self._annotations(target, name),
        )

    # -- delete ----------------------------------------------------------------------------------

    def _where(self, claim: Mapping[str, Any]) -> tuple[str, str, str, str] | None:
        """``(region, cluster, namespace, what)`` of a NodeClaim this plugin launched."""
        meta = claim.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        orphan = str(annotations.get(ORPHAN_ANNOTATION) or "")
        if orphan.startswith(f"{NAME_PREFIX}:"):
            _, region, cluster, what = orphan.split(":", 3)
            namespace = what.partition("/")[0]
            return region, cluster, namespace, what
        recorded = str(annotations.get(adopt.ANNOTATION_MACHINE) or "")
        region = str(annotations.get(ANNOTATION_REGION) or "")
        cluster = str(annotations.get(ANNOTATION_CLUSTER) or "")
        if recorded and region and cluster:
            return region, cluster, recorded.partition("/")[0], recorded
        # Deleted before create first answered: the NodeClass says where its objects went.
        ref = (claim.get("spec") or {}).get("nodeClassRef") or {}
        if ref.get("kind") != wellknown.NODECLASS_KIND or not ref.get("name"):
            return None
        try:
            nodeclass = self._workload.get(CLUSTER_API_NODE_CLASSES, str(ref["name"]))
        except NotFound:
            return None
        if fleet_launch(nodeclass) is None:
            return None
        target = resolve_target(self._client, nodeclass, self._region_option)
        return target.region, target.cluster, target.namespace, f"{target.namespace}/{meta['name']}"

    def delete(self, nodeclaim: NodeClaim) -> bool | None:
        claim = _raw(nodeclaim)
        where = self._where(claim)
        if where is None:
            return None
        region, cluster, namespace, what = where
        ec2 = self._clients.ec2(region)
        kind, _, name = what.partition("/")
        # Each call answers True while it still found something to end, so the core's next call
        # is the one that confirms nothing is left.
        if kind == "instance":
            live = fleet.tagged_instances(ec2, [{"Name": "instance-id", "Values": [name]}])
            if not live:
                raise InstanceNotFoundError(name, "terminated")
            fleet.terminate(ec2, [name])
            return True
        machine = self._get(self.capi.machines, name, namespace)
        adopted = self._adopted(namespace, name)
        stray = [] if adopted is not None else fleet.find_launched(ec2, cluster, name)
        # With no AWSMachine, CAPA knows no instance to terminate: those tagged for the
        # NodeClaim (a crash after CreateFleet) are the plugin's to end.
        fleet.terminate(ec2, [i.instance_id for i in stray])
        if machine is not None:
            if not adopt.is_deleting(machine):
                self._client.delete(self.capi.machines, name, namespace)
            return True
        if adopted is not None or stray:
            return True  # CAPA is terminating the adopted instance, or we just did
        raise InstanceNotFoundError(name, "its Machine and instance are gone")

    def _adopted(self, namespace: str, name: str) -> JsonObject | None:
        for version in self._client.served_versions(CAPI_INFRASTRUCTURE_GROUP)[:1]:
            return self._get(adopt.aws_machines(f"x/{version}"), name, namespace)
        return None

    # -- get / list ------------------------------------------------------------------------------

    def _aws_machines(self) -> list[JsonObject]:
        served = self._client.served_versions(CAPI_INFRASTRUCTURE_GROUP)
        if not served:
            return []
        try:
            return list(
                self._client.list(
                    adopt.aws_machines(f"x/{served[0]}"), label_selector=adopt.SELECTOR
                ).items
            )
        except NotFound:
            return []

    def _provider_index(self, refresh: bool) -> dict[str, tuple[str, str, str]]:
        now = self._clock.monotonic()
        with self._lock:
            if not refresh and now - self._index_at < INDEX_TTL_SECONDS:
                return self._index
        index: dict[str, tuple[str, str, str]] = {}
        for awsm in self._aws_machines():
            spec = awsm.get("spec") or {}
            meta = awsm.get("metadata") or {}
            provider_id = str(spec.get("providerID") or "")
            if provider_id:
                labels = meta.get("labels") or {}
                index[provider_id] = (
                    str(meta.get("namespace")),
                    str(meta.get("name")),
                    str(labels.get(wellknown.LABEL_CAPI_CLUSTER_NAME) or ""),
                )
        with self._lock:
            self._index, self._index_at = index, now
        return index

    def get(self, provider_id: str) -> Instance | None:
        parsed = parse_provider_id(provider_id)
        if parsed is None:
            return None
        index = self._provider_index(refresh=False)
        if provider_id not in index:
            index = self._provider_index(refresh=True)
            if provider_id not in index:
                return None
        namespace, name, cluster = index[provider_id]
        zone, instance_id = parsed
        ec2 = self._clients.ec2(region_of_zone(zone))
        live = fleet.tagged_instances(ec2, [{"Name": "instance-id", "Values": [instance_id]}])
        if not live:
            raise InstanceNotFoundError(provider_id, "the instance is terminated")
        instance = fleet.launched_from_description(live[0])
        return Instance(
            name=orphan_name(region_of_zone(zone), cluster, f"{namespace}/{name}"),
            provider_id=provider_id,
            instance_type=instance.instance_type,
            zone=instance.zone,
            capacity_type=instance.capacity_type,
            nodeclaim_name=name,
            image_id=instance.image_id,
            state=str((live[0].get("State") or {}).get("Name") or ""),
        )

    def _targets(self) -> list[FleetTarget]:
        targets: dict[tuple[str, str, str], FleetTarget] = {}
        for nodeclass in self._workload.list(CLUSTER_API_NODE_CLASSES).items:
            if fleet_launch(nodeclass) is None:
                continue
            try:
                target = resolve_target(self._client, nodeclass, self._region_option)
            except NodeClassNotReadyError:
                continue
            targets.setdefault((target.region, target.namespace, target.cluster), target)
        return list(targets.values())

    def list(self) -> list[Instance]:
        targets = self._targets()
        if not targets:
            return []
        machines = {
            (str(m["metadata"]["namespace"]), str(m["metadata"]["name"])): m
            for m in self._client.list(self.capi.machines, label_selector=adopt.SELECTOR).items
        }
        adopted: dict[tuple[str, str], str] = {}
        for awsm in self._aws_machines():
            meta = awsm.get("metadata") or {}
            adopted[(str(meta.get("namespace")), str(meta.get("name")))] = str(
                (awsm.get("spec") or {}).get("providerID") or ""
            )
        result: list[Instance] = []
        for target in targets:
            secrets = self._clients.secretsmanager(target.region)
            bootstrap_secret.sweep(secrets, target.cluster, self._workload)
            ec2 = self._clients.ec2(target.region)
            live = {
                fleet.launched_from_description(raw).provider_id: raw
                for raw in fleet.tagged_instances(
                    ec2,
                    [
                        {
                            "Name": f"tag:{fleet.capa_cluster_tag(target.cluster)}",
                            "Values": ["owned"],
                        },
                        {"Name": "tag-key", "Values": [fleet.TAG_NODECLAIM]},
                    ],
                )
            }
            for (namespace, name), machine in machines.items():
                labels = machine["metadata"].get("labels") or {}
                if (
                    namespace != target.namespace
                    or labels.get(wellknown.LABEL_CAPI_CLUSTER_NAME) != target.cluster
                ):
                    continue
                provider_id = adopted.get((namespace, name)) or None
                result.append(
                    Instance(
                        name=orphan_name(target.region, target.cluster, f"{namespace}/{name}"),
                        provider_id=provider_id if provider_id in live else None,
                        nodeclaim_name=str(labels.get(adopt.LABEL_NODECLAIM) or name),
                        state="deleting" if adopt.is_deleting(machine) else None,
                    )
                )
            for provider_id, raw in live.items():
                tags = {t["Key"]: t["Value"] for t in raw.get("Tags") or []}
                claim = tags.get(fleet.TAG_NODECLAIM, "")
                recorded = adopted.get((target.namespace, claim))
                if recorded == provider_id:
                    continue  # listed as its Machine
                instance = fleet.launched_from_description(raw)
                # A second instance for a NodeClaim whose Machine holds another is nobody's.
                duplicate = bool(recorded) and recorded != provider_id
                result.append(
                    Instance(
                        name=orphan_name(
                            target.region, target.cluster, f"instance/{instance.instance_id}"
                        ),
                        provider_id=provider_id,
                        instance_type=instance.instance_type,
                        zone=instance.zone,
                        capacity_type=instance.capacity_type,
                        nodeclaim_name=None if duplicate else claim or None,
                        state=str((raw.get("State") or {}).get("Name") or ""),
                    )
                )
        return result


def _from_aws_machine(awsm: Mapping[str, Any]) -> fleet.LaunchedInstance:
    spec = awsm.get("spec") or {}
    parsed = parse_provider_id(str(spec.get("providerID") or ""))
    zone, instance_id = parsed if parsed else ("", str(spec.get("instanceID") or ""))
    spot = spec.get("spotMarketOptions") is not None
    return fleet.LaunchedInstance(
        instance_id=instance_id,
        instance_type=str(spec.get("instanceType") or ""),
        zone=zone,
        subnet_id=(spec.get("subnet") or {}).get("id"),
        capacity_type=wellknown.CAPACITY_TYPE_SPOT if spot else wellknown.CAPACITY_TYPE_ON_DEMAND,
        image_id=(spec.get("ami") or {}).get("id"),
    )
