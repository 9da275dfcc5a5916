"""The ``capa`` plugin's interruption queue: EventBridge's EC2 and AWS Health events on SQS.

Upstream Karpenter's AWS provider learns of spot interruptions, rebalance recommendations,
scheduled maintenance and instance state changes from an SQS queue that EventBridge rules feed
(``pkg/controllers/interruption/controller.go: Reconcile``); this is the same queue and the same
four message shapes, parsed as upstream's parsers do (``messages/*/parser.go``), handed to the
core as ``InterruptionNotice``s (``karpenter_capi_interruptions``) and deleted once the core has
acted (``karpenter_capi_interruptions_handled``). A message no parser knows, or that does not
parse, is deleted at once (upstream's rule), and logged at WARNING once per kind of problem.

``ReceiveMessage`` is a long poll (20 s, upstream's, option ``interruption-wait-seconds``): the
core calls the hook on the interruption controller's own thread, so the wait blocks nobody.
An AWS Health event may name several instances: its message is deleted when every notice it
produced has been handed back.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, Final

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from karpenter_capi.plugin_api import (
    INSTANCE_STOPPED,
    INSTANCE_TERMINATED,
    REBALANCE_RECOMMENDATION,
    SCHEDULED_CHANGE,
    SPOT_INTERRUPTED,
    Clock,
    InterruptionNotice,
    PluginContext,
    ProviderError,
)
from karpenter_capi.plugins.capa.clients import AwsClients

DEFAULT_WAIT_SECONDS: Final = 20
"""SQS's longest long poll, upstream's ``WaitTimeSeconds``."""
VISIBILITY_TIMEOUT_SECONDS: Final = 20
"""Upstream's ``VisibilityTimeout``: a message not deleted is received again after this."""
SPOT_NOTICE: Final = timedelta(minutes=2)
"""EC2 reclaims a spot instance two minutes after its interruption warning."""
_FORGET_AFTER: Final = 300.0
_STOPPED_STATES: Final = frozenset({"stopping", "stopped"})
_ACCEPTED_STATES: Final = frozenset({"stopping", "stopped", "shutting-down", "terminated"})

_Parsed = list[tuple[str, str, datetime | None]]
"""(kind, instance ID, deadline) for each instance a message names."""


def _time(body: Mapping[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(str(body.get("time") or "").replace("Z", "+00:00"))
    except ValueError:
        return None


def _detail(body: Mapping[str, Any]) -> Mapping[str, Any]:
    detail = body.get("detail")
    if not isinstance(detail, Mapping):
        raise ValueError("its detail is not an object")
    return detail


def _instance(detail: Mapping[str, Any]) -> str:
    instance = detail.get("instance-id")
    if not isinstance(instance, str) or not instance:
        raise ValueError("its detail has no instance-id")
    return instance


def _spot(body: Mapping[str, Any]) -> _Parsed:
    sent = _time(body)
    return [(SPOT_INTERRUPTED, _instance(_detail(body)), sent + SPOT_NOTICE if sent else None)]


def _rebalance(body: Mapping[str, Any]) -> _Parsed:
    return [(REBALANCE_RECOMMENDATION, _instance(_detail(body)), None)]


def _state_change(body: Mapping[str, Any]) -> _Parsed:
    detail = _detail(body)
    state = str(detail.get("state") or "").lower()
    if state not in _ACCEPTED_STATES:
        return []  # pending, running: nothing to do (upstream's acceptedStates)
    kind = INSTANCE_STOPPED if state in _STOPPED_STATES else INSTANCE_TERMINATED
    return [(kind, _instance(detail), None)]


def _health(body: Mapping[str, Any]) -> _Parsed:
    detail = _detail(body)
    if detail.get("service") != "EC2" or detail.get("eventTypeCategory") != "scheduledChange":
        return []
    try:
        start: datetime | None = parsedate_to_datetime(str(detail.get("startTime") or ""))
    except (TypeError, ValueError):
        start = None
    return [
        (SCHEDULED_CHANGE, str(entity["entityValue"]), start)
        for entity in detail.get("affectedEntities") or ()
        if isinstance(entity, Mapping) and entity.get("entityValue")
    ]


PARSERS: Final[Mapping[tuple[str, str, str], Callable[[Mapping[str, Any]], _Parsed]]] = {
    ("0", "aws.ec2", "EC2 Spot Instance Interruption Warning"): _spot,
    ("0", "aws.ec2", "EC2 Instance Rebalance Recommendation"): _rebalance,
    ("0", "aws.ec2", "EC2 Instance State-change Notification"): _state_change,
    ("0", "aws.health", "AWS Health Event"): _health,
}
"""Upstream's ``DefaultParsers``, keyed as its ``parserKey`` (version, source, detail-type)."""


def parse_message(raw: str) -> _Parsed:
    """What an EventBridge message on the queue says; ``[]`` for events of no interest.

    Raises ``ValueError`` naming the problem when the body is not such an event.
    """
    if not raw:
        return []
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from exc
    if not isinstance(body, Mapping):
        raise ValueError("not a JSON object")
    key = (str(body.get("version")), str(body.get("source")), str(body.get("detail-type")))
    parser = PARSERS.get(key)
    return parser(body) if parser is not None else []


class InterruptionQueue:
    """One SQS queue: received messages as notices, deleted when all are handed back."""

    def __init__(
        self,
        sqs: Any,
        queue: str,
        clock: Clock,
        log: logging.Logger,
        *,
        wait_seconds: int = DEFAULT_WAIT_SECONDS,
    ) -> None:
        self._sqs = sqs
        self._queue = queue
        self._clock = clock
        self._log = log
        self._wait = wait_seconds
        self._url: str | None = queue if queue.startswith("https://") else None
        self._lock = threading.Lock()
        # receipt handle -> (notices not handed back yet, when received)
        self._pending: dict[str, tuple[int, float]] = {}
        self._said: set[str] = set()

    def _queue_url(self) -> str:
        if self._url is None:
            try:
                self._url = str(self._sqs.get_queue_url(QueueName=self._queue)["QueueUrl"])
            except (ClientError, BotoCoreError) as exc:
                raise ProviderError(f"interruption queue {self._queue!r}: {exc}") from exc
        return self._url

    def receive(self) -> list[InterruptionNotice]:
        url = self._queue_url()
        try:
            answer = self._sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                VisibilityTimeout=VISIBILITY_TIMEOUT_SECONDS,
                WaitTimeSeconds=self._wait,
                MessageSystemAttributeNames=["SentTimestamp"],
            )
        except (ClientError, BotoCoreError) as exc:
            raise ProviderError(f"interruption queue {self._queue!r}: {exc}") from exc
        notices: list[InterruptionNotice] = []
        for message in answer.get("Messages") or ():
            notices.extend(self._notices(url, message))
        return notices

    def _notices(self, url: str, message: Mapping[str, Any]) -> list[InterruptionNotice]:
        receipt = str(message.get("ReceiptHandle") or "")
        try:
            parsed = parse_message(str(message.get("Body") or ""))
        except (ValueError, KeyError, TypeError) as exc:
            self._say_once(f"deleting an interruption message that does not parse: {exc}")
            self._delete(url, [receipt])
            return []
        if not parsed:
            self._delete(url, [receipt])
            return []
        sent_ms = (message.get("Attributes") or {}).get("SentTimestamp")
        sent = datetime.fromtimestamp(int(sent_ms) / 1000, UTC) if sent_ms else None
        with self._lock:
            self._pending[receipt] = (len(parsed), self._clock.monotonic())
        return [
            InterruptionNotice(
                kind=kind,
                instance=instance,
                deadline=deadline,
                receipt=receipt,
                sent_at=sent,
                detail=f"EventBridge message {message.get('MessageId', '')}",
            )
            for kind, instance, deadline in parsed
        ]

    def handled(self, notices: list[InterruptionNotice]) -> None:
        done = []
        with self._lock:
            for notice in notices:
                entry = self._pending.get(notice.receipt)
                if entry is None:
                    continue
                left = entry[0] - 1
                if left > 0:
                    self._pending[notice.receipt] = (left, entry[1])
                else:
                    del self._pending[notice.receipt]
                    done.append(notice.receipt)
            # A message whose notices never came back was received again under a new receipt.
            stale = self._clock.monotonic() - _FORGET_AFTER
            self._pending = {r: e for r, e in self._pending.items() if e[1] > stale}
        if done:
            self._delete(self._queue_url(), done)

    def _delete(self, url: str, receipts: list[str]) -> None:
        for receipt in receipts:
            try:
                self._sqs.delete_message(QueueUrl=url, ReceiptHandle=receipt)
            except (ClientError, BotoCoreError) as exc:
                raise ProviderError(
                    f"interruption queue {self._queue!r}: deleting a message: {exc}"
                ) from exc

    def _say_once(self, line: str) -> None:
        if line in self._said:
            self._log.debug("%s", line)
            return
        self._said.add(line)
        self._log.warning("%s", line)


def _region_of(url: str) -> str | None:
    # https://sqs.REGION.amazonaws.com/ACCOUNT/NAME
    host = url.removeprefix("https://").split("/", 1)[0].split(".")
    return host[1] if len(host) > 2 and host[0] == "sqs" else None


def queue_from_options(ctx: PluginContext, clients: AwsClients) -> InterruptionQueue | None:
    """The queue ``--plugin-option capa.interruption-queue=NAME`` names, or ``None``.

    Its region is the URL's, else the ``region`` option, else boto3's default
    (``AWS_REGION``); raises ``ProviderError`` naming the option when there is none.
    """
    queue = (ctx.option("interruption-queue") or ctx.option("interruption_queue") or "").strip()
    if not queue:
        return None
    region = (
        _region_of(queue)
        or (ctx.option("region") or "").strip()
        or boto3.session.Session().region_name
    )
    if not region:
        raise ProviderError(
            f"interruption queue {queue!r}: no region; give its URL, "
            "--plugin-option capa.region=REGION or AWS_REGION"
        )
    wait = ctx.option("interruption-wait-seconds") or ctx.option("interruption_wait_seconds")
    try:
        wait_seconds = DEFAULT_WAIT_SECONDS if wait is None else int(wait)
    except ValueError:
        wait_seconds = -1
    if not 0 <= wait_seconds <= DEFAULT_WAIT_SECONDS:
        raise ProviderError(
            f"--plugin-option capa.interruption-wait-seconds={wait!r}: "
            f"give whole seconds from 0 to {DEFAULT_WAIT_SECONDS}"
        )
    return InterruptionQueue(
        clients.sqs(region), queue, ctx.clock, ctx.logger, wait_seconds=wait_seconds
    )
