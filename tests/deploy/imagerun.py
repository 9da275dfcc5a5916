"""Run deploy/Containerfile's instructions on the host, for the image test.

The build stage's RUN lines run as written, with ``/bin/sh -c``, in the order the file gives,
with its ENV and ARG values. What an image builder provides and the host does not is mapped, and
each mapping is a deliberate, listed difference from a real build:

- the image's filesystem is a directory (``Layout.root``): absolute paths in RUN and ENV lines
  are rewritten into it, so ``/opt/venv`` is ``<root>/opt/venv``;
- ``python`` is an interpreter of the test's own Python version that the image's user can run
  (as root, a pyenv interpreter under /root is not one);
- nothing is downloaded: pip reads no configuration and no index (``PIP_NO_INDEX``); the build
  backend and pip come from the test's environment through ``PYTHONPATH`` instead of the build
  isolation's download; the project's dependencies come from the test's environment too, hard
  linked into a directory that a ``.pth`` file in the new venv names, so the RUN line's own
  ``pip install`` finds them installed instead of fetching them. Only the dependencies the
  project declares (for the chosen extras) are linked, so an undeclared import still fails.

The final stage is read, not run: what it copies from the build stage is all that is kept of the
root, and its ENV, USER and ENTRYPOINT are what the test runs the commands with.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .containerfile import (
    Containerfile,
    IgnoreRules,
    Stage,
    copy_from_context,
    exec_form,
    pairs,
    parse_copy,
    substitute,
)

BASE_IMAGE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}
"""The environment python:3.11-slim itself sets (its ``${PATH}``), under the file's ENV lines."""

_ABSOLUTE = re.compile(r"(?:^|(?<=[\s\"'=(:]))/(?=[A-Za-z_])")

DEPENDENCIES_PTH = "_image_test_dependencies.pth"


@dataclass(frozen=True)
class Layout:
    """Where the emulated image lives; every directory is readable by the image's user."""

    top: Path

    @property
    def root(self) -> Path:
        return self.top / "root"

    @property
    def shim(self) -> Path:
        return self.top / "shim"

    @property
    def build_tools(self) -> Path:
        return self.top / "build-tools"

    @property
    def dependencies(self) -> Path:
        return self.top / "dependencies"

    def image(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def rewrite(self, text: str) -> str:
        """Absolute paths of the image, moved under the root."""
        return _ABSOLUTE.sub(f"{self.root}/", text)


@dataclass
class Runtime:
    """The final stage as a container runtime sees it."""

    env: dict[str, str]
    entrypoint: list[str]
    user: tuple[int, int]
    exposed: list[str]
    labels: dict[str, str]
    copied: list[str]

    @property
    def venv(self) -> str:
        (venv,) = self.copied
        return venv


def read_runtime(
    containerfile: Containerfile, layout: Layout, build_args: Mapping[str, str]
) -> Runtime:
    stage = containerfile.final
    args: dict[str, str] = {}
    env = dict(BASE_IMAGE_ENV)
    labels: dict[str, str] = {}
    copied: list[str] = []
    exposed: list[str] = []
    user: tuple[int, int] | None = None
    entrypoint: list[str] = []
    for ins in stage.instructions:
        scope = {**args, **env}
        if ins.keyword == "ARG":
            for key, default in pairs(ins.args, scope):
                args[key] = build_args.get(key, default)
        elif ins.keyword == "LABEL":
            labels.update(pairs(ins.args, scope))
        elif ins.keyword == "ENV":
            env.update(pairs(layout.rewrite(ins.args), scope))
        elif ins.keyword == "COPY":
            copy = parse_copy(ins.args, scope)
            if copy.from_stage is None or copy.sources != [copy.destination]:
                raise ValueError(
                    f"line {ins.line}: the final stage may only copy a build path as is"
                )
            copied.extend(copy.sources)
        elif ins.keyword == "USER":
            uid, _, gid = ins.args.partition(":")
            if not (uid.isdigit() and gid.isdigit()):
                raise ValueError(f"line {ins.line}: USER must be numeric uid:gid, not {ins.args!r}")
            user = (int(uid), int(gid))
        elif ins.keyword == "EXPOSE":
            exposed.extend(ins.args.split())
        elif ins.keyword == "ENTRYPOINT":
            entrypoint = exec_form(ins.args)
        else:
            raise ValueError(f"line {ins.line}: the image test does not handle {ins.keyword} here")
    if user is None:
        raise ValueError("the final stage names no USER")
    return Runtime(env, entrypoint, user, exposed, labels, copied)


@dataclass(frozen=True)
class Build:
    """One build of the image into ``layout.root``: the project at ``context`` with
    ``build_args``; ``venv`` is what the final stage copies, the rest is dropped after."""

    context: Path
    layout: Layout
    build_args: Mapping[str, str]
    interpreter: str
    project: Mapping[str, Any]
    venv: str

    def run(self, containerfile: Containerfile) -> None:
        layout = self.layout
        layout.root.mkdir()
        layout.shim.mkdir()
        (layout.shim / "python").symlink_to(self.interpreter)
        tools = installed_closure(_requirements(["pip", "setuptools", "wheel"]))
        link_distributions(tools, layout.build_tools)
        ignore = IgnoreRules((self.context / ".dockerignore").read_text())
        for stage in containerfile.stages[:-1]:
            self._stage(stage, ignore)
        _keep_only(layout, [self.venv])

    def _stage(self, stage: Stage, ignore: IgnoreRules) -> None:
        layout = self.layout
        args: dict[str, str] = {}
        env = dict(BASE_IMAGE_ENV)
        cwd = layout.root
        for ins in stage.instructions:
            scope = {**args, **env}
            if ins.keyword == "ARG":
                for key, default in pairs(ins.args, scope):
                    args[key] = self.build_args.get(key, default)
            elif ins.keyword == "ENV":
                env.update(pairs(layout.rewrite(ins.args), scope))
            elif ins.keyword == "WORKDIR":
                cwd = layout.image(substitute(ins.args, scope))
                cwd.mkdir(parents=True, exist_ok=True)
            elif ins.keyword == "COPY":
                copy = parse_copy(ins.args, scope)
                if copy.from_stage is not None:
                    raise ValueError(f"line {ins.line}: COPY --from in a build stage")
                absolute = copy.destination.startswith("/")
                target = layout.image(copy.destination) if absolute else cwd / copy.destination
                copy_from_context(self.context, copy, target, ignore)
            elif ins.keyword == "RUN":
                if ins.args.startswith("["):
                    raise ValueError(f"line {ins.line}: exec-form RUN is not handled")
                venv = layout.image(self.venv)
                if (venv / "pyvenv.cfg").exists() and not layout.dependencies.exists():
                    # What the coming pip install would download, there before it runs.
                    extras = [e for e in scope.get("EXTRAS", "").split(",") if e]
                    provide_dependencies(venv, self.project, extras, layout.dependencies)
                _run(ins.line, layout.rewrite(ins.args), cwd, _build_env(scope, layout))
            else:
                raise ValueError(f"line {ins.line}: the image test does not handle {ins.keyword}")


def _build_env(scope: Mapping[str, str], layout: Layout) -> dict[str, str]:
    env = dict(scope)
    env["PATH"] = f"{layout.shim}:{env['PATH']}"
    env["HOME"] = str(layout.top / "build-home")
    # Offline, and away from this machine's pip settings (indexes, find-links, constraints).
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_NO_INDEX"] = "1"
    # pip reads this variable as the value of build_isolation: "0" builds with the setuptools
    # on PYTHONPATH instead of downloading one into an isolated environment.
    env["PIP_NO_BUILD_ISOLATION"] = "0"
    env["PYTHONPATH"] = str(layout.build_tools)
    return env


def _run(line: int, command: str, cwd: Path, env: Mapping[str, str]) -> None:
    done = subprocess.run(
        ["/bin/sh", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        umask=0o022,  # as a builder runs RUN lines, so that the image's user can read the result
    )
    if done.returncode != 0:
        raise AssertionError(
            f"RUN at line {line} exited {done.returncode}:\n{command}\n{done.stdout}{done.stderr}"
        )


def _keep_only(layout: Layout, paths: Iterable[str]) -> None:
    """Drop everything the final stage does not copy (the sources, the wheel)."""
    kept = [layout.image(p) for p in paths]

    def prune(directory: Path) -> None:
        for entry in directory.iterdir():
            if entry in kept:
                continue
            if any(entry in k.parents for k in kept):
                prune(entry)
            elif entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()

    prune(layout.root)


def provide_dependencies(
    venv: Path, project: Mapping[str, Any], extras: list[str], into: Path
) -> None:
    """Make the project's declared dependencies (for ``extras``) importable in ``venv``."""
    link_distributions(installed_closure(project_requirements(project, extras)), into)
    (site,) = venv.glob("lib/python*/site-packages")
    (site / DEPENDENCIES_PTH).write_text(f"{into}\n")


def project_requirements(project: Mapping[str, Any], extras: Iterable[str]) -> list[Requirement]:
    """The requirements of pyproject's ``[project]`` with ``extras``, self-references expanded."""
    name = canonicalize_name(project["name"])
    optional: Mapping[str, list[str]] = project.get("optional-dependencies", {})
    requirements = _requirements(project.get("dependencies", []))
    todo, done = list(extras), set[str]()
    while todo:
        extra = todo.pop()
        if extra in done:
            continue
        if extra not in optional:
            raise ValueError(f"{project['name']} has no extra {extra!r}")
        done.add(extra)
        for requirement in _requirements(optional[extra]):
            if canonicalize_name(requirement.name) == name:
                todo.extend(requirement.extras)
            else:
                requirements.append(requirement)
    return requirements


def _requirements(texts: Iterable[str]) -> list[Requirement]:
    found = [Requirement(t) for t in texts]
    return [r for r in found if r.marker is None or r.marker.evaluate({"extra": ""})]


def installed_closure(requirements: Iterable[Requirement]) -> list[importlib.metadata.Distribution]:
    """The distributions of the test's environment that ``requirements`` need, transitively."""
    found: dict[str, importlib.metadata.Distribution] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = list(requirements)
    while todo:
        requirement = todo.pop()
        key = (canonicalize_name(requirement.name), frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            raise LookupError(
                f"{requirement.name} is not installed where the tests run (make installs it)"
            ) from None
        found[key[0]] = dist
        for text in dist.requires or []:
            child = Requirement(text)
            contexts = ("", *requirement.extras)
            if child.marker is None or any(child.marker.evaluate({"extra": e}) for e in contexts):
                todo.append(child)
    return [found[name] for name in sorted(found)]


def link_distributions(dists: Iterable[importlib.metadata.Distribution], into: Path) -> None:
    """Hard link (else copy) each distribution's top-level files and directories into ``into``:
    a directory the image's user can read even when the originals sit under an unreadable one."""
    into.mkdir(exist_ok=True)
    for dist in dists:
        if dist.files is None:
            raise LookupError(f"{dist.metadata['Name']} has no RECORD of its files")
        tops = {f.parts[0] for f in dist.files if f.parts[0] not in ("..", "__pycache__")}
        for top in sorted(tops):
            source = Path(str(dist.locate_file(top)))
            target = into / top
            if target.exists() or not source.exists():
                continue  # a namespace package's shared directory, or a file RECORD lists only
            if source.is_dir():
                shutil.copytree(source, target, copy_function=_link_or_copy)
            else:
                _link_or_copy(source, target)


def _link_or_copy(source: str | Path, target: str | Path) -> str:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
    return str(target)


def interpreter_for(user: tuple[int, int] | None) -> str | None:
    """An interpreter of this Python version (major.minor) that ``user`` can run, if any."""
    version = "{}.{}".format(*sys.version_info[:2])
    candidates = [
        getattr(sys, "_base_executable", sys.executable),
        sys.executable,
        shutil.which(f"python{version}"),
        f"/usr/bin/python{version}",
        f"/usr/local/bin/python{version}",
    ]
    for candidate in dict.fromkeys(c for c in candidates if c and os.path.exists(c)):
        try:
            probe = run_as(
                [candidate, "-I", "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
                user=user,
                env={"PATH": BASE_IMAGE_ENV["PATH"]},
                cwd=Path("/"),
            )
        except PermissionError:
            continue  # under a directory the user cannot enter
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate
    return None


def run_as(
    argv: list[str], *, user: tuple[int, int] | None, env: Mapping[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as ``user`` (uid, gid, no supplementary groups), or as we are when None."""
    drop: dict[str, Any] = {}
    if user is not None:
        drop = {"user": user[0], "group": user[1], "extra_groups": []}
    return subprocess.run(
        argv,
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        **drop,
    )
