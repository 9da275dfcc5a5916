"""Pod request computation, as k8s.io/component-helpers resource.PodRequests does it."""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.values.resources import (
    ResourceList,
    container_requests,
    pod_requests,
)


def container(name: str, cpu: str | None = None, memory: str | None = None, **extra: Any) -> Any:
    requests = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    return {"name": name, "resources": {"requests": requests}, **extra}


def pod(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def rl(values: dict[str, str]) -> ResourceList:
    return ResourceList.parse(values)


def test_app_containers_add_up() -> None:
    requests = pod_requests(
        pod(containers=[container("a", "100m", "128Mi"), container("b", "250m", "1Gi")])
    )
    assert requests == rl({"cpu": "350m", "memory": "1152Mi"})


def test_a_pod_without_requests_asks_for_nothing() -> None:
    assert pod_requests(pod(containers=[{"name": "a"}])).is_zero()
    assert pod_requests({"spec": {}}).is_zero()


def test_limits_stand_in_for_missing_requests() -> None:
    spec = {"name": "a", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}
    assert container_requests(spec) == rl({"cpu": "2", "memory": "1Gi"})
    both = {"name": "a", "resources": {"limits": {"cpu": "2"}, "requests": {"cpu": "1"}}}
    assert container_requests(both) == rl({"cpu": "1"})


def test_a_big_init_container_raises_the_request_per_resource() -> None:
    requests = pod_requests(
        pod(
            initContainers=[container("migrate", "2", "64Mi")],
            containers=[container("app", "500m", "1Gi")],
        )
    )
    # Init containers run alone before the app: max per resource, not the sum.
    assert requests == rl({"cpu": "2", "memory": "1Gi"})


def test_sidecars_run_alongside_the_app_and_later_init_containers() -> None:
    requests = pod_requests(
        pod(
            initContainers=[
                container("istio", "100m", "128Mi", restartPolicy="Always"),
                container("migrate", "1", "256Mi"),
                container("log-shipper", "50m", "64Mi", restartPolicy="Always"),
            ],
            containers=[container("app", "200m", "512Mi")],
        )
    )
    # Steady state: app + both sidecars = 350m / 704Mi.
    # Init phase peak: migrate (1 / 256Mi) running next to istio (100m / 128Mi) = 1100m / 384Mi.
    assert requests == rl({"cpu": "1100m", "memory": "704Mi"})


def test_sidecar_started_after_a_classic_init_container_does_not_count_during_it() -> None:
    requests = pod_requests(
        pod(
            initContainers=[
                container("migrate", "1"),
                container("proxy", "500m", restartPolicy="Always"),
            ],
            containers=[container("app", "600m")],
        )
    )
    # migrate runs alone (1); afterwards proxy + app = 1100m, which is the larger.
    assert requests == rl({"cpu": "1100m"})


def test_overhead_is_added_on_top() -> None:
    requests = pod_requests(
        pod(
            containers=[container("app", "1", "1Gi")],
            initContainers=[container("init", "3")],
            overhead={"cpu": "250m", "memory": "120Mi"},
        )
    )
    assert requests == rl({"cpu": "3250m", "memory": "1144Mi"})


def test_pod_level_resources_replace_cpu_and_memory_only() -> None:
    requests = pod_requests(
        pod(
            containers=[
                {
                    "name": "app",
                    "resources": {"requests": {"cpu": "100m", "nvidia.com/gpu": "1"}},
                }
            ],
            resources={"requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "8"}},
        )
    )
    assert requests == rl({"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"})


def test_pod_count_is_optional() -> None:
    requests = pod_requests(pod(containers=[container("a", "1")]), include_pod_count=True)
    assert requests == rl({"cpu": "1", "pods": "1"})
