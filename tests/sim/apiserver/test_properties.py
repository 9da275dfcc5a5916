"""In process, property-based: watch replay, lists and paginated snapshots always agree.

An informer's cache is correct only if "list, then apply every watch event" reproduces what a
later list returns, for any history of writes, with or without selectors, and a paginated list
must show exactly the state at its first page however much changes between pages.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from karpenter_capi.core.kube.client import PatchType
from karpenter_capi.core.kube.errors import ApiError
from karpenter_capi.core.kube.resources import CONFIGMAPS
from karpenter_capi.sim.apiserver import InMemoryAPIServer

NAMES = st.sampled_from(["a", "b", "c", "d", "e"])
NAMESPACES = st.sampled_from(["default", "kube-system"])
COLOURS = st.sampled_from(["red", "blue"])

Operation = tuple[str, str, str, str]
OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["create", "relabel", "delete", "hold", "release", "delete"]),
        NAMES,
        NAMESPACES,
        COLOURS,
    ),
    max_size=40,
)


def _apply(server: InMemoryAPIServer, operation: Operation) -> None:
    verb, name, namespace, colour = operation
    try:
        if verb == "create":
            body = {"metadata": {"name": name, "namespace": namespace, "labels": {"c": colour}}}
            server.create(CONFIGMAPS, body)
        elif verb == "relabel":
            server.patch(CONFIGMAPS, name, {"metadata": {"labels": {"c": colour}}}, namespace)
        elif verb == "delete":
            server.delete(CONFIGMAPS, name, namespace)
        elif verb == "hold":
            server.patch(
                CONFIGMAPS,
                name,
                {"metadata": {"finalizers": ["example.com/hold"]}},
                namespace,
                patch_type=PatchType.STRATEGIC,
            )
        else:
            server.patch(CONFIGMAPS, name, {"metadata": {"finalizers": None}}, namespace)
    except ApiError:
        pass  # 404s, 409s and 422s are part of the history being generated


def _state(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in items}


@settings(max_examples=60, deadline=None)
@given(operations=OPERATIONS, selector=st.sampled_from([None, "c=red", "c!=red"]))
def test_list_then_watch_reproduces_the_next_list(
    operations: list[Operation], selector: str | None
) -> None:
    server = InMemoryAPIServer()
    half = len(operations) // 2
    for operation in operations[:half]:
        _apply(server, operation)
    listed = server.list(CONFIGMAPS, label_selector=selector)
    cache = _state(listed.items)
    for operation in operations[half:]:
        _apply(server, operation)

    events = server.watch(
        CONFIGMAPS,
        resource_version=listed.resource_version,
        label_selector=selector,
        timeout_seconds=0,
    )
    for event in events:
        key = f"{event.object['metadata']['namespace']}/{event.object['metadata']['name']}"
        if event.type == "DELETED":
            assert key in cache
            del cache[key]
        else:
            assert (key in cache) == (event.type == "MODIFIED")
            cache[key] = event.object

    assert cache == _state(server.list(CONFIGMAPS, label_selector=selector).items)


@settings(max_examples=60, deadline=None)
@given(operations=OPERATIONS, limit=st.integers(min_value=1, max_value=4))
def test_paginated_list_is_the_snapshot_of_its_first_page(
    operations: list[Operation], limit: int
) -> None:
    server = InMemoryAPIServer()
    half = len(operations) // 2
    for operation in operations[:half]:
        _apply(server, operation)
    expected = server.list(CONFIGMAPS).items
    page = server.list(CONFIGMAPS, limit=limit)
    collected = list(page.items)
    for operation in operations[half:]:
        _apply(server, operation)
    while page.continue_token:
        page = server.list(CONFIGMAPS, limit=limit, continue_token=page.continue_token)
        assert len(page.items) <= limit
        collected.extend(page.items)

    assert collected == expected
