"""capa's interruption queue: EventBridge's four message shapes on moto's SQS."""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.interruption import InterruptionController
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.resources import NODECLAIMS
from karpenter_capi.plugin_api import (
    INSTANCE_STOPPED,
    INSTANCE_TERMINATED,
    REBALANCE_RECOMMENDATION,
    SCHEDULED_CHANGE,
    SPOT_INTERRUPTED,
    PluginEnvironment,
    Plugins,
    ProviderError,
)
from karpenter_capi.plugins.capa.interruption import parse_message
from karpenter_capi.plugins.capa.plugin import CapaPlugin
from tests.core.lifecycle.harness import Env, new_env
from tests.support.aws import REGION, StubbedAws

SENT = "2026-12-02T04:00:00Z"


def event(source: str, detail_type: str, detail: dict[str, Any]) -> str:
    """An EventBridge event as the rule delivers it to SQS (AWS's documented shape)."""
    return json.dumps(
        {
            "version": "0",
            "id": "7bf73129-1428-4cd3-a780-95db273d1602",
            "detail-type": detail_type,
            "source": source,
            "account": "123456789012",
            "time": SENT,
            "region": REGION,
            "resources": [f"arn:aws:ec2:{REGION}a:instance/i-0abc"],
            "detail": detail,
        }
    )


SPOT = event(
    "aws.ec2",
    "EC2 Spot Instance Interruption Warning",
    {"instance-id": "i-0abc", "instance-action": "terminate"},
)
REBALANCE = event("aws.ec2", "EC2 Instance Rebalance Recommendation", {"instance-id": "i-0abc"})
STOPPING = event(
    "aws.ec2",
    "EC2 Instance State-change Notification",
    {"instance-id": "i-0abc", "state": "stopping"},
)
TERMINATED = event(
    "aws.ec2",
    "EC2 Instance State-change Notification",
    {"instance-id": "i-0abc", "state": "terminated"},
)
RUNNING = event(
    "aws.ec2",
    "EC2 Instance State-change Notification",
    {"instance-id": "i-0abc", "state": "running"},
)
HEALTH = event(
    "aws.health",
    "AWS Health Event",
    {
        "eventArn": "arn:aws:health:us-east-1::event/EC2/EC2_INSTANCE_RETIREMENT_SCHEDULED/x",
        "service": "EC2",
        "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
        "eventTypeCategory": "scheduledChange",
        "startTime": "Sat, 05 Dec 2026 13:00:00 GMT",
        "affectedEntities": [{"entityValue": "i-0abc"}, {"entityValue": "i-0def"}],
    },
)


def test_the_four_shapes_parse_as_upstream() -> None:
    sent = datetime(2026, 12, 2, 4, 0, tzinfo=UTC)
    assert parse_message(SPOT) == [(SPOT_INTERRUPTED, "i-0abc", sent + timedelta(minutes=2))]
    assert parse_message(REBALANCE) == [(REBALANCE_RECOMMENDATION, "i-0abc", None)]
    assert parse_message(STOPPING) == [(INSTANCE_STOPPED, "i-0abc", None)]
    assert parse_message(TERMINATED) == [(INSTANCE_TERMINATED, "i-0abc", None)]
    start = datetime(2026, 12, 5, 13, 0, tzinfo=UTC)
    assert parse_message(HEALTH) == [
        (SCHEDULED_CHANGE, "i-0abc", start),
        (SCHEDULED_CHANGE, "i-0def", start),
    ]


def test_events_of_no_interest_parse_to_nothing_and_garbage_is_refused() -> None:
    assert parse_message(RUNNING) == []
    assert parse_message(event("aws.health", "AWS Health Event", {"service": "RDS"})) == []
    assert parse_message(event("aws.autoscaling", "EC2 Instance Launch Successful", {})) == []
    with pytest.raises(ValueError, match="not JSON"):
        parse_message("{not json")
    with pytest.raises(ValueError, match="no instance-id"):
        parse_message(event("aws.ec2", "EC2 Spot Instance Interruption Warning", {}))


def queue_env(aws: StubbedAws, **options: str) -> tuple[Env, Any, str]:
    env = new_env()
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="karpenter-interruptions")["QueueUrl"]
    env.ctx.plugins = Plugins.from_objects(
        [("capa", CapaPlugin(aws, background_refresh=False))],
        PluginEnvironment(
            workload=env.api,
            management=env.api,
            clock=env.clock,
            options={
                "capa": {
                    "interruption-queue": "karpenter-interruptions",
                    "interruption-wait-seconds": "0",
                    **options,
                }
            },
        ),
    )
    return env, sqs, url


def deleting(env: Env, name: str) -> bool:
    """Deleted: gone, or held by a finalizer with its deletion timestamp set."""
    try:
        return bool(env.get(name)["metadata"].get("deletionTimestamp"))
    except NotFound:
        return True


def messages_left(sqs: Any, url: str) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def spot_claim(env: Env, name: str, instance_id: str) -> None:
    env.nodeclaim(name, capacity_types=("spot",))
    env.api.patch(
        NODECLAIMS,
        name,
        {
            "metadata": {
                "labels": {
                    wellknown.LABEL_INSTANCE_TYPE: "m5.large",
                    wellknown.LABEL_TOPOLOGY_ZONE: "us-east-1a",
                    wellknown.LABEL_CAPACITY_TYPE: "spot",
                }
            }
        },
    )
    env.api.patch(
        NODECLAIMS,
        name,
        {"status": {"providerID": f"aws:///us-east-1a/{instance_id}"}},
        subresource="status",
    )


def test_a_spot_warning_on_the_queue_deletes_the_nodeclaim_and_the_message(
    aws: StubbedAws, caplog: pytest.LogCaptureFixture
) -> None:
    env, sqs, url = queue_env(aws)
    spot_claim(env, "spot-1", "i-0abc")
    spot_claim(env, "other", "i-0zzz")
    sqs.send_message(QueueUrl=url, MessageBody=SPOT)
    sqs.send_message(QueueUrl=url, MessageBody="{not json")
    sqs.send_message(QueueUrl=url, MessageBody=RUNNING)
    controller = InterruptionController(env.ctx)

    with caplog.at_level(logging.WARNING):
        env.caches.sync()
        controller.run_once()
        env.caches.sync()

    assert deleting(env, "spot-1")
    assert not deleting(env, "other")
    assert messages_left(sqs, url) == 0, "handled, unparseable and uninteresting: all deleted"
    assert "deleting an interruption message that does not parse: not JSON" in caplog.text
    message = env.events("SpotInterrupted")[0]["message"]
    assert "the instance goes at 2026-12-02T04:02:00+00:00" in message


def test_a_health_event_is_deleted_once_every_instance_is_handled(aws: StubbedAws) -> None:
    env, sqs, url = queue_env(aws)
    spot_claim(env, "a", "i-0abc")
    spot_claim(env, "b", "i-0def")
    sqs.send_message(QueueUrl=url, MessageBody=HEALTH)
    env.caches.sync()
    InterruptionController(env.ctx).run_once()
    env.caches.sync()
    assert deleting(env, "a")
    assert deleting(env, "b")
    assert len(env.events("InstanceUnhealthy")) == 2
    assert messages_left(sqs, url) == 0


def test_a_missing_queue_is_one_clear_warning(
    aws: StubbedAws, caplog: pytest.LogCaptureFixture
) -> None:
    env, _, _ = queue_env(aws, **{"interruption-queue": "no-such-queue"})
    controller = InterruptionController(env.ctx)
    with caplog.at_level(logging.WARNING):
        controller.run_once()
        controller.run_once()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "interruption queue 'no-such-queue'" in warnings[0].getMessage()


def test_a_bad_wait_option_names_the_option(aws: StubbedAws) -> None:
    env, _, _ = queue_env(aws, **{"interruption-wait-seconds": "60"})
    with pytest.raises(ProviderError, match=re.escape("capa.interruption-wait-seconds='60'")):
        env.ctx.plugins.interruptions()


def test_without_a_queue_option_nothing_is_polled(aws: StubbedAws) -> None:
    env = new_env()
    env.ctx.plugins = Plugins.from_objects(
        [("capa", CapaPlugin(aws, background_refresh=False))],
        PluginEnvironment(workload=env.api, management=env.api, clock=env.clock),
    )
    assert env.ctx.plugins.interruptions() == []


REPO = Path(__file__).resolve().parents[3]
POLICY = REPO / "deploy" / "iam" / "capa-interruption.json"


def test_the_documented_policy_allows_exactly_the_queue_calls(aws: StubbedAws) -> None:
    env, sqs, url = queue_env(aws)
    called: set[str] = set()
    plugin_sqs = aws.sqs(REGION)

    def record(model: Any, **_: Any) -> None:
        called.add(f"sqs:{model.name}")

    plugin_sqs.meta.events.register("provide-client-params.sqs.*", record)
    aws.sqs = lambda region: plugin_sqs  # type: ignore[method-assign]
    spot_claim(env, "spot-1", "i-0abc")
    sqs.send_message(QueueUrl=url, MessageBody=SPOT)
    env.caches.sync()
    InterruptionController(env.ctx).run_once()

    policy = json.loads(POLICY.read_text())
    actions = {a for statement in policy["Statement"] for a in statement["Action"]}
    assert called == actions
    doc = (REPO / "docs" / "aws.md").read_text()
    start = doc.index("### IAM for the interruption queue")
    block = re.search(r"```json\n(.*?)```", doc[start:], re.DOTALL)
    assert block is not None
    assert json.loads(block.group(1)) == policy
