"""The clients a subcommand builds name themselves after the program and the replica."""

from __future__ import annotations

from pathlib import Path

import pytest

from karpenter_capi import __version__
from karpenter_capi.cli.clusters import clients, user_agent
from karpenter_capi.cli.entry import build_parser
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig


def test_run_names_the_replica_in_every_client_it_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run --leader-election-identity replica-1``: both clients (and, in fleet mode, each
    member's, through the same ``user_agent``) send ``karpenter-capi/VERSION (replica-1)``;
    nothing is left behind for clients built afterwards without it."""
    monkeypatch.delenv("LEADER_ELECTION_IDENTITY", raising=False)
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig("http://127.0.0.1:1", kubeconfig)
    parser = build_parser()
    named = parser.parse_args(
        ["run", "--kubeconfig", str(kubeconfig), "--leader-election-identity", "replica-1"]
    )
    plain = parser.parse_args(["run", "--kubeconfig", str(kubeconfig)])
    assert user_agent(named) == f"karpenter-capi/{__version__} (replica-1)"
    assert user_agent(plain) == f"karpenter-capi/{__version__}"
    for args in (named, plain):
        workload, management = clients(args)
        assert isinstance(workload, OfficialClient)
        assert isinstance(management, OfficialClient)
        try:
            assert workload.api_client.user_agent == user_agent(args)
            assert management.api_client.user_agent == user_agent(args)
        finally:
            workload.close()
            management.close()
