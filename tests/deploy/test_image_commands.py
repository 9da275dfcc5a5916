"""The container image, run: deploy/Containerfile's commands as its user, read-only, offline.

No image can be built here, so the test does what the image does: it runs the Containerfile's
build-stage RUN lines as written (``imagerun`` lists what it maps and why), keeps only what the
final stage copies, and runs ``karpenter-capi`` with the final stage's ENV and ENTRYPOINT, as its
USER (when the test runs as root; as the current user otherwise), with the working directory
read-only and ``HOME`` naming a directory that does not exist. The controller's ``run --once
--dry-run`` goes against the demo cluster served over HTTP, and must decide without writing a
thing. A change to the Containerfile is therefore tested; a construct this test cannot follow
fails it instead of being skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from karpenter_capi import __version__
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import EVENTS, NODECLAIMS
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.demo import DEMO_SCENARIO, mark_unschedulable
from karpenter_capi.sim.manifests import load_manifest_files

from .containerfile import Containerfile, IgnoreRules, parse
from .imagerun import Build, Layout, Runtime, interpreter_for, read_runtime, run_as

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "deploy" / "Containerfile"
READ_VERBS = {"get", "list", "watch"}


def _project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def _containerfile() -> Containerfile:
    return parse(CONTAINERFILE.read_text())


@pytest.fixture
def layout() -> Iterator[Layout]:
    # Not under tmp_path: pytest's base directory is private to us, and the image's user must
    # be able to read the venv.
    top = Path(tempfile.mkdtemp(prefix="karpenter-image-"))
    top.chmod(0o755)
    try:
        yield Layout(top)
    finally:
        for directory in (top, *(p for p in top.rglob("*") if p.is_dir() and not p.is_symlink())):
            directory.chmod(0o755)
        shutil.rmtree(top)


class Image:
    """The emulated image, built with ``build_args``, and a way to run commands in it."""

    def __init__(self, layout: Layout, build_args: dict[str, str]) -> None:
        containerfile = _containerfile()
        self.layout = layout
        self.runtime: Runtime = read_runtime(containerfile, layout, build_args)
        self.user = self.runtime.user if os.geteuid() == 0 else None
        interpreter = interpreter_for(self.user)
        if interpreter is None:
            version = "{}.{}".format(*sys.version_info[:2])
            pytest.skip(f"no Python {version} here that uid:gid {self.user} can run")
        Build(
            context=ROOT,
            layout=layout,
            build_args=build_args,
            interpreter=interpreter,
            project=_project(),
            venv=self.runtime.venv,
        ).run(containerfile)
        self.workdir = layout.top / "workdir"
        self.workdir.mkdir()
        self.workdir.chmod(0o555)

    def run(self, *argv: str) -> tuple[str, str]:
        done = run_as(list(argv), user=self.user, env=self.runtime.env, cwd=self.workdir)
        assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
        return done.stdout, done.stderr

    def files(self) -> dict[str, float]:
        """Every file of the image and of the working directory, with its modification time."""
        found = {}
        for top in (self.layout.root, self.layout.dependencies, self.workdir):
            for path in top.rglob("*"):
                found[str(path)] = path.lstat().st_mtime
        return found

    def give_to_user(self, path: Path) -> None:
        """As a Secret volume with the pod's fsGroup would: the file is the user's to read."""
        if self.user is not None:
            os.chown(path, *self.user)


def test_the_image_declares_what_the_deployment_relies_on() -> None:
    containerfile = _containerfile()
    project = _project()
    layout = Layout(Path("/build"))
    runtime = read_runtime(containerfile, layout, {})
    # Exec form, no shell: the controller is PID 1 and receives SIGTERM itself.
    assert runtime.entrypoint == ["karpenter-capi", "run"]
    uid, gid = runtime.user
    assert uid != 0
    assert gid != 0
    # The chart's probes and ServiceMonitor use the port `run` listens on by default.
    assert runtime.exposed == ["8080"]
    assert runtime.copied == ["/opt/venv"]
    assert runtime.env["PATH"].startswith(f"{layout.image('/opt/venv/bin')}:")
    assert runtime.env["PYTHONDONTWRITEBYTECODE"] == "1"
    # Nothing a library might write under HOME can land: there is no such directory.
    assert runtime.env["HOME"] == str(layout.image("/nonexistent"))
    # Both stages are one Python: the venv's compiled extensions belong to it.
    build_stage, final = containerfile.stages
    assert build_stage.base == final.base == containerfile.global_args["PYTHON_IMAGE"]
    labels = runtime.labels
    assert labels["org.opencontainers.image.title"] == project["name"]
    assert labels["org.opencontainers.image.description"] == project["description"]
    assert labels["org.opencontainers.image.licenses"] == project["license"]
    # VERSION's default is the package's version: bump them together.
    assert labels["org.opencontainers.image.version"] == project["version"] == __version__
    assert {"org.opencontainers.image.source", "org.opencontainers.image.revision"} <= set(labels)


def test_the_build_context_is_only_what_the_containerfile_copies() -> None:
    ignore = IgnoreRules((ROOT / ".dockerignore").read_text())
    for sent in ("pyproject.toml", "README.md", "src/karpenter_capi/cli/entry.py"):
        assert not ignore.excluded(sent), sent
    for kept_out in (
        ".venv/lib/python3.11/site-packages/numpy/__init__.py",
        ".git/HEAD",
        "tests/conftest.py",
        "deploy/Containerfile",
        "src/karpenter_capi/cli/__pycache__/entry.cpython-311.pyc",
        "src/karpenter_capi.egg-info/PKG-INFO",
    ):
        assert ignore.excluded(kept_out), kept_out


@pytest.mark.slow
def test_the_image_runs_version_plugins_and_a_dry_run_round_as_its_user(layout: Layout) -> None:
    image = Image(layout, build_args={})
    # The wheel's dependencies are the image's: nothing of the build stage is left, and without
    # EXTRAS the cloud SDKs are not there.
    assert sorted(p.name for p in layout.root.iterdir()) == ["opt"]
    # The console script starts the venv's Python directly: no shell.
    script = layout.image("/opt/venv/bin/karpenter-capi")
    assert script.read_text().splitlines()[0] == f"#!{layout.image('/opt/venv/bin/python')}"
    # The wheel was built from the copied sources with the README (its long description).
    [metadata] = layout.image("/opt/venv").glob("lib/python*/site-packages/*.dist-info/METADATA")
    readme = (ROOT / "README.md").read_text().splitlines()[0]
    assert readme in metadata.read_text()
    before = image.files()
    if image.user is not None:
        # What follows runs as the image's USER, without root's supplementary group.
        python = str(layout.image("/opt/venv/bin/python"))
        out, _ = image.run(
            python, "-c", "import os; print(os.getuid(), os.getgid(), os.getgroups())"
        )
        uid, gid = image.user
        assert out.strip() == f"{uid} {gid} []"

    out, _ = image.run("karpenter-capi", "--version")
    assert out.strip() == f"karpenter-capi {_project()['version']}"

    out, _ = image.run("karpenter-capi", "plugins")
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert rows["generic_capi"][1:4] == ["yes", "karpenter-capi", _project()["version"]]
    assert {"capa", "capz"} <= set(rows)
    out, _ = image.run("karpenter-capi", "plugins", "--plugins", "capa", "--json")
    [capa] = [row for row in json.loads(out) if row["name"] == "capa"]
    assert "module 'boto3' is not installed" in capa["error"]
    assert "karpenter-capi[aws]" in capa["error"]

    server = new_cluster(clock=FakeClock())
    server.apply_manifests(load_manifest_files([DEMO_SCENARIO]))
    mark_unschedulable(server)
    version = server.resource_version
    requests = server.requests.snapshot()
    with HttpFront(server) as front:
        kubeconfig = write_kubeconfig(front.url, layout.top / "secret" / "kubeconfig")
        image.give_to_user(kubeconfig)
        out, err = image.run(
            *image.runtime.entrypoint, "--once", "--dry-run", "--kubeconfig", str(kubeconfig)
        )

    # It decided: the GPU pod on the GPU type, the pod nothing can hold reported, and the rest
    # re-packed on its first round (five NodeClaims at $1.622/h where greedy's four cost
    # $1.698/h): the optimizer's budget is counted work, so a cold start in a fresh process
    # decides as a warm one does (greedy's plan, kept while a wall-clock budget ran out
    # importing SciPy, had four).
    claims = [line for line in out.splitlines() if line.startswith("NodeClaim (dry run): ")]
    assert len(claims) == 5
    assert any(line.split()[3] == "g5.xlarge" for line in claims)
    assert "    pods: default/trainer" in out
    assert "cannot provision default/too-big" in out
    assert out.splitlines()[-1] == "5 NodeClaims, $1.6220/h in all"
    assert err.count("would create nodeclaim") == 5
    assert "outcome=re-packed saved=$0.0760/h" in err
    # ...and wrote nothing: not to the cluster, not to the image, not to the working directory.
    assert server.resource_version == version
    assert server.list(NODECLAIMS).items == []
    assert server.list(EVENTS).items == []
    served = server.requests.since(requests)
    assert served.get("list", 0) > 0
    assert set(served) <= READ_VERBS
    assert image.files() == before
    assert list(image.workdir.iterdir()) == []
    assert not Path(image.runtime.env["HOME"]).exists()


@pytest.mark.slow
def test_the_all_extras_image_loads_every_cloud_plugin(layout: Layout) -> None:
    image = Image(layout, build_args={"EXTRAS": "all"})
    out, _ = image.run("karpenter-capi", "plugins", "--plugins", "generic_capi,capa,capz", "--json")
    rows = {row["name"]: row for row in json.loads(out)}
    assert set(rows) == {"generic_capi", "capa", "capz"}
    for row in rows.values():
        assert row["enabled"] is True
        assert row["error"] is None, row["error"]
