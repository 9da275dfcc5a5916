"""Read deploy/Containerfile and .dockerignore the way an image builder does, for the image test.

No image can be built on the test machines (no registry, no container runtime), so the test runs
the Containerfile's own instructions on the host instead. This module is the reading half: the
instructions of each stage, variable substitution in them, COPY's sources and destination, and
which files of the build context .dockerignore lets through. It supports what the project's file
uses and refuses the rest loudly, so a new construct in the Containerfile fails the test instead
of being skipped.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

_VARIABLE = re.compile(
    r"\$(?:\{(?P<braced>[A-Za-z_]\w*)(?::(?P<op>[-+])(?P<word>[^}]*))?\}|(?P<bare>[A-Za-z_]\w*))"
)


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def only(self, keyword: str) -> Instruction:
        """The stage's single ``keyword`` instruction."""
        found = [i for i in self.instructions if i.keyword == keyword]
        if len(found) != 1:
            raise ValueError(f"expected one {keyword} in stage {self.name or self.base}")
        return found[0]


@dataclass
class Containerfile:
    global_args: dict[str, str]
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    @property
    def final(self) -> Stage:
        return self.stages[-1]


def parse(text: str) -> Containerfile:
    """Split a Containerfile into global ARGs and stages of instructions."""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for instruction in _instructions(text):
        if instruction.keyword == "FROM":
            words = instruction.args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            base = substitute(words[0], global_args)
            stages.append(Stage(base=base, name=name))
        elif not stages:
            if instruction.keyword != "ARG":
                raise ValueError(f"line {instruction.line}: only ARG may precede FROM")
            for key, value in pairs(instruction.args, {}):
                global_args[key] = value
        else:
            stages[-1].instructions.append(instruction)
    return Containerfile(global_args, stages)


def _instructions(text: str) -> list[Instruction]:
    found: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # comment lines may sit inside a continued instruction too
        if not pending:
            start = number
        continued = line.endswith("\\")
        pending.append(line[:-1].strip() if continued else line)
        if not continued:
            keyword, _, args = " ".join(pending).partition(" ")
            found.append(Instruction(keyword.upper(), args.strip(), start))
            pending = []
    if pending:
        raise ValueError(f"line {start}: the last instruction ends with a line continuation")
    return found


def substitute(value: str, variables: dict[str, str]) -> str:
    """Expand ``$NAME``, ``${NAME}``, ``${NAME:-word}`` and ``${NAME:+word}`` as builders do."""

    def expand(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("bare")
        current = variables.get(name, "")
        op = match.group("op")
        if op == "-":
            return current or match.group("word")
        if op == "+":
            return match.group("word") if current else ""
        return current

    expanded = _VARIABLE.sub(expand, value)
    if "${" in expanded:
        raise ValueError(f"unsupported substitution in {value!r}")
    return expanded


def pairs(args: str, variables: dict[str, str]) -> list[tuple[str, str]]:
    """The ``key=value`` pairs of an ENV, LABEL or ARG instruction (ARG's value may be absent)."""
    result: list[tuple[str, str]] = []
    for token in shlex.split(args):
        key, equals, value = token.partition("=")
        if not equals and result:
            raise ValueError(f"legacy 'KEY value' form is not supported: {args!r}")
        result.append((key, substitute(value, variables)))
    return result


def exec_form(args: str) -> list[str]:
    """The argv of a JSON-array ENTRYPOINT or CMD; the shell form is refused."""
    try:
        argv = json.loads(args)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not the exec (JSON array) form: {args!r}") from exc
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ValueError(f"not a JSON array of strings: {args!r}")
    return argv


@dataclass(frozen=True)
class Copy:
    sources: list[str]
    destination: str
    from_stage: str | None


def parse_copy(args: str, variables: dict[str, str]) -> Copy:
    words = [substitute(w, variables) for w in shlex.split(args)]
    flags = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    from_stage = None
    for flag in flags:
        key, _, value = flag[2:].partition("=")
        if key != "from":
            raise ValueError(f"COPY flag {flag} is not supported by the image test")
        from_stage = value
    if len(paths) < 2:
        raise ValueError(f"COPY needs a source and a destination: {args!r}")
    return Copy(paths[:-1], paths[-1], from_stage)


class IgnoreRules:
    """.dockerignore: patterns in order, ``!`` re-includes, the last match decides; a pattern
    that matches a directory covers everything under it."""

    def __init__(self, text: str) -> None:
        self._rules: list[tuple[bool, re.Pattern[str]]] = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            pattern = line[1:] if negated else line
            self._rules.append((negated, re.compile(_glob_regex(pattern.strip("/")))))

    def excluded(self, relative: str) -> bool:
        parts = relative.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        excluded = False
        for negated, regex in self._rules:
            if any(regex.fullmatch(p) for p in prefixes):
                excluded = not negated
        return excluded


def _glob_regex(pattern: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            raise ValueError(f"character classes are not supported: {pattern!r}")
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


def copy_from_context(context: Path, copy: Copy, destination: Path, ignore: IgnoreRules) -> None:
    """COPY from the build context: a directory's contents into ``destination``; a file into it
    when the instruction's destination ends in ``/`` or names several sources, else as it. Files
    .dockerignore excludes are not in the context."""
    into = copy.destination.endswith("/") or len(copy.sources) > 1
    for source in copy.sources:
        path = context / source
        if not path.exists() or ignore.excluded(path.relative_to(context).as_posix()):
            raise FileNotFoundError(f"COPY {source}: not in the build context")
        if path.is_dir():
            for file in sorted(path.rglob("*")):
                if file.is_file() and not ignore.excluded(file.relative_to(context).as_posix()):
                    target = destination / file.relative_to(path)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(file, target)
        else:
            target = destination / path.name if into else destination
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
