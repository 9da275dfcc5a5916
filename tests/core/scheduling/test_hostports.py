"""Host ports: two pods that bind the same port cannot share a node, as kube-scheduler decides."""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.scheduling.hostports import HostPort, HostPortUsage
from karpenter_capi.core.scheduling.podspec import pod_host_ports


def port(host_port: int, **extra: Any) -> dict[str, Any]:
    return {"containerPort": host_port, "hostPort": host_port, **extra}


def pod(*ports: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "app", "ports": list(ports)}], **spec},
    }


def place(pods: list[dict[str, Any]]) -> list[int]:
    """First-fit the pods onto as few nodes as host ports allow; the node index of each pod."""
    nodes: list[HostPortUsage] = []
    placement = []
    for candidate in pods:
        for index, usage in enumerate(nodes):
            if usage.conflicts(pod_host_ports(candidate)) is None:
                usage.add(pod_host_ports(candidate))
                placement.append(index)
                break
        else:
            nodes.append(HostPortUsage(pod_host_ports(candidate)))
            placement.append(len(nodes) - 1)
    return placement


def test_two_pods_on_the_same_host_port_need_two_nodes() -> None:
    assert place([pod(port(8080)), pod(port(8080))]) == [0, 1]


def test_the_conflict_names_the_port_that_is_taken() -> None:
    usage = HostPortUsage()
    usage.add(pod_host_ports(pod(port(80), port(443))))
    taken = usage.conflicts(pod_host_ports(pod(port(9000), port(443))))
    assert taken == HostPort("0.0.0.0", "TCP", 443)
    assert str(taken) == "0.0.0.0:443/TCP"


def test_pods_on_different_ports_share_a_node() -> None:
    assert place([pod(port(8080)), pod(port(8081))]) == [0, 0]


def test_container_ports_without_a_host_port_take_nothing() -> None:
    web = pod({"containerPort": 8080}, {"containerPort": 9090, "hostPort": 0})
    assert pod_host_ports(web) == ()
    assert place([web, web]) == [0, 0]


def test_different_host_ips_do_not_conflict() -> None:
    a = pod(port(53, hostIP="10.0.0.1"))
    b = pod(port(53, hostIP="10.0.0.2"))
    assert place([a, b]) == [0, 0]


def test_the_same_host_ip_conflicts() -> None:
    a = pod(port(53, hostIP="10.0.0.1"))
    assert place([a, a]) == [0, 1]


def test_all_addresses_conflicts_with_any_address_either_way_round() -> None:
    everywhere = pod(port(53))
    one_ip = pod(port(53, hostIP="10.0.0.1"))
    assert place([everywhere, one_ip]) == [0, 1]
    assert place([one_ip, everywhere]) == [0, 1]
    explicit = pod(port(53, hostIP="0.0.0.0"))
    assert place([one_ip, explicit]) == [0, 1]


def test_the_ipv6_unspecified_address_binds_everything_too() -> None:
    # Karpenter treats "::" like 0.0.0.0; being the cautious one never strands a pod.
    assert place([pod(port(53, hostIP="::")), pod(port(53, hostIP="10.0.0.1"))]) == [0, 1]


def test_one_address_written_two_ways_is_one_address() -> None:
    mapped = pod(port(53, hostIP="::ffff:10.0.0.1"))
    plain = pod(port(53, hostIP="10.0.0.1"))
    assert place([mapped, plain]) == [0, 1]


def test_udp_and_tcp_on_the_same_port_do_not_conflict() -> None:
    dns_udp = pod(port(53, protocol="UDP"))
    dns_tcp = pod(port(53, protocol="TCP"))
    assert place([dns_udp, dns_tcp]) == [0, 0]
    assert place([dns_udp, dns_udp]) == [0, 1]


def test_protocol_defaults_to_tcp() -> None:
    assert place([pod(port(80)), pod(port(80, protocol="TCP"))]) == [0, 1]
    assert pod_host_ports(pod(port(80))) == (HostPort("0.0.0.0", "TCP", 80),)


def test_sidecars_hold_their_host_ports_but_classic_init_containers_do_not() -> None:
    spec_pod = pod(
        port(80),
        initContainers=[
            {"name": "setup", "ports": [port(9000)]},
            {"name": "proxy", "restartPolicy": "Always", "ports": [port(15001)]},
        ],
    )
    assert pod_host_ports(spec_pod) == (
        HostPort("", "", 15001),
        HostPort("", "", 80),
    )
    assert place([spec_pod, pod(port(9000))]) == [0, 0]
    assert place([spec_pod, pod(port(15001))]) == [0, 1]


def test_a_copy_does_not_see_ports_added_later_to_the_original() -> None:
    daemon_ports = HostPortUsage(pod_host_ports(pod(port(9100))))
    claim = daemon_ports.copy()
    claim.add(pod_host_ports(pod(port(8080))))
    assert daemon_ports.conflicts(pod_host_ports(pod(port(8080)))) is None
    assert claim.conflicts(pod_host_ports(pod(port(8080)))) is not None
    assert claim.conflicts(pod_host_ports(pod(port(9100)))) is not None
    assert len(claim) == 2
    assert len(daemon_ports) == 1
