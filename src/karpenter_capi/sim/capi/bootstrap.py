"""What the kubeadm bootstrap provider (CABPK) and CAPI core do for a Machine's KubeadmConfig.

Launch modes that create their own Machines (the ``capa`` plugin's ``CAPAFleet``) wait for the
bootstrap data before they launch anything: CABPK renders the config into a Secret and records
its name in the config's ``status.dataSecretName``, and CAPI core copies that name to the
Machine's ``spec.bootstrap.dataSecretName``. This controller does both, ``bootstrap_delay``
seconds after the KubeadmConfig was created, for every Machine whose ``bootstrap.configRef``
names a KubeadmConfig that exists. Machines whose config does not exist (the MachineSets of the
other emulated resources name configs nobody creates) are left alone, as before.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Final

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.cache import make_key
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import AlreadyExists, NotFound
from karpenter_capi.core.kube.resources import SECRETS, Resource
from karpenter_capi.core.runtime.controller import DONE, MANAGEMENT, Caches, Key, Result, Watch
from karpenter_capi.sim.capi.kubeletconfig import BOOTSTRAP_GROUP
from karpenter_capi.sim.capi.objects import (
    created_at,
    is_deleting,
    is_paused,
    name_of,
    namespace_of,
    nested,
)
from karpenter_capi.sim.capi.owners import Owners
from karpenter_capi.sim.capi.settings import EmulationSettings

KUBEADM_CONFIGS: Final = Resource(
    BOOTSTRAP_GROUP, "v1beta2", "kubeadmconfigs", "KubeadmConfig", True
)
SECRET_TYPE: Final = "cluster.x-k8s.io/secret"


def cloud_init(config: Mapping[str, Any]) -> bytes:
    """The user data CABPK would render: enough of it to tell one config from another."""
    name = name_of(config)
    return (
        "#cloud-config\n"
        f"# rendered by the simulated CABPK for {namespace_of(config)}/{name}\n"
        "runcmd:\n"
        "- kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml\n"
    ).encode()


class KubeadmBootstrapController:
    """Bootstrap data for Machines whose KubeadmConfig exists; see the module docstring."""

    name = "sim.capi.kubeadm-bootstrap"
    primary_cluster = MANAGEMENT

    def __init__(
        self,
        management: KubeClient,
        caches: Caches,
        clock: Clock,
        settings: EmulationSettings | None = None,
    ) -> None:
        self.client = management
        self.caches = caches
        self.clock = clock
        self.settings = settings or EmulationSettings()
        self.primary = Owners(caches, self.settings.version).machines

    def watches(self) -> Sequence[Watch]:
        return [Watch(KUBEADM_CONFIGS, to_keys=self._config_to_machines, cluster=MANAGEMENT)]

    def reads(self) -> Sequence[tuple[Any, str]]:
        return []

    def _config_to_machines(self, config: JsonObject) -> Iterable[Key]:
        owners = nested(config, "metadata", "ownerReferences") or []
        return [
            make_key(str(ref.get("name")), namespace_of(config) or None)
            for ref in owners
            if isinstance(ref, Mapping) and ref.get("kind") == "Machine"
        ]

    def reconcile(self, key: Key) -> Result:
        machine = self.caches.store(self.primary, MANAGEMENT).get(key)
        if machine is None or is_deleting(machine) or is_paused(machine):
            return DONE
        if nested(machine, "spec", "bootstrap", "dataSecretName"):
            return DONE
        ref = nested(machine, "spec", "bootstrap", "configRef")
        if not isinstance(ref, Mapping) or ref.get("kind") != "KubeadmConfig":
            return DONE
        namespace = namespace_of(machine)
        config = self.caches.store(KUBEADM_CONFIGS, MANAGEMENT).get(
            make_key(str(ref.get("name") or ""), namespace or None)
        )
        if config is None or is_deleting(config):
            return DONE  # its creation wakes the Machine (owner reference)
        now = self.clock.now()
        ready_at = (created_at(config) or now) + timedelta(seconds=self.settings.bootstrap_delay)
        if now < ready_at:
            return Result(requeue_after=(ready_at - now).total_seconds())
        secret = name_of(config)
        # AlreadyExists: an earlier pass wrote it and died before the Machine.
        with contextlib.suppress(AlreadyExists):
            self.client.create(
                SECRETS,
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "type": SECRET_TYPE,
                    "metadata": {
                        "name": secret,
                        "namespace": namespace,
                        "labels": {
                            "cluster.x-k8s.io/cluster-name": str(
                                nested(machine, "spec", "clusterName") or ""
                            )
                        },
                    },
                    "data": {
                        "value": base64.b64encode(cloud_init(config)).decode(),
                        "format": base64.b64encode(b"cloud-config").decode(),
                    },
                },
                namespace,
            )
        try:
            self.client.patch(
                KUBEADM_CONFIGS,
                secret,
                {
                    "status": {
                        "dataSecretName": secret,
                        "ready": True,
                        "initialization": {"dataSecretCreated": True},
                    }
                },
                namespace,
                subresource="status",
            )
            self.client.patch(
                self.primary,
                name_of(machine),
                {"spec": {"bootstrap": {"dataSecretName": secret}}},
                namespace,
            )
        except NotFound:
            return DONE
        return DONE
