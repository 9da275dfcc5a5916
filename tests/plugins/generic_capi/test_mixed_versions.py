"""The plugin and Cluster API's controllers at different served versions of the core kinds.

The simulated server stores Machines and MachineDeployments at v1beta2 and converts every read
and write at v1beta1, as CAPI's conversion webhook does (``sim.apiserver.capi_core_versions``).
A plugin pinned to one version (``CAPI_VERSION``) and CAPI's controllers watching the other
must still launch, bind, and delete exactly the marked Machine: the fields both sides touch
(replicas through ``scale``, template labels, the scale-from-zero and ``delete-machine``
annotations, provider IDs) survive the conversion.
"""

from __future__ import annotations

import pytest

from karpenter_capi.core.errors import InstanceNotFoundError
from karpenter_capi.core.kube import MACHINES
from karpenter_capi.plugins.generic_capi.binding import ANNOTATION_DELETE_MACHINE
from tests.plugins.generic_capi.env import names, new_env


@pytest.mark.parametrize(
    ("plugin", "controllers"), [("v1beta1", "v1beta2"), ("v1beta2", "v1beta1")]
)
def test_launch_and_delete_across_versions(
    plugin: str, controllers: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = new_env(plugin, monkeypatch=monkeypatch, version=controllers, delete_delay=5)
    env.deployment("md-a")
    claims = names("nc", 3)
    for name in claims:
        env.nodeclaim(name)
    env.launch_all(claims)
    bound = {name: machines[0] for name, machines in env.bindings().items()}
    assert sorted(bound) == claims
    assert env.replicas("md-a") == 3

    assert env.delete("nc-001") is True
    victim = env.api.get(MACHINES, bound["nc-001"], "default")
    assert ANNOTATION_DELETE_MACHINE in victim["metadata"]["annotations"]
    assert env.replicas("md-a") == 2
    env.driver.advance(10)
    with pytest.raises(InstanceNotFoundError):
        env.delete("nc-001")
    assert sorted(m["metadata"]["name"] for m in env.machines()) == sorted(
        [bound["nc-000"], bound["nc-002"]]
    )
