"""``karpenter-capi instance-types`` says where each shape and price came from."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from capa_builders import PRICE, aws_template, cluster, machine_deployment, nodeclass

from fakes.aws import StubbedAws, fake_credentials, stubbed_aws
from karpenter_capi.cli import main
from karpenter_capi.core.api import wellknown
from karpenter_capi.plugins.capa.plugin import CapaPlugin, set_default_plugin


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
    assert header.split()[-1] == "SOURCE"
    rows = {
        (line.split()[0], line.split()[5]): line
        for line in lines
        if line.strip().startswith(("m5.large", "c5.xlarge"))
    }
    assert "0.0960" in rows[("m5.large", "on-demand")]
    assert rows[("m5.large", "on-demand")].rstrip().endswith("AWS")
    assert "0.0365" in rows[("m5.large", "spot")]
    assert rows[("c5.xlarge", "on-demand")].rstrip().endswith("AWS, price annotation")

    aws.queue_prices()  # a second command is a second process: it fetches again
    doc = json.loads(
        _run("instance-types", "-f", str(path), "--plugins", "generic_capi,capa", "--json")
    )
    types = {it["name"]: it for it in doc[0]["instanceTypes"]}
    assert types["m5.large"]["source"] == "AWS"
    assert {
        (o["capacityType"], o["price"], o["priceSource"]) for o in types["m5.large"]["offerings"]
    } == {
        ("on-demand", 0.096, "AWS"),
        ("spot", 0.0365, "AWS"),
    }
    assert types["c5.xlarge"]["offerings"][0]["priceSource"] == "annotation"
