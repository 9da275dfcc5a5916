"""``karpenter-capi explain`` says what the bad objects are told on themselves.

A pod pinned to a node that does not exist or waiting for a missing claim, a NodePool no
instance type can satisfy (or not enough of them for its ``minValues``), with an
``expireAfter`` of a second or limits that leave room for no node (or beyond what Kubernetes
counts), and a Node made by hand:
each is named with the same words as its Event or condition, and explain writes nothing.
"""

from __future__ import annotations

import io
import logging

from karpenter_capi.cli.explain import explain
from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.resources import NODES
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins

from .test_pods import SMALL, _pending, _pod
from .world import World


def test_explain_names_every_bad_object_as_its_own_event_or_condition_does() -> None:
    world = World()
    world.nodepool(
        "bad",
        {"requirements": [{"key": wellknown.LABEL_ARCH, "operator": "In", "values": ["arm64"]}]},
    )
    world.nodepool("fast", {"expireAfter": "1s"})
    world.nodepool("paused", {}, limits={"cpu": "0"})
    world.nodepool("roomy", {}, limits={"cpu": "1e400"})
    world.nodepool(
        "narrow",
        {
            "requirements": [
                {"key": wellknown.LABEL_INSTANCE_TYPE, "operator": "Exists", "minValues": 5}
            ]
        },
    )
    world.server.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "hand-node", "labels": {wellknown.LABEL_NODEPOOL: "bad"}},
            "spec": {"providerID": "docker:////hand-node"},
        },
    )
    _pending(world, "pinned", _pod(SMALL, nodeSelector={wellknown.LABEL_HOSTNAME: "nowhere"}))
    environment = PluginEnvironment(
        workload=world.server,
        management=world.server,
        clock=world.clock,
        dry_run=True,
        logger=logging.getLogger("karpenter_capi.plugins"),
    )
    plugins = Plugins.load(["generic_capi"], environment)
    version = world.server.resource_version

    result = explain(world.server, plugins, world.clock)
    out = io.StringIO()
    result.write_text(out)
    text = out.getvalue()

    assert world.server.resource_version == version
    assert "default/pinned: cannot be helped: kubernetes.io/hostname In [nowhere]" in text, text
    assert (
        "NodePool bad: no instance type meets its requirements (all 1 instance types: "
        "kubernetes.io/arch In [arm64]"
    ) in text, text
    assert "NodePool fast: expireAfter 1s is shorter than a node may take to register" in text
    assert "NodePool paused: limits.cpu 0 leaves room for no node" in text, text
    assert "NodePool roomy: limits.cpu 1e400 is beyond what Kubernetes counts (int64)" in text
    assert "NodePool narrow: minValues 5 for node.kubernetes.io/instance-type not met" in text
    assert "Node hand-node: Node carries karpenter.sh/nodepool=bad but no NodeClaim holds" in text
    document = result.as_dict()
    assert "bad" in document["provisioning"]["nodepoolWarnings"]
    assert "hand-node" in document["unclaimedNodes"]
