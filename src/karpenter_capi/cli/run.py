"""``karpenter-capi run``: its flags (each with an environment variable) and how it starts.

Kept apart from the other subcommands because this is the one command that runs for months in
a pod: its flags mirror upstream Karpenter's settings where they mean the same thing
(``BATCH_IDLE_DURATION``, ``METRICS_PORT``, leader election), and it owns signal handling for a
graceful stop.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import threading
from types import FrameType
from typing import TYPE_CHECKING, TextIO

from karpenter_capi.cli.clusters import (
    clients,
    fleet_management_client,
    load_plugins,
    user_agent,
)
from karpenter_capi.cli.options import parse_feature_gates, plugin_names
from karpenter_capi.core.api.duration import DurationError, parse_duration
from karpenter_capi.core.errors import InvalidInputError
from karpenter_capi.core.runtime.collector import POLICIES, CollectorPolicy, policy_named

if TYPE_CHECKING:
    from karpenter_capi.core.clock import Clock
    from karpenter_capi.core.kube.client import KubeClient
    from karpenter_capi.core.operator import OperatorOptions


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in ("1", "true", "yes", "on")


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    """The flags of ``run`` beyond the cluster and plugin ones."""
    env = os.environ.get
    run.add_argument(
        "--once",
        action="store_true",
        help="run one provisioning round, print what it decided and exit (no other controller)",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        default=_env_bool("DRY_RUN", False),
        help="decide and log, write nothing (env DRY_RUN)",
    )
    run.add_argument(
        "--batch-idle-duration",
        type=float,
        default=env("BATCH_IDLE_DURATION", "1"),
        help="solve once no new pending pod has appeared for this many seconds "
        "(env BATCH_IDLE_DURATION, default 1)",
    )
    run.add_argument(
        "--batch-max-duration",
        type=float,
        default=env("BATCH_MAX_DURATION", "10"),
        help="solve at the latest this many seconds after the first new pending pod "
        "(env BATCH_MAX_DURATION, default 10)",
    )
    run.add_argument(
        "--batch-complete-idle-duration",
        type=float,
        default=env("BATCH_COMPLETE_IDLE_DURATION", "0.2"),
        help="solve once no new pending pod has appeared for this many seconds when every "
        "new pod's ReplicaSet has all its replicas; negative: always wait "
        "--batch-idle-duration (env BATCH_COMPLETE_IDLE_DURATION, default 0.2)",
    )
    run.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=_env_bool("LEADER_ELECT", True),
        help="hold a Lease so that one replica acts (env LEADER_ELECT, default on)",
    )
    run.add_argument(
        "--leader-election-name",
        default=env("LEADER_ELECTION_NAME", "karpenter-leader-election"),
        help="the Lease's name (env LEADER_ELECTION_NAME)",
    )
    run.add_argument(
        "--leader-election-namespace",
        default=env("LEADER_ELECTION_NAMESPACE", env("SYSTEM_NAMESPACE", "kube-system")),
        help="the Lease's namespace (env LEADER_ELECTION_NAMESPACE or SYSTEM_NAMESPACE, "
        "default kube-system)",
    )
    run.add_argument(
        "--leader-election-identity",
        default=env("LEADER_ELECTION_IDENTITY"),
        help="this replica's name in the Lease (default: hostname and a random suffix)",
    )
    for flag, variable, default, what in (
        ("--leader-election-lease-duration", "LEADER_ELECTION_LEASE_DURATION", "15", "lease"),
        ("--leader-election-renew-deadline", "LEADER_ELECTION_RENEW_DEADLINE", "10", "renewal"),
        ("--leader-election-retry-period", "LEADER_ELECTION_RETRY_PERIOD", "2", "retry"),
    ):
        run.add_argument(
            flag,
            type=float,
            default=env(variable, default),
            help=f"seconds, the {what} timing of leader election (env {variable}, "
            f"default {default})",
        )
    run.add_argument(
        "--metrics-port",
        type=int,
        default=env("METRICS_PORT", "8080"),
        help="port of /metrics, /healthz and /readyz; 0 picks a free one, -1 serves none "
        "(env METRICS_PORT, default 8080)",
    )
    run.add_argument(
        "--unready-after",
        type=float,
        default=env("UNREADY_AFTER", "30"),
        help="seconds a cache may fail to list or watch in a row before /readyz answers 503 "
        "(env UNREADY_AFTER, default 30)",
    )
    run.add_argument(
        "--metrics-host",
        default=env("METRICS_HOST", "0.0.0.0"),
        help="address the endpoint listens on (env METRICS_HOST, default 0.0.0.0)",
    )
    run.add_argument(
        "--workers",
        type=int,
        default=env("WORKERS", "4"),
        help="concurrent reconciles per controller (env WORKERS, default 4)",
    )
    run.add_argument(
        "--create-concurrency",
        type=int,
        default=env("CREATE_CONCURRENCY", "8"),
        help="NodeClaims of a provisioning round created at once, so a round's nodes are "
        "asked for together (env CREATE_CONCURRENCY, default 8)",
    )
    run.add_argument(
        "--packing-optimizer-budget",
        type=parse_budget,
        default=env("PACKING_OPTIMIZER_BUDGET", "5s"),
        help="safety net (CPU seconds) of each solve re-packing unconstrained NodeClaims into a "
        "cheaper plan after the greedy pass; the work itself is bounded by counts, so the "
        "plan does not depend on machine load and this is never reached normally; reaching "
        "it keeps the greedy plan; 0 disables re-packing "
        "(env PACKING_OPTIMIZER_BUDGET, default 5s)",
    )
    run.add_argument(
        "--feature-gates",
        default=env("FEATURE_GATES", ""),
        help="feature gates: upstream Karpenter's SpotToSpotConsolidation (default false), "
        "and NominatedNodeNameForExpectation (default: on when kube-apiserver is v1.35+; set "
        "it false when kube-scheduler runs with that gate off), e.g. "
        "SpotToSpotConsolidation=true,NominatedNodeNameForExpectation=false "
        "(env FEATURE_GATES)",
    )
    run.add_argument(
        "--gc-policy",
        choices=POLICIES,
        default=env("GC_POLICY", "unwalked"),
        help="the cyclic garbage collector's policy: survivors freezes what each of its "
        "collections leaves, so long-lived caches are walked once, and gives it back for a "
        "whole walk when a fleet member stops and hourly; unwalked also freezes what a young or "
        "middle collection would walk before it walks it, so only whole walks look for "
        "cycles; middle-survivors freezes only what "
        "its middle and full collections leave; startup freezes start-up's objects only; off "
        "keeps CPython's defaults (env GC_POLICY, default unwalked; docs/runtime.md)",
    )
    add_fleet_arguments(run)
    run.add_argument(
        "--disruption-poll-interval",
        type=float,
        default=env("DISRUPTION_POLL_INTERVAL", "10"),
        help="seconds between disruption passes (env DISRUPTION_POLL_INTERVAL, default 10)",
    )


def add_fleet_arguments(run: argparse.ArgumentParser) -> None:
    """Fleet mode's flags (docs/fleet.md); the chart sets their environment variables."""
    env = os.environ.get
    fleet = run.add_argument_group("fleet mode")
    fleet.add_argument(
        "--fleet",
        action="store_true",
        default=_env_bool("FLEET", False),
        help="run in the management cluster and serve every selected Cluster API Cluster's "
        "workload cluster through its <cluster>-kubeconfig Secret; --kubeconfig (or the "
        "pod's service account) is then the management cluster (env FLEET)",
    )
    fleet.add_argument(
        "--fleet-cluster-selector",
        default=env("FLEET_CLUSTER_SELECTOR"),
        metavar="SELECTOR",
        help="label selector on the cluster.x-k8s.io Clusters to serve, e.g. "
        "autoscaler=karpenter (env FLEET_CLUSTER_SELECTOR; default: every Cluster)",
    )
    fleet.add_argument(
        "--fleet-namespace",
        action="append",
        default=None,
        metavar="NAMESPACE",
        help="a namespace of the management cluster whose Clusters are served (repeatable; "
        "env FLEET_NAMESPACES, comma separated; default: all namespaces)",
    )
    fleet.add_argument(
        "--fleet-workers",
        type=int,
        default=env("FLEET_WORKERS", "8"),
        help="worker threads shared by every served cluster's controllers, taken in turn "
        "across clusters; 0: each cluster's controllers start their own "
        "(env FLEET_WORKERS, default 8)",
    )
    fleet.add_argument(
        "--fleet-decision-workers",
        type=int,
        default=env("FLEET_DECISION_WORKERS", "2"),
        help="more pool threads that run only provisioning decisions, so a closed batch "
        "window never waits for a shared worker busy with another cluster (env "
        "FLEET_DECISION_WORKERS, default 2; ignored with "
        "--fleet-workers 0)",
    )
    fleet.add_argument(
        "--fleet-running-workers",
        type=int,
        default=env("FLEET_RUNNING_WORKERS", "2"),
        help="shared pool workers that may run Python at once; one waiting on an API server "
        "does not count, and provisioning decisions never wait (env FLEET_RUNNING_WORKERS, "
        "default 2; 0: no limit)",
    )
    fleet.add_argument(
        "--fleet-shards",
        action=argparse.BooleanOptionalAction,
        default=_env_bool("FLEET_SHARDS", True),
        help="share the Clusters among replicas through Leases in the --leader-election-"
        "namespace (env FLEET_SHARDS, default on)",
    )


def fleet_namespaces(args: argparse.Namespace) -> tuple[str, ...]:
    """``--fleet-namespace`` flags, else ``FLEET_NAMESPACES``; empty: all namespaces."""
    given = args.fleet_namespace
    if given is None:
        given = os.environ.get("FLEET_NAMESPACES", "").split(",")
    return tuple(dict.fromkeys(n.strip() for n in given if n.strip()))


def parse_budget(text: str) -> float:
    """``200ms``, ``1s``, ``1m`` or a number of seconds (``0.2``) as seconds."""
    raw = text.strip()
    try:
        value = float(raw[:-2]) / 1000 if raw.endswith("ms") else float(raw)
    except ValueError:
        try:
            value = parse_duration(raw).total_seconds()
        except DurationError:
            value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"invalid budget {text!r}: expected a duration such as 200ms, 1s or 0 (off)"
        )
    return value


def run_command(args: argparse.Namespace, out: TextIO) -> int:
    """Start the operator (or one round with ``--once``) and run until SIGTERM/SIGINT."""
    from karpenter_capi.core.clock import SystemClock
    from karpenter_capi.core.disruption import DisruptionSettings
    from karpenter_capi.core.operator import Operator, OperatorOptions
    from karpenter_capi.core.provisioning.loop import print_report
    from karpenter_capi.core.provisioning.nominations import GATE, log_mode, nomination_mode
    from karpenter_capi.core.provisioning.provisioner import Provisioner

    clock = SystemClock()
    gates = parse_feature_gates(args.feature_gates)
    policy = _collector_policy(args, clock)
    if args.fleet:
        if args.once:
            raise InvalidInputError("--once serves one cluster; it cannot be used with --fleet")
        workload = management = fleet_management_client(args)
    else:
        workload, management = clients(args)
    if args.once:
        plugins = load_plugins(args, workload, management)
        mode = nomination_mode(workload, gates.get(GATE))
        log_mode(mode)
        report = Provisioner(
            workload,
            plugins,
            clock,
            dry_run=args.dry_run,
            packing_budget=args.packing_optimizer_budget,
            plans_nominated=mode.enabled,
        ).reconcile()
        print_report(report, out)
        return 0
    options = OperatorOptions(
        dry_run=args.dry_run,
        leader_elect=args.leader_elect,
        lease_name=args.leader_election_name,
        lease_namespace=args.leader_election_namespace,
        lease_duration=args.leader_election_lease_duration,
        renew_deadline=args.leader_election_renew_deadline,
        retry_period=args.leader_election_retry_period,
        identity=args.leader_election_identity,
        metrics_host=args.metrics_host,
        metrics_port=None if args.metrics_port < 0 else args.metrics_port,
        batch_idle=args.batch_idle_duration,
        batch_max=args.batch_max_duration,
        batch_complete_idle=(
            None
            if args.batch_complete_idle_duration < 0
            else min(args.batch_complete_idle_duration, args.batch_idle_duration)
        ),
        workers=args.workers,
        create_concurrency=max(1, args.create_concurrency),
        wake_on_pods=True,
        packing_budget=args.packing_optimizer_budget,
        unready_after=args.unready_after,
        disruption=DisruptionSettings(
            poll_seconds=args.disruption_poll_interval,
            spot_to_spot=gates.get("SpotToSpotConsolidation", False),
        ),
        nominations=gates.get(GATE),
    )
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    try:
        if args.fleet:
            return run_fleet(args, out, management, options, stop, policy=policy)
        plugins = load_plugins(args, workload, management)
        operator = Operator(workload, management, plugins, clock, options)

        def started() -> None:
            if policy is not None:
                policy.install()
            where = f" on {operator.server.url}" if operator.server is not None else ""
            out.write(f"karpenter-capi running{where}: {', '.join(operator.controller_names)}\n")
            out.flush()

        return operator.run(stop, on_started=started)
    finally:
        if policy is not None:
            policy.uninstall()


def _collector_policy(args: argparse.Namespace, clock: Clock) -> CollectorPolicy | None:
    """``--gc-policy``'s policy (``core/runtime/collector.py``), installed once started, only
    where the command owns its process: a frozen heap would hide a test process's objects
    from ``sim.footprint``'s walks, and one process has one collector."""
    try:
        policy = policy_named(args.gc_policy, clock)
    except ValueError as exc:  # GC_POLICY's value: argparse checks only the flag's
        raise InvalidInputError(f"--gc-policy (env GC_POLICY): {exc}") from None
    return policy if getattr(args, "owns_process", False) else None


def run_fleet(
    args: argparse.Namespace,
    out: TextIO,
    management: KubeClient,
    options: OperatorOptions,
    stop: threading.Event,
    *,
    policy: CollectorPolicy | None = None,
) -> int:
    """``run --fleet``: every selected Cluster's controllers, from the management cluster."""
    from karpenter_capi.core.clock import SystemClock
    from karpenter_capi.core.fleet import Fleet, FleetOptions, Kubeconfig
    from karpenter_capi.core.kube.config import connect_kubeconfig
    from karpenter_capi.core.kube.official import OfficialClient
    from karpenter_capi.core.plugin_host import parse_plugin_options
    from karpenter_capi.core.runtime.gate import RunGate

    agent = user_agent(args)  # the replica's name, on every member's client too
    # The pool's gate counts a worker waiting on any of the fleet's clients as not running.
    gate = RunGate(args.fleet_running_workers) if args.fleet_running_workers > 0 else None
    if gate is not None and isinstance(management, OfficialClient):
        management.blocking = gate

    def connect(kubeconfig: Kubeconfig) -> KubeClient:
        client = connect_kubeconfig(kubeconfig.document, user_agent=agent)
        if gate is not None:
            client.blocking = gate
        return client

    fleet = Fleet(
        management,
        clock=SystemClock(),
        connect=connect,
        options=FleetOptions(
            cluster_selector=args.fleet_cluster_selector or None,
            namespaces=fleet_namespaces(args),
            shards=args.fleet_shards,
            pool_workers=max(0, args.fleet_workers),
            decision_workers=max(0, args.fleet_decision_workers),
            gate=gate,
            identity=args.leader_election_identity,
            lease_namespace=args.leader_election_namespace,
            lease_duration=args.leader_election_lease_duration,
            renew_deadline=args.leader_election_renew_deadline,
            retry_period=args.leader_election_retry_period,
            plugins=tuple(plugin_names(args)),
            plugin_options=parse_plugin_options(args.plugin_option),
        ),
        operator_options=options,
    )
    fleet.check_selector()

    def started() -> None:
        if policy is not None:
            policy.install()
        where = f" on {fleet.server.url}" if fleet.server is not None else ""
        scope = ", ".join(fleet.options.namespaces) or "all namespaces"
        out.write(f"karpenter-capi running in fleet mode{where}: Clusters in {scope}\n")
        out.flush()

    return fleet.run(stop, on_started=started)
