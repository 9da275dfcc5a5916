"""Commit subjects stay short enough to read in `git log --oneline` (issue 27, item 5).

History before SINCE had subjects of up to 800 characters; the habit starts there, so only the
commits after it are checked. The check reads the checkout's own history and skips, saying why,
where there is none to read (a source tarball, git absent, a shallow clone without SINCE).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The main branch's head when the rule was adopted: every commit after it keeps the rule.
SINCE = "a817ff9c24b7bc05a8678ba0b0756522ae415b80"
MAX_SUBJECT = 72


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
    )


def _subjects_since(start: str) -> list[tuple[str, str]]:
    """(short hash, subject) of every commit after `start` up to HEAD, or skip the test."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    if _git("rev-parse", "--is-inside-work-tree").returncode != 0:
        pytest.skip(f"{ROOT} is not a git checkout")
    if _git("cat-file", "-e", f"{start}^{{commit}}").returncode != 0:
        pytest.skip(f"commit {start[:12]} is not in this clone's history (shallow clone?)")
    log = _git("log", "--format=%h%x00%s", f"{start}..HEAD")
    assert log.returncode == 0, log.stderr
    return [
        (short, subject)
        for short, _, subject in (line.partition("\0") for line in log.stdout.splitlines())
    ]


def too_long(subjects: list[tuple[str, str]]) -> list[str]:
    """One line per subject over MAX_SUBJECT characters, naming the commit and its length."""
    return [
        f"{short} ({len(subject)} characters): {subject}"
        for short, subject in subjects
        if len(subject) > MAX_SUBJECT
    ]


def test_too_long_names_the_commit_and_its_length() -> None:
    subject = "x" * (MAX_SUBJECT + 1)

    assert too_long([("abc1234", "short"), ("def5678", subject)]) == [
        f"def5678 (73 characters): {subject}"
    ]
    assert too_long([("abc1234", "y" * MAX_SUBJECT)]) == []


def test_commit_subjects_are_at_most_72_characters() -> None:
    offenders = too_long(_subjects_since(SINCE))

    assert not offenders, (
        f"commit subjects over {MAX_SUBJECT} characters (reword them; the why goes in the "
        "body, after a blank line):\n" + "\n".join(offenders)
    )
