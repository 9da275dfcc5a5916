"""The chaos procedure: count a phase's writes, kill at uniformly chosen ones, check the end.

For each phase, the starting state is prepared once; then one run with no kill counts the
controller's writes in the phase's window (``writes``) and the NodeClaims and Machines it
created: the baseline. Each trial then reruns the window from the same prepared state (a forked
copy of it; so, kills aside, the same run) with a few kill points
drawn uniformly among those ``writes`` (seeded by the chaos seed, the phase and the trial), each
killing before its write reaches the API or after, with the answer lost. Every kill restarts
the controller from the API alone (``process.ChaosWorld``). After the window the kills stop, the
cluster settles (until idle and quiet, at most ``settle_seconds``: past the registration TTL,
so a NodeClaim left half launched has had its chance to be reaped), and the trial is judged:

- ``sim.invariants.check_invariants`` finds nothing (no leaked or doubly claimed Machine, no
  stuck NodeClaim, replicas equal to live Machines, no unclaimed Node, no schedulable pending
  pod, no stale disrupted taint), and
- every pod the Deployments ask for exists and is bound.

A kill point is *tried* when the process actually died there (the rerun may write less than the
baseline, leaving late points unreached; those are counted apart, never as tried). Extra nodes
are NodeClaims (and Machines) created in a trial beyond the baseline's: launches the restarts
cost.
"""

from __future__ import annotations

import os
import pickle
import random
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.resources import DEPLOYMENTS, MACHINES, NODECLAIMS, PODS, Resource
from karpenter_capi.sim.chaos.phases import Phase
from karpenter_capi.sim.chaos.process import ChaosWorld, KillPoint, PlannedKills, pick_points
from karpenter_capi.sim.invariants import check_invariants

# Long enough past the registration TTL (900 s) for a NodeClaim whose launch was lost to be
# reaped and replaced; a settle ends earlier once the cluster is idle.
DEFAULT_SETTLE_SECONDS = 1500.0
# Idle, and no controller write for this long: the response to a change is over. Longer than
# the consolidation delays (consolidateAfter, the disruption controller's validation wait).
QUIET_SECONDS = 60.0


@dataclass
class Trial:
    """One rerun of a phase with kills, and what it ended with."""

    phase: str
    seed: int
    trial: int
    points: list[str]
    deaths: list[str]
    unreached: int
    violations: list[str]
    unbound_pods: list[str]
    nodeclaims_created: int
    machines_created: int
    settled: bool = True
    """Whether the cluster went idle within the settle window. A cluster still consolidating
    has pods in flight, so only the invariants that hold at any instant are checked then."""

    @property
    def ok(self) -> bool:
        return self.settled and not self.violations and not self.unbound_pods

    def describe(self) -> str:
        """Everything needed to replay and read a failure, on a few lines."""
        lines = [
            f"chaos seed {self.seed}, phase {self.phase}, trial {self.trial}: "
            f"kill points {', '.join(self.points) or '-'}",
            f"  died: {'; '.join(self.deaths) or 'never'}",
        ]
        if not self.settled:
            lines.append("  did not settle within the settle window (still disrupting)")
        lines += [f"  violation: {v}" for v in self.violations]
        lines += [f"  pod not bound: {p}" for p in self.unbound_pods]
        return "\n".join(lines)


@dataclass
class PhaseReport:
    """A phase's baseline and trials."""

    phase: str
    pods: int
    writes: int
    baseline_nodeclaims: int
    baseline_machines: int
    trials: list[Trial] = field(default_factory=list)

    @property
    def kill_points_tried(self) -> int:
        return sum(len(t.deaths) for t in self.trials)

    @property
    def violations(self) -> int:
        return sum(len(t.violations) + len(t.unbound_pods) for t in self.trials)

    @property
    def extra_nodeclaims(self) -> int:
        return sum(t.nodeclaims_created - self.baseline_nodeclaims for t in self.trials)

    @property
    def extra_machines(self) -> int:
        return sum(t.machines_created - self.baseline_machines for t in self.trials)

    @property
    def unsettled(self) -> int:
        return sum(1 for t in self.trials if not t.settled)

    def failures(self) -> list[Trial]:
        return [t for t in self.trials if not t.ok]


@dataclass
class ChaosReport:
    seed: int
    phases: list[PhaseReport]
    wall_seconds: float

    @property
    def kill_points_tried(self) -> int:
        return sum(p.kill_points_tried for p in self.phases)

    @property
    def violations(self) -> int:
        return sum(p.violations for p in self.phases)

    @property
    def unsettled(self) -> int:
        return sum(p.unsettled for p in self.phases)

    def failures(self) -> list[Trial]:
        return [t for p in self.phases for t in p.failures()]

    def figures(self) -> dict[str, Any]:
        """The report as JSON-ready figures (``benchmarks/chaos.py --json``)."""
        return {
            "seed": self.seed,
            "kill_points_tried": self.kill_points_tried,
            "violations": self.violations,
            "unsettled": self.unsettled,
            "extra_nodeclaims": sum(p.extra_nodeclaims for p in self.phases),
            "extra_machines": sum(p.extra_machines for p in self.phases),
            "wall_seconds": round(self.wall_seconds, 1),
            "phases": [
                {
                    "phase": p.phase,
                    "pods": p.pods,
                    "writes": p.writes,
                    "trials": len(p.trials),
                    "kill_points_tried": p.kill_points_tried,
                    "violations": p.violations,
                    "unsettled": p.unsettled,
                    "extra_nodeclaims": p.extra_nodeclaims,
                    "extra_machines": p.extra_machines,
                    "baseline_nodeclaims": p.baseline_nodeclaims,
                    "baseline_machines": p.baseline_machines,
                }
                for p in self.phases
            ],
            "failures": [asdict(t) for t in self.failures()],
        }


@dataclass
class _Outcome:
    writes: int
    unreached: int
    deaths: list[str]
    violations: list[str]
    unbound_pods: list[str]
    nodeclaims_created: int
    machines_created: int
    settled: bool = True


def _created(client: KubeClient, resource: Resource, since: str) -> int:
    """How many objects of ``resource`` were created after resourceVersion ``since``."""
    stream = client.watch(resource, resource_version=since, timeout_seconds=0)
    return len({e.object["metadata"]["uid"] for e in stream if e.type == "ADDED"})


def _unbound_pods(world: ChaosWorld) -> list[str]:
    """Pods not bound to a node, and replicas the Deployments ask for that have no pod."""
    pods = world.live(PODS)
    problems = [
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in pods
        if not p["spec"].get("nodeName")
    ]
    wanted = sum(int(d["spec"].get("replicas", 1)) for d in world.live(DEPLOYMENTS))
    if len(pods) < wanted:
        problems.append(f"{wanted - len(pods)} of {wanted} Deployment replicas have no pod")
    return problems


def _prepare(phase: Phase, seed: int) -> ChaosWorld:
    """The phase's starting state, reached with no kill."""
    world = ChaosWorld(phase.scenario, seed=seed)
    if phase.prepare_limit > 0:
        world.run_until_idle(quiet=QUIET_SECONDS, limit=phase.prepare_limit)
    return world


def _act(world: ChaosWorld, phase: Phase, points: list[KillPoint], settle: float) -> _Outcome:
    """The phase's window on ``world`` with kills at ``points``, then the settling and checks.

    The window starts on a new controller process, in the baseline as in every trial, so the
    two differ by the kills alone.
    """
    switch = world.switch
    assert isinstance(switch, PlannedKills)
    world.restart()
    since = world.server.list(NODECLAIMS, limit=1).resource_version
    switch.arm(points)
    for action in phase.actions:
        world.apply(action)
    world.run_until_idle(quiet=QUIET_SECONDS, limit=phase.act_limit)
    writes, unreached = switch.writes, switch.pending
    switch.disarm()
    world.run_until_idle(quiet=QUIET_SECONDS, limit=settle)
    # A cluster still launching or disrupting when the window ends has pods between nodes:
    # only what holds at any instant can be checked, and the run is reported as unsettled, not
    # as sound. A pod left pending with nothing under way is checked, and is a violation.
    settled = world.nodeclaims_at_rest()
    violations = check_invariants(
        world.server, clock=world.clock, plugins=world.plugins, settled=settled
    )
    return _Outcome(
        writes=writes,
        unreached=unreached,
        deaths=list(switch.deaths),
        violations=[str(v) for v in violations],
        unbound_pods=_unbound_pods(world) if settled else [],
        nodeclaims_created=_created(world.server, NODECLAIMS, since),
        machines_created=_created(world.server, MACHINES, since),
        settled=settled,
    )


class ChaosRunError(RuntimeError):
    """A run raised (not a violation: the harness or the controller crashed for real)."""


def _isolated(run: Callable[[], _Outcome]) -> _Outcome:
    """``run`` in a forked copy of this process, so every run of a phase starts from the same
    prepared cluster without preparing it again (and without a way to copy it: the server
    holds locks). Where there is no ``fork``, the caller prepares anew for each run."""
    sys.stdout.flush()
    sys.stderr.flush()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, send the outcome, and leave without any cleanup of the parent's
        os.close(read)
        try:
            payload = pickle.dumps((True, run()))
        except BaseException:
            payload = pickle.dumps((False, traceback.format_exc()))
        with os.fdopen(write, "wb") as out:
            out.write(payload)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as incoming:
        data = incoming.read()
    os.waitpid(pid, 0)
    if not data:
        raise ChaosRunError("the run's process died without an answer")
    ok, value = pickle.loads(data)
    if not ok:
        raise ChaosRunError(value)
    assert isinstance(value, _Outcome)
    return value


def _pods(phase: Phase) -> int:
    return sum(w.replicas for w in phase.scenario.workloads)


def run_phase(
    phase: Phase,
    *,
    seed: int,
    kill_points: int,
    kills_per_trial: int,
    settle_seconds: float = DEFAULT_SETTLE_SECONDS,
    progress: Callable[[str], None] | None = None,
) -> PhaseReport:
    """The baseline of ``phase``, then trials of up to ``kills_per_trial`` kills each until
    ``kill_points`` kills have happened.

    A trial's late points may go unreached (restarted controllers often have less to do: a
    new process sees every pending pod at once and launches fewer, better packed nodes than
    the baseline's batches, which it then has no need to consolidate); the next trials make up
    for them. Trials stop at three times the number the points would need, so a phase that
    stopped writing cannot loop forever. ``progress`` is told about each run as it ends.
    """
    say = progress or (lambda _: None)
    fork = hasattr(os, "fork")
    prepared = _prepare(phase, seed) if fork else None

    def outcome(points: list[KillPoint]) -> _Outcome:
        if prepared is None:
            return _act(_prepare(phase, seed), phase, points, settle_seconds)
        return _isolated(lambda: _act(prepared, phase, points, settle_seconds))

    baseline = outcome([])
    say(
        f"{phase.name}: baseline {baseline.writes} writes, {baseline.nodeclaims_created} NodeClaims"
    )
    report = PhaseReport(
        phase.name,
        _pods(phase),
        baseline.writes,
        baseline.nodeclaims_created,
        baseline.machines_created,
    )
    if baseline.violations or baseline.unbound_pods or not baseline.settled:
        # Without kills the phase must already end sound, or no kill can be blamed.
        report.trials.append(_trial(phase, seed, -1, [], baseline))
        return report
    max_trials = 3 * -(-kill_points // max(1, kills_per_trial))
    number = 0
    while report.kill_points_tried < kill_points and number < max_trials and baseline.writes:
        rng = random.Random(f"{seed}/{phase.name}/{number}")
        wanted = min(kills_per_trial, kill_points - report.kill_points_tried)
        points = pick_points(rng, baseline.writes, wanted)
        trial = _trial(phase, seed, number, points, outcome(points))
        report.trials.append(trial)
        say(
            f"{phase.name}: trial {number}, {len(trial.deaths)} kills, "
            f"{'sound' if trial.ok else 'VIOLATIONS' if trial.settled else 'unsettled'}, "
            f"{trial.nodeclaims_created} NodeClaims"
        )
        number += 1
    return report


def _trial(phase: Phase, seed: int, number: int, points: list[KillPoint], run: _Outcome) -> Trial:
    return Trial(
        phase=phase.name,
        seed=seed,
        trial=number,
        points=[str(p) for p in points],
        deaths=run.deaths,
        unreached=run.unreached,
        violations=run.violations,
        unbound_pods=run.unbound_pods,
        nodeclaims_created=run.nodeclaims_created,
        machines_created=run.machines_created,
        settled=run.settled,
    )


def run_trial(
    phase: Phase,
    *,
    seed: int,
    points: list[KillPoint],
    settle_seconds: float = DEFAULT_SETTLE_SECONDS,
) -> Trial:
    """One trial with given kill points (a failure's, to replay it), in this process."""
    run = _act(_prepare(phase, seed), phase, points, settle_seconds)
    return _trial(phase, seed, 0, points, run)


def run_chaos(
    phases: list[Phase],
    *,
    kill_points: int,
    seed: int = 0,
    kills_per_trial: int = 5,
    settle_seconds: float = DEFAULT_SETTLE_SECONDS,
    progress: Callable[[str], None] | None = None,
) -> ChaosReport:
    """``kill_points`` kills spread evenly over ``phases`` (the first phases take the
    remainder), ``kills_per_trial`` at most in one rerun."""
    start = time.perf_counter()
    share, extra = divmod(kill_points, len(phases))
    reports = [
        run_phase(
            phase,
            seed=seed,
            kill_points=share + (1 if index < extra else 0),
            kills_per_trial=kills_per_trial,
            settle_seconds=settle_seconds,
            progress=progress,
        )
        for index, phase in enumerate(phases)
    ]
    return ChaosReport(seed, reports, time.perf_counter() - start)
