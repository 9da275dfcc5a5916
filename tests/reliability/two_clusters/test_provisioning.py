"""Management and workload as two API servers: provisioning goes through the management
cluster's MachineDeployments for pods of the workload cluster, in process and over HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest

from karpenter_capi.core.kube import MACHINES, NODEPOOLS
from karpenter_capi.core.kube.errors import Unauthorized
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.invariants import assert_invariants
from tests.reliability.two_clusters.env import (
    NAMESPACE,
    TwoClusters,
    clients_from_command_line,
    names,
    no_kind_crosses_over,
    ready_nodeclaims,
    write_kubeconfig,
)


def test_pods_of_the_workload_cluster_scale_machine_deployments_of_the_management_cluster(
    env: TwoClusters,
) -> None:
    env.start()
    env.deploy("web", 6)
    env.advance(60)
    assert env.pending() == []
    claims = env.nodeclaims()
    assert claims
    assert ready_nodeclaims(env) == names(claims)
    machines = env.machines()
    assert len(machines) == len(claims) == len(env.nodes())
    assert sum(env.replicas().values()) == len(machines)
    no_kind_crosses_over(env)
    assert_invariants(env.workload, env.management, clock=env.clock, plugins=env.plugins)


WORKLOAD_TOKEN = "wl-token-5f0c2a9e"
MANAGEMENT_TOKEN = "mgmt-token-8d41b7c3"


@pytest.mark.parametrize("management_by", ["url-and-token-env", "kubeconfig-flag"])
def test_over_http_with_the_clusters_configured_as_a_user_would(
    env: TwoClusters, tmp_path: Path, management_by: str
) -> None:
    with (
        HttpFront(env.workload, token=WORKLOAD_TOKEN) as workload_front,
        HttpFront(env.management, token=MANAGEMENT_TOKEN) as management_front,
    ):
        kubeconfig = write_kubeconfig(
            tmp_path / "workload.yaml", workload_front.url, WORKLOAD_TOKEN, "workload"
        )
        environ = {"KUBECONFIG": str(kubeconfig)}
        argv: list[str] = []
        if management_by == "url-and-token-env":
            environ["KARPENTER_CAPI_MANAGEMENT_URL"] = management_front.url
            environ["KARPENTER_CAPI_MANAGEMENT_TOKEN"] = MANAGEMENT_TOKEN
        else:
            path = write_kubeconfig(
                tmp_path / "management.yaml", management_front.url, MANAGEMENT_TOKEN, "mgmt"
            )
            argv = ["--management-kubeconfig", str(path)]
        workload, management = clients_from_command_line(argv, environ)
        with workload, management:
            assert workload is not management
            env.start(workload, management)
            env.deploy("web", 5)
            env.advance(60)
    assert env.pending() == []
    claims = env.nodeclaims()
    assert claims
    assert ready_nodeclaims(env) == names(claims)
    assert len(env.machines()) == len(claims) == len(env.nodes())
    no_kind_crosses_over(env)
    # The plugins' HTTP clients are closed: the controller's own dry run is not asked.
    assert_invariants(env.workload, env.management, clock=env.clock)


def test_each_front_refuses_the_other_clusters_token(env: TwoClusters, tmp_path: Path) -> None:
    with (
        HttpFront(env.workload, token=WORKLOAD_TOKEN) as workload_front,
        HttpFront(env.management, token=MANAGEMENT_TOKEN) as management_front,
    ):
        crossed = OfficialClient.from_url(management_front.url, token=WORKLOAD_TOKEN)
        right = OfficialClient.from_url(workload_front.url, token=WORKLOAD_TOKEN)
        with crossed, right:
            with pytest.raises(Unauthorized):
                crossed.list(MACHINES, NAMESPACE)
            assert right.list(NODEPOOLS).items
