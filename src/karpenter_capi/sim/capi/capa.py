"""What stock CAPA does with a Machine whose infrastructure is an ``AWSMachine``, over an EC2
client (moto's in the simulator and the tests).

The ``capa`` plugin's ``CAPAFleet`` mode launches an instance through EC2 Fleet and then writes
an AWSMachine naming it, relying on CAPA to adopt it rather than launch its own. Whether that
holds is only visible if the emulated CAPA does what the real one does, including the things
that would go wrong:

* **adoption**: an AWSMachine with ``spec.providerID`` / ``instanceID`` naming a live instance
  is adopted (CAPA's ``findInstance`` by ID): ``status.ready``, ``instanceState`` and
  ``addresses`` from the instance, the Machine gets the provider ID, and a Node registers for
  it (named after the instance's private DNS name, sized from ``DescribeInstanceTypes``: vCPUs,
  memory and the VPC CNI pod limit, as the plugin sizes it, minus what the kubeadm config
  reserves);
* **its own launch**: an AWSMachine without a provider ID makes CAPA call ``RunInstances``
  itself, so a plugin that wrote one before its fleet returned shows up as a second instance
  (``CapaEmulation.run_instances`` counts them);
* **a vanished instance** (terminated behind CAPA's back) fails the AWSMachine and the Machine
  (``failureReason: UpdateError``), never a second launch;
* **bootstrap secrets**: with a Secrets Manager client, the secrets an AWSMachine names
  (``cloudInit.secretPrefix``/``secretCount``) are deleted once its node registered, and the
  two fields cleared (CAPA's ``deleteEncryptedBootstrapDataSecret``);
* **deletion**: a deleted Machine terminates its instance, deletes its AWSMachine and Node,
  then lets the Machine go.

CAPA waits for the bootstrap data (``spec.bootstrap.dataSecretName``) before it touches
anything, as the real one does; ``bootstrap.py`` emulates that step. The generic Machine
controller and Node creator leave these Machines alone when this emulation is on.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import Clock, format_timestamp
from karpenter_capi.core.kube.cache import make_key
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import AlreadyExists, ApiError, NotFound
from karpenter_capi.core.kube.resources import NODES, Resource
from karpenter_capi.core.runtime.controller import DONE, MANAGEMENT, Caches, Key, Result, Watch
from karpenter_capi.sim.capi.bootstrap import KUBEADM_CONFIGS
from karpenter_capi.sim.capi.kubeletconfig import kubelet_status
from karpenter_capi.sim.capi.machine import MachineController
from karpenter_capi.sim.capi.nodes import build_node
from karpenter_capi.sim.capi.objects import (
    MACHINE_FINALIZER,
    deleted_at,
    finalizers_of,
    is_deleting,
    is_paused,
    metadata,
    name_of,
    namespace_of,
    nested,
    release_finalizer,
)
from karpenter_capi.sim.capi.settings import (
    ANNOTATION_DELETE_DELAY,
    AWS_MACHINE_KIND,
    EmulationSettings,
    delay_from,
    handled_by_capa,
)
from karpenter_capi.sim.capi.shapes import failure_of, shape_of

_log = logging.getLogger(__name__)

AWS_MACHINES: Final = Resource(
    "infrastructure.cluster.x-k8s.io", "v1beta2", "awsmachines", AWS_MACHINE_KIND, True
)
_ARCH: Final = {"x86_64": wellknown.ARCH_AMD64, "arm64": wellknown.ARCH_ARM64}
_GONE_STATES: Final = ("shutting-down", "terminated")
_METADATA_OPTIONS: Final = {
    "httpEndpoint": "HttpEndpoint",
    "httpProtocolIpv6": "HttpProtocolIpv6",
    "httpPutResponseHopLimit": "HttpPutResponseHopLimit",
    "httpTokens": "HttpTokens",
    "instanceMetadataTags": "InstanceMetadataTags",
}


def _error_code(err: Exception) -> str:
    response = getattr(err, "response", None)
    if isinstance(response, Mapping):
        return str((response.get("Error") or {}).get("Code") or "")
    return ""


def instance_id_of(aws_machine: Mapping[str, Any]) -> str:
    """``spec.instanceID``, else the last part of ``spec.providerID`` (``aws:///zone/i-...``)."""
    explicit = nested(aws_machine, "spec", "instanceID")
    if explicit:
        return str(explicit)
    provider_id = str(nested(aws_machine, "spec", "providerID") or "")
    return provider_id.rpartition("/")[2] if provider_id.startswith("aws://") else ""


class CapaMachineController(MachineController):
    """Stock CAPA (and CAPI core) for Machines with an AWSMachine; see the module docstring."""

    name = "sim.capa.machine"

    def __init__(
        self,
        management: KubeClient,
        workload: KubeClient,
        caches: Caches,
        clock: Clock,
        settings: EmulationSettings,
    ) -> None:
        super().__init__(management, workload, caches, clock, settings)
        self.ec2: Any = settings.aws_ec2
        self.run_instances = 0
        """Instances CAPA launched itself (an AWSMachine without a provider ID): a second
        instance for a NodeClaim whose fleet already launched one."""
        self.terminated = 0
        self.metadata_changes = 0
        self.secrets: Any = settings.aws_secrets
        self.secrets_deleted = 0
        """``ModifyInstanceMetadataOptions`` calls: an instance launched with options other than
        its AWSMachine's, which CAPA rewrites after adoption."""
        self._shapes: dict[str, dict[str, str]] = {}

    def watches(self) -> Sequence[Watch]:
        return [
            *super().watches(),
            Watch(AWS_MACHINES, to_keys=self._aws_machine_to_machines, cluster=MANAGEMENT),
        ]

    def _aws_machine_to_machines(self, aws_machine: JsonObject) -> Iterable[Key]:
        owners = nested(aws_machine, "metadata", "ownerReferences") or []
        keys = [
            make_key(str(ref.get("name")), namespace_of(aws_machine) or None)
            for ref in owners
            if isinstance(ref, Mapping) and ref.get("kind") == "Machine"
        ]
        # Before its owner reference is set, CAPI finds the AWSMachine by the Machine's ref.
        return keys or [make_key(name_of(aws_machine), namespace_of(aws_machine) or None)]

    # -- reconcile -------------------------------------------------------------------------------

    def reconcile(self, key: Key) -> Result:
        machine = self.caches.store(self.primary, MANAGEMENT).get(key)
        if machine is None or is_paused(machine) or not handled_by_capa(self.settings, machine):
            return DONE
        shape = shape_of(machine, self.settings.default_shape)
        now = self.clock.now()
        aws_machine = self._aws_machine(machine)
        if is_deleting(machine):
            return self._delete(machine, aws_machine, shape, now)
        if MACHINE_FINALIZER not in finalizers_of(machine):
            self._add_finalizer(machine)
            return DONE
        failure = failure_of(machine)
        if failure is not None:
            self._write_status(machine, shape, "Failed", failure=failure)
            return DONE
        if not nested(machine, "spec", "bootstrap", "dataSecretName") or aws_machine is None:
            # CAPA waits for the bootstrap data; CAPI for the infrastructure object.
            self._write_status(machine, shape, "Provisioning")
            return DONE
        if not nested(aws_machine, "spec", "providerID"):
            aws_machine = self._run_instance(machine, aws_machine)
        instance = self._instance(instance_id_of(aws_machine))
        if instance is None or instance["State"]["Name"] in _GONE_STATES:
            self._instance_gone(machine, aws_machine, shape, instance)
        else:
            self._instance_running(machine, aws_machine, shape, instance)
        return DONE

    def _add_finalizer(self, machine: JsonObject) -> None:
        patch = {
            "metadata": {
                "finalizers": [*finalizers_of(machine), MACHINE_FINALIZER],
                "resourceVersion": metadata(machine).get("resourceVersion"),
            }
        }
        self.client.patch(self.primary, name_of(machine), patch, namespace_of(machine))

    def _instance_gone(
        self,
        machine: JsonObject,
        aws_machine: Mapping[str, Any],
        shape: str,
        instance: Mapping[str, Any] | None,
    ) -> None:
        """The Machine's instance terminated under it: both marked failed, as CAPA does."""
        state = "terminated" if instance is None else str(instance["State"]["Name"])
        failure = ("UpdateError", f'EC2 instance state "{state}" is unexpected')
        self._aws_status(
            aws_machine,
            {
                "ready": False,
                "instanceState": state,
                "failureReason": failure[0],
                "failureMessage": failure[1],
            },
        )
        self._write_status(machine, shape, "Failed", failure=failure)

    def _instance_running(
        self,
        machine: JsonObject,
        aws_machine: Mapping[str, Any],
        shape: str,
        instance: Mapping[str, Any],
    ) -> None:
        """The instance runs: the AWSMachine ready, the Machine's providerID set, then its
        Node registered and the Machine Running once the Node is there."""
        self._aws_status(
            aws_machine,
            {
                "ready": True,
                "instanceState": instance["State"]["Name"],
                "addresses": _addresses(instance),
            },
        )
        self._ensure_metadata_options(aws_machine, instance)
        provider_id = str(nested(aws_machine, "spec", "providerID"))
        if nested(machine, "spec", "providerID") != provider_id:
            self.client.patch(
                self.primary,
                name_of(machine),
                {"spec": {"providerID": provider_id}},
                namespace_of(machine),
            )
            return
        node = self._node_of(provider_id)
        if node is None:
            self._register_node(machine, instance, provider_id)
        self._write_status(machine, shape, "Running" if node else "Provisioned", node=node)
        if node is not None:
            self._delete_bootstrap_secrets(aws_machine)

    def _aws_machine(self, machine: Mapping[str, Any]) -> JsonObject | None:
        name = nested(machine, "spec", "infrastructureRef", "name")
        if not name:
            return None
        store = self.caches.store(AWS_MACHINES, MANAGEMENT)
        return store.get(make_key(str(name), namespace_of(machine) or None))

    def _aws_status(self, aws_machine: Mapping[str, Any], status: Mapping[str, Any]) -> None:
        current = aws_machine.get("status") or {}
        if all(current.get(k) == v for k, v in status.items()):
            return
        try:
            self.client.patch(
                AWS_MACHINES,
                name_of(aws_machine),
                {"status": dict(status)},
                namespace_of(aws_machine),
                subresource="status",
            )
        except NotFound:
            return

    # -- EC2 -------------------------------------------------------------------------------------

    def _instance(self, instance_id: str) -> Mapping[str, Any] | None:
        if not instance_id:
            return None
        try:
            found = self.ec2.describe_instances(InstanceIds=[instance_id])
        except Exception as err:
            if _error_code(err).startswith("InvalidInstanceID"):
                return None
            raise
        for reservation in found.get("Reservations") or []:
            for instance in reservation.get("Instances") or []:
                return dict(instance)
        return None

    def _ensure_metadata_options(
        self, aws_machine: Mapping[str, Any], instance: Mapping[str, Any]
    ) -> None:
        """CAPA's ``ensureInstanceMetadataOptions`` (controllers/awsmachine_controller.go): the
        instance's metadata options made the AWSMachine's (as defaulted) when they differ."""
        wanted = nested(aws_machine, "spec", "instanceMetadataOptions")
        if not isinstance(wanted, Mapping):
            return
        have = instance.get("MetadataOptions") or {}
        request = {
            aws_name: wanted.get(name)
            for name, aws_name in _METADATA_OPTIONS.items()
            if wanted.get(name) not in (None, "")
        }
        if all(have.get(aws_name) == value for aws_name, value in request.items()):
            return
        self.ec2.modify_instance_metadata_options(InstanceId=instance["InstanceId"], **request)
        self.metadata_changes += 1
        _log.info("CAPA set the metadata options of %s to %s", instance["InstanceId"], request)

    def _delete_bootstrap_secrets(self, aws_machine: Mapping[str, Any]) -> None:
        """CAPA's ``deleteEncryptedBootstrapDataSecret``: once the node registered (or the
        machine goes), the secrets ``<secretPrefix>-0..secretCount-1`` are deleted and the
        prefix and count cleared from the spec."""
        prefix = nested(aws_machine, "spec", "cloudInit", "secretPrefix")
        if self.secrets is None or not prefix:
            return
        count = int(nested(aws_machine, "spec", "cloudInit", "secretCount") or 0)
        for index in range(count):
            try:
                self.secrets.delete_secret(
                    SecretId=f"{prefix}-{index}", ForceDeleteWithoutRecovery=True
                )
            except Exception as err:
                if _error_code(err) != "ResourceNotFoundException":
                    raise
            self.secrets_deleted += 1
        with contextlib.suppress(NotFound):
            self.client.patch(
                AWS_MACHINES,
                name_of(aws_machine),
                {"spec": {"cloudInit": {"secretPrefix": None, "secretCount": None}}},
                namespace_of(aws_machine),
            )

    def _run_instance(self, machine: Mapping[str, Any], aws_machine: JsonObject) -> JsonObject:
        """CAPA's own launch, for an AWSMachine that names no instance."""
        spec = aws_machine.get("spec") or {}
        cluster = str(nested(machine, "spec", "clusterName") or "")
        params: dict[str, Any] = {
            "ImageId": str(nested(spec, "ami", "id") or ""),
            "InstanceType": str(spec.get("instanceType") or "m5.large"),
            "MinCount": 1,
            "MaxCount": 1,
            "TagSpecifications": [
                {
                    "ResourceType": "instance",
                    "Tags": [
                        {"Key": "Name", "Value": name_of(aws_machine)},
                        {
                            "Key": f"sigs.k8s.io/cluster-api-provider-aws/cluster/{cluster}",
                            "Value": "owned",
                        },
                        {"Key": "sigs.k8s.io/cluster-api-provider-aws/role", "Value": "node"},
                    ],
                }
            ],
        }
        subnet = nested(spec, "subnet", "id")
        if subnet:
            params["SubnetId"] = str(subnet)
        options = spec.get("instanceMetadataOptions") or {}
        metadata = {
            aws: options[name] for name, aws in _METADATA_OPTIONS.items() if options.get(name)
        }
        if metadata:
            params["MetadataOptions"] = metadata
        reservation = self.ec2.run_instances(**params)
        self.run_instances += 1
        instance = reservation["Instances"][0]
        zone = instance["Placement"]["AvailabilityZone"]
        _log.info("CAPA launched %s for %s", instance["InstanceId"], name_of(aws_machine))
        return self.client.patch(
            AWS_MACHINES,
            name_of(aws_machine),
            {
                "spec": {
                    "providerID": f"aws:///{zone}/{instance['InstanceId']}",
                    "instanceID": instance["InstanceId"],
                }
            },
            namespace_of(aws_machine),
        )

    def _terminate(self, instance_id: str) -> None:
        if not instance_id:
            return
        try:
            self.ec2.terminate_instances(InstanceIds=[instance_id])
        except Exception as err:
            if _error_code(err).startswith("InvalidInstanceID"):
                return
            raise
        self.terminated += 1

    # -- Node ------------------------------------------------------------------------------------

    def _shape(self, instance_type: str) -> dict[str, str]:
        """cpu, memory and pods of ``instance_type`` as the plugin's catalog computes them."""
        from karpenter_capi.plugins.capa.catalog import instance_type_info

        cached = self._shapes.get(instance_type)
        if cached is None:
            raw = self.ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"]
            info = instance_type_info(raw[0]) if raw else None
            cached = (
                {"pods": "110"}
                if info is None
                else {
                    "cpu": str(info.vcpus),
                    "memory": f"{info.memory_mib}Mi",
                    "pods": str(info.max_pods()),
                    **{name: str(count) for name, count in info.accelerators.items()},
                }
            )
            self._shapes[instance_type] = cached
        return cached

    def _bootstrap_config(self, machine: Mapping[str, Any]) -> JsonObject | None:
        name = nested(machine, "spec", "bootstrap", "configRef", "name")
        if not name:
            return None
        try:
            return self.client.get(KUBEADM_CONFIGS, str(name), namespace_of(machine))
        except ApiError:
            return None

    def _register_node(
        self, machine: Mapping[str, Any], instance: Mapping[str, Any], provider_id: str
    ) -> None:
        """The Node the kubelet on ``instance`` registers (ready after the boot delay)."""
        bootstrap = self._bootstrap_config(machine)
        name = str(instance.get("PrivateDnsName") or instance["InstanceId"])
        node = build_node(
            name,
            provider_id,
            machine=machine,
            owners=[],
            boot_delay=self.settings.boot_delay,
            now=format_timestamp(self.clock.now()),
            bootstrap=bootstrap,
        )
        instance_type = str(instance["InstanceType"])
        capacity, allocatable = kubelet_status(self._shape(instance_type), bootstrap)
        node["status"]["capacity"] = capacity
        node["status"]["allocatable"] = allocatable
        labels = node["metadata"]["labels"]
        labels[wellknown.LABEL_INSTANCE_TYPE] = instance_type
        labels[wellknown.LABEL_TOPOLOGY_ZONE] = str(instance["Placement"]["AvailabilityZone"])
        labels[wellknown.LABEL_ARCH] = _ARCH.get(
            str(instance.get("Architecture") or "x86_64"), wellknown.ARCH_AMD64
        )
        node["status"]["nodeInfo"]["architecture"] = labels[wellknown.LABEL_ARCH]
        node["status"]["addresses"] = [
            *_addresses(instance),
            {"type": "Hostname", "address": name},
        ]
        try:
            self.workload.create(NODES, node)
        except AlreadyExists:
            return

    # -- delete ----------------------------------------------------------------------------------

    def _delete(
        self,
        machine: JsonObject,
        aws_machine: JsonObject | None,
        shape: str,
        now: datetime,
    ) -> Result:
        machine = self._write_status(machine, shape, "Deleting")
        if MACHINE_FINALIZER not in finalizers_of(machine):
            return DONE
        # The drain CAPI does first takes the delete delay.
        delay = delay_from([machine], ANNOTATION_DELETE_DELAY, self.settings.delete_delay)
        done_at = (deleted_at(machine) or now) + timedelta(seconds=delay)
        if now < done_at:
            return Result(requeue_after=max((done_at - now).total_seconds(), 0.0))
        if aws_machine is not None:
            self._delete_bootstrap_secrets(aws_machine)
            self._terminate(instance_id_of(aws_machine))
            with contextlib.suppress(NotFound):
                self.client.delete(AWS_MACHINES, name_of(aws_machine), namespace_of(aws_machine))
        self._delete_node(machine)
        release_finalizer(self.client, self.primary, machine, MACHINE_FINALIZER)
        return DONE


def _addresses(instance: Mapping[str, Any]) -> list[JsonObject]:
    found: list[JsonObject] = []
    if instance.get("PrivateIpAddress"):
        found.append({"type": "InternalIP", "address": str(instance["PrivateIpAddress"])})
    if instance.get("PrivateDnsName"):
        found.append({"type": "InternalDNS", "address": str(instance["PrivateDnsName"])})
    return found
