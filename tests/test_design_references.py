"""Every "decision N" cited in the code and the docs is a decision of docs/design.md, and the
one meant.

The decisions were renumbered as they grew, and citations by number alone went on pointing at
whatever took the number ("launch never waits" cited as decision 2, which became "Providers
are plugins"). So a citation carries the start of the decision's bold title in quotes,
``decision 3 ("Launch never waits")``, and this test checks both halves: a renumbering breaks
the citations it makes wrong instead of leaving them to mislead.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"

_HEADING = re.compile(r"^(\d+[a-z]?)\.\s+\*\*(.+?)\*\*", re.MULTILINE)
_CITE = re.compile(r"\bdecisions?\s+(\d+[a-z]?)\b", re.IGNORECASE)
# What must follow the number: the title's start in quotes, after optional punctuation.
_TITLE = re.compile(r'\s*[,:(]?\s*"([^"]+)"')


def _decisions() -> dict[str, str]:
    return {number: title.rstrip(".") for number, title in _HEADING.findall(DESIGN.read_text())}


def _sources() -> list[Path]:
    found = [ROOT / "README.md"]
    for folder, pattern in (("src", "*.py"), ("docs", "*.md"), ("tests", "*.py")):
        found += (ROOT / folder).rglob(pattern)
    found += (ROOT / "benchmarks").rglob("*.py")
    found += (ROOT / "benchmarks").rglob("*.md")
    here = Path(__file__).resolve()
    return sorted(p for p in found if p.resolve() not in (here, DESIGN.resolve()))


def _flat(text: str) -> str:
    """One line per file: citations wrap, and in code a comment's ``#`` starts each line."""
    return re.sub(r"\s+(?:#\s+)?", " ", text)


def _problems(path: Path, decisions: dict[str, str], root: Path = ROOT) -> list[str]:
    text = _flat(path.read_text(encoding="utf-8"))
    where = path.relative_to(root)
    problems = []
    for cite in _CITE.finditer(text):
        number = cite.group(1)
        said = cite.group(0)
        if number not in decisions:
            problems.append(f"{where}: {said!r}: docs/design.md has no decision {number}")
            continue
        quoted = _TITLE.match(text, cite.end())
        title = decisions[number]
        if quoted is None:
            problems.append(f'{where}: {said!r}: add its title, {said} ("{title}")')
            continue
        words = quoted.group(1).rstrip(".")
        if not title.lower().startswith(words.lower()) or len(words) < 10:
            problems.append(
                f"{where}: {said} ({quoted.group(1)!r}) is not the decision's title, {title!r}"
            )
    return problems


def test_design_md_numbers_its_decisions_once() -> None:
    numbers = [number for number, _ in _HEADING.findall(DESIGN.read_text())]
    assert len(numbers) > 20
    assert len(numbers) == len(set(numbers))


def test_every_cited_decision_exists_and_is_cited_by_its_title() -> None:
    decisions = _decisions()
    problems = [p for path in _sources() for p in _problems(path, decisions)]
    assert problems == []


def test_a_citation_by_a_number_that_moved_is_caught(tmp_path: Path) -> None:
    decisions = {"2": "Providers are plugins", "3": "Launch never waits"}
    stale = tmp_path / "stale.py"
    stale.write_text(
        '"""Launch is asynchronous (DESIGN decision 2, "Launch never waits")."""\n'
        "# Deletes target one Machine (decision\n#  3).\n"
    )
    good = tmp_path / "good.md"
    good.write_text('Launch never\nwaits (design decision 3,\n"Launch never waits").\n')
    stale_problems = [p.split(": ", 1)[1] for p in _problems(stale, decisions, tmp_path)]
    assert stale_problems == [
        "decision 2 ('Launch never waits') is not the decision's title, 'Providers are plugins'",
        "'decision 3': add its title, decision 3 (\"Launch never waits\")",
    ]
    assert _problems(good, decisions, tmp_path) == []
