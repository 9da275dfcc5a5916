"""Node overhead per scalable resource: explicit settings, a real Node's, the kubeadm bootstrap
config's kubelet settings, a native plugin's platform formula, kubeadm's defaults."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from karpenter_capi.core.instancetype import InstanceType, InstanceTypeOverhead
from karpenter_capi.core.kube.errors import Invalid
from karpenter_capi.core.kube.resources import EVENTS
from karpenter_capi.core.values.resources import ResourceList
from karpenter_capi.plugins.generic_capi.inventory import (
    Inventory,
    TemplateReader,
    collect_inventory,
)
from karpenter_capi.plugins.generic_capi.kubelet import KubeletConfigError, kubelet_settings
from karpenter_capi.plugins.generic_capi.learned import NodeOverheads
from karpenter_capi.plugins.generic_capi.nodeclass_status import update_nodeclass_status
from karpenter_capi.plugins.generic_capi.overhead import (
    LearnedOverhead,
    OverheadPolicy,
    resolve_overhead,
)
from tests.plugins.generic_capi.inventory_builders import (
    add,
    machine,
    new_env,
    nodeclass,
    scalable,
    sized,
)

BOOTSTRAP = "bootstrap.cluster.x-k8s.io"
GI = 1024**3
MI = 1024**2


def kubeadm_template(
    name: str, args: Any = None, *, version: str | None = None, **spec: Any
) -> dict[str, Any]:
    """Written at the version whose shape ``args`` has (a map: v1beta1, else v1beta2), as the
    API server's schema of each version requires."""
    version = version or ("v1beta1" if isinstance(args, dict) else "v1beta2")
    join: dict[str, Any] = {}
    if args is not None:
        join["nodeRegistration"] = {"kubeletExtraArgs": args}
    return {
        "apiVersion": f"{BOOTSTRAP}/{version}",
        "kind": "KubeadmConfigTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"template": {"spec": {"joinConfiguration": join, **spec}}},
    }


def worker(name: str = "md", bootstrap: str | None = "workers", **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("annotations", sized("4", "16Gi", **{_disk(): "100Gi"}))
    obj = scalable("MachineDeployment", name, **kwargs)
    if bootstrap is not None:
        obj["spec"]["template"]["spec"]["bootstrap"] = {
            "configRef": {"apiGroup": BOOTSTRAP, "kind": "KubeadmConfigTemplate", "name": bootstrap}
        }
    return obj


def _disk() -> str:
    return "capacity.cluster-autoscaler.kubernetes.io/ephemeral-disk"


class World:
    def __init__(self, options: dict[str, str] | None = None) -> None:
        self.server, self.clock, self.ctx, self.capi = new_env(options)
        self.learned = NodeOverheads(self.server, self.server, self.capi, self.clock)

    def add(self, *objects: dict[str, Any]) -> None:
        add(self.server, self.capi, *objects)

    def inventory(self, annotations: dict[str, str] | None = None) -> Inventory:
        return collect_inventory(
            self.ctx,
            nodeclass(annotations=annotations),
            self.capi,
            templates=TemplateReader(self.server, self.clock, ttl_seconds=0),
            learned=self.learned,
        )

    def only(self, annotations: dict[str, str] | None = None) -> InstanceType:
        [instance_type] = self.inventory(annotations).instance_types
        return instance_type


def _total(instance_type: InstanceType) -> dict[str, str]:
    return instance_type.overhead.total().to_dict()


def test_without_any_setting_a_node_keeps_only_kubeadms_eviction_thresholds() -> None:
    world = World()
    world.add(worker(bootstrap=None))
    instance_type = world.only()
    assert instance_type.overhead.source == "kubeadm default"
    assert _total(instance_type) == {"memory": "100Mi", "ephemeral-storage": "10Gi"}
    assert instance_type.allocatable.milli("cpu") == 4000
    assert instance_type.allocatable.value("memory") == 16 * GI - 100 * MI


@pytest.mark.parametrize(
    "args",
    [
        # CAPI v1beta1: a map of flags.
        {
            "kube-reserved": "cpu=200m,memory=1Gi",
            "system-reserved": "cpu=100m,memory=512Mi,pid=1000",
            "eviction-hard": "memory.available<500Mi,nodefs.available<5%,imagefs.available<15%",
            "max-pods": "58",
        },
        # CAPI v1beta2: a list of name/value pairs.
        [
            {"name": "kube-reserved", "value": "cpu=200m,memory=1Gi"},
            {"name": "system-reserved", "value": "cpu=100m,memory=512Mi,pid=1000"},
            {
                "name": "eviction-hard",
                "value": "memory.available<500Mi,nodefs.available<5%,imagefs.available<15%",
            },
            {"name": "max-pods", "value": "58"},
        ],
    ],
    ids=["v1beta1-map", "v1beta2-list"],
)
def test_the_kubeadm_config_templates_kubelet_args_decide_overhead_and_max_pods(args: Any) -> None:
    world = World()
    world.add(kubeadm_template("workers", args), worker())
    instance_type = world.only()
    assert instance_type.overhead.source == "kubeadm-config"
    assert instance_type.overhead.kube_reserved.to_dict() == {"cpu": "200m", "memory": "1Gi"}
    assert instance_type.overhead.system_reserved.to_dict() == {"cpu": "100m", "memory": "512Mi"}
    assert instance_type.overhead.eviction_threshold.to_dict() == {
        "memory": "500Mi",
        "ephemeral-storage": "5Gi",  # 5% of 100Gi; imagefs does not shrink allocatable
    }
    assert instance_type.allocatable.milli("cpu") == 3700
    assert instance_type.allocatable.value("memory") == 16 * GI - (1024 + 512 + 500) * MI
    assert instance_type.capacity.value("pods") == 58
    assert "kubeadm-config" in instance_type.source  # pods came from it


def test_eviction_hard_given_replaces_the_default_thresholds() -> None:
    world = World()
    world.add(kubeadm_template("workers", {"eviction-hard": "memory.available<1Gi"}), worker())
    assert _total(world.only()) == {"memory": "1Gi"}  # nodefs no longer reserved


def test_a_config_without_kubelet_settings_leaves_kubeadms_defaults() -> None:
    world = World()
    world.add(kubeadm_template("workers", {"node-labels": "tier=web"}), worker())
    instance_type = world.only()
    assert instance_type.overhead.source == "kubeadm default"
    assert _total(instance_type) == {"memory": "100Mi", "ephemeral-storage": "10Gi"}


def test_a_kubelet_configuration_patch_file_is_read_and_flags_win_over_it() -> None:
    patch = "kubeReserved:\n  cpu: 300m\n  memory: 2Gi\nevictionHard:\n  memory.available: 200Mi\n"
    files = [
        {"path": "/etc/kubeadm/patches/kubeletconfiguration+strategic.yaml", "content": patch},
        {
            "path": "/etc/kubeadm/patches/kubeletconfiguration1.json",
            "encoding": "base64",
            "content": base64.b64encode(b'{"systemReserved": {"memory": "256Mi"}}').decode(),
        },
        # Another target, and a JSON patch: not read.
        {"path": "/etc/kubeadm/patches/etcd.yaml", "content": "kubeReserved: {cpu: 9}"},
        {
            "path": "/etc/kubeadm/patches/kubeletconfiguration+json.json",
            "content": '[{"op": "add", "path": "/maxPods", "value": 3}]',
        },
    ]
    config = kubeadm_template(
        "workers", {"kube-reserved": "cpu=100m"}, files=files
    )  # the flag overrides the file's kubeReserved entirely
    config["spec"]["template"]["spec"]["joinConfiguration"]["patches"] = {
        "directory": "/etc/kubeadm/patches"
    }
    settings = kubelet_settings(config)
    assert settings.kube_reserved == {"cpu": 100}
    assert settings.system_reserved == {"memory": 256 * MI * 1000}
    assert settings.eviction_hard == {"memory": 200 * MI * 1000}
    assert settings.max_pods is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"kube-reserved": "cpu=lots"}, "kube-reserved='cpu=lots'"),
        ({"system-reserved": "memory=10%"}, "must be a quantity"),
        ({"eviction-hard": "memory.available>1Gi"}, "is not signal<quantity"),
        ({"max-pods": "many"}, "max-pods='many': not an integer"),
    ],
)
def test_malformed_kubelet_settings_are_a_warning_and_the_next_source_decides(
    args: Any, message: str
) -> None:
    world = World()
    world.add(kubeadm_template("workers", args), worker(), nodeclass())
    with pytest.raises(KubeletConfigError, match=message):
        kubelet_settings(kubeadm_template("workers", args))
    inventory = world.inventory()
    [instance_type] = inventory.instance_types  # still usable
    assert instance_type.overhead.source == "kubeadm default"
    [notice] = [n for n in inventory.notices if n.reason == "InvalidKubeletConfiguration"]
    assert "KubeadmConfigTemplate default/workers" in notice.message
    assert notice.message.endswith("its overhead and max pods come from the next source")

    assert update_nodeclass_status(world.ctx, nodeclass(), inventory)
    events = [
        e for e in world.server.list(EVENTS).items if e["reason"] == "InvalidKubeletConfiguration"
    ]
    assert [e["type"] for e in events] == ["Warning"]


def test_a_v1beta2_arg_without_a_name_is_refused_by_the_server_and_the_reader() -> None:
    """CAPI's schema refuses it, so no cluster holds one; the reader still says what is
    wrong rather than failing (a config read from elsewhere, or an older server)."""
    malformed = kubeadm_template("workers", [{"value": "cpu=1"}])
    with pytest.raises(
        KubeletConfigError, match=r"kubeletExtraArgs\[0\]: not a \{name, value\} pair"
    ):
        kubelet_settings(malformed)
    world = World()
    with pytest.raises(Invalid, match=r"kubeletExtraArgs\[0\]\.name: Required value"):
        world.add(malformed)


def _node(name: str, capacity: dict[str, str], allocatable: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"capacity": capacity, "allocatable": allocatable},
    }


CAPACITY = {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "100Gi", "pods": "110"}


def test_a_real_nodes_overhead_is_learned_remembered_and_relearned_on_a_template_change() -> None:
    world = World()
    world.add(kubeadm_template("workers", {"kube-reserved": "cpu=100m"}), worker(replicas=1))
    world.server.apply_manifests(
        [
            _node("n1", CAPACITY, {**CAPACITY, "cpu": "3800m", "memory": "15Gi"}),
            machine("m1", "md", "n1", world.capi),
        ]
    )
    instance_type = world.only()
    assert instance_type.overhead.source == "node n1"
    assert _total(instance_type) == {"cpu": "200m", "memory": "1Gi"}

    # Remembered: nothing is read again, so a Node that changes changes nothing.
    world.server.apply_manifests([_node("n1", CAPACITY, CAPACITY)])
    assert world.only().overhead.source == "node n1"
    assert _total(world.only()) == {"cpu": "200m", "memory": "1Gi"}

    # A new bootstrap config: forget it; n1, made before the change, does not teach the new one.
    world.clock.advance(60)
    md = world.server.get(world.capi.machine_deployments, "md", "default")
    md["spec"]["template"]["spec"]["bootstrap"]["configRef"]["name"] = "workers-v2"
    world.server.update(world.capi.machine_deployments, md)
    world.add(kubeadm_template("workers-v2", {"kube-reserved": "cpu=500m"}))
    instance_type = world.only()
    assert instance_type.overhead.source == "kubeadm-config"
    assert instance_type.allocatable.milli("cpu") == 3500

    world.clock.advance(60)  # past the retry interval, and the new Node is newer than the change
    world.server.apply_manifests(
        [
            _node("n2", CAPACITY, {**CAPACITY, "cpu": "3400m", "memory": "14Gi"}),
            machine("m2", "md", "n2", world.capi),
        ]
    )
    instance_type = world.only()
    assert instance_type.overhead.source == "node n2"
    assert _total(instance_type) == {"cpu": "600m", "memory": "2Gi"}


class _NoReads:
    """A client that must not be used."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected {name}")


def test_a_resource_without_replicas_reads_nothing_and_a_failed_read_is_retried_later() -> None:
    world = World()
    idle = NodeOverheads(_NoReads(), _NoReads(), world.capi, world.clock)  # type: ignore[arg-type]
    assert idle.learned(world.capi.machine_deployments, worker(replicas=0)) is None

    broken = NodeOverheads(world.server, world.server, world.capi, world.clock)
    world.add(worker(replicas=1))
    # No Machines yet: nothing learned; the next look waits for the retry interval.
    assert broken.learned(world.capi.machine_deployments, worker(replicas=1)) is None
    world.server.apply_manifests(
        [
            _node("n1", CAPACITY, {**CAPACITY, "memory": "15Gi"}),
            machine("m1", "md", "n1", world.capi),
        ]
    )
    assert broken.learned(world.capi.machine_deployments, worker(replicas=1)) is None
    world.clock.advance(31)
    found = broken.learned(world.capi.machine_deployments, worker(replicas=1))
    assert found is not None
    assert found.reserved.to_dict() == {"memory": "1Gi"}


def test_precedence_explicit_then_node_then_kubeadm_config_then_native_then_default() -> None:
    capacity = ResourceList.parse({"cpu": "4", "memory": "16Gi"})
    native = InstanceTypeOverhead(
        kube_reserved=ResourceList.parse({"cpu": "90m", "memory": "1Gi"}), source="EKS"
    )
    config = kubelet_settings(kubeadm_template("w", {"kube-reserved": "cpu=300m"})).components
    learned = LearnedOverhead("n1", ResourceList.parse({"cpu": "250m"}))
    explicit = OverheadPolicy(kube_reserved={"memory": 2 * GI * 1000}, origin="annotation")

    def source(**kwargs: Any) -> str:
        return resolve_overhead(capacity, **kwargs).overhead.source

    everything = {"learned": learned, "kubeadm_config": config, "native": native}
    assert source(policy=explicit, **everything) == "annotation+kubeadm-config"
    assert source(**everything) == "node n1"
    assert source(kubeadm_config=config, native=native) == "kubeadm-config"
    assert source(native=native) == "EKS"
    assert source() == "kubeadm default"
    # Explicit settings lay over the static base per resource name: cpu from the config.
    both = resolve_overhead(capacity, policy=explicit, kubeadm_config=config).overhead
    assert both.kube_reserved.to_dict() == {"cpu": "300m", "memory": "2Gi"}


def test_an_instance_type_takes_its_strongest_members_overhead() -> None:
    world = World()
    world.add(
        kubeadm_template("reserved", {"kube-reserved": "memory=2Gi"}),
        worker("md-a", bootstrap=None, failure_domain="a"),
        worker("md-b", bootstrap="reserved", failure_domain="b"),
    )
    instance_type = world.only()
    assert [o.zone for o in instance_type.offerings] == ["a", "b"]
    assert instance_type.overhead.source == "kubeadm-config"


def test_nodeclass_annotations_still_win_and_say_so() -> None:
    world = World({"system_reserved": "cpu=50m"})
    world.add(kubeadm_template("workers", {"kube-reserved": "cpu=100m"}), worker())
    instance_type = world.only({"karpenter.cluster.x-k8s.io/kube-reserved": "cpu=1"})
    assert instance_type.overhead.source == "annotation+kubeadm-config"
    assert instance_type.allocatable.milli("cpu") == 4000 - 1000 - 50
    only_option = world.only()
    assert only_option.overhead.source == "plugin option+kubeadm-config"
