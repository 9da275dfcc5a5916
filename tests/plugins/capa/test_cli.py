"""``karpenter-capi instance-types`` says where each shape and price came from."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from karpenter_capi.cli import main
from karpenter_capi.core.api import wellknown
from karpenter_capi.plugins.capa.plugin import CapaPlugin, set_default_plugin
from tests.plugins.capa.builders import PRICE, aws_template, cluster, machine_deployment, nodeclass
from tests.support.aws import StubbedAws, fake_credentials, stubbed_aws


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubbedAws]:
    fake_credentials(monkeypatch)
    with stubbed_aws() as doubles:
        # The `capa` entry point's hooks delegate to this plugin instead of boto3's default.
        set_default_plugin(CapaPlugin(doubles, background_refresh=False))
        try:
            yield doubles
        finally:
            set_default_plugin(None)


def _manifests(tmp_path: Path) -> Path:
    nodepool: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": wellknown.NODECLASS_API_VERSION.split("/")[0],
                        "kind": wellknown.NODECLASS_KIND,
                        "name": "default",
                    },
                    "requirements": [],
                }
            }
        },
    }
    docs = [
        *cluster(),
        aws_template("m5-large", "m5.large"),
        aws_template("m5-large-spot", "m5.large", spot=True),
        aws_template("c5-xlarge", "c5.xlarge"),
        machine_deployment("m5", "m5-large"),
        machine_deployment("m5-spot", "m5-large-spot"),
        machine_deployment("c5", "c5-xlarge", annotations={PRICE: "0.15"}),
        nodeclass(),
        nodepool,
    ]
    path = tmp_path / "aws.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def _run(*argv: str) -> str:
    out = io.StringIO()
    assert main(list(argv), out=out) == 0
    return out.getvalue()


def test_the_source_column_and_json_fields(aws: StubbedAws, tmp_path: Path) -> None:
    aws.queue_prices()
    path = _manifests(tmp_path)
    text = _run("instance-types", "-f", str(path), "--plugins", "generic_capi,capa")
    lines = text.splitlines()
    header = next(line for line in lines if "SOURCE" in line)
    assert re.split(r"\s{2,}", header.strip())[-2:] == ["SOURCE", "OVERHEAD"]
    rows = {
        (cells[0], cells[5]): cells
        for cells in (re.split(r"\s{2,}", line.strip()) for line in lines)
        if cells[0] in ("m5.large", "c5.xlarge")
    }
    assert rows[("m5.large", "on-demand")][6] == "0.0960"
    assert rows[("m5.large", "on-demand")][8] == "AWS"
    assert rows[("m5.large", "spot")][6] == "0.0365"
    assert rows[("c5.xlarge", "on-demand")][8] == "AWS, price annotation"
    # A self-managed cluster on AWS (an AWSCluster, no EKS control plane): kubeadm's reserve.
    assert rows[("m5.large", "on-demand")][9] == "cpu=0,memory=100Mi (kubeadm default)"

    aws.queue_prices()  # a second command is a second process: it fetches again
    doc = json.loads(
        _run("instance-types", "-f", str(path), "--plugins", "generic_capi,capa", "--json")
    )
    types = {it["name"]: it for it in doc[0]["instanceTypes"]}
    assert types["m5.large"]["source"] == "AWS"
    assert types["m5.large"]["overhead"] == {
        "kubeReserved": {},
        "systemReserved": {},
        "evictionThreshold": {"memory": "100Mi"},
        "total": {"memory": "100Mi"},
        "source": "kubeadm default",
    }
    assert {
        (o["capacityType"], o["price"], o["priceSource"]) for o in types["m5.large"]["offerings"]
    } == {
        ("on-demand", 0.096, "AWS"),
        ("spot", 0.0365, "AWS"),
    }
    assert types["c5.xlarge"]["offerings"][0]["priceSource"] == "annotation"
