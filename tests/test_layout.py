"""The code base keeps the shape docs/design.md promises (decision 16, "Layers import one way",
and decision 22, "Tests mirror the code").

Each check fails with the list of offenders, so a module that grows too big or a test folder
that stops mirroring the code is named in the failure, not found later by a newcomer.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "karpenter_capi"
TESTS = ROOT / "tests"
MAX_MODULE_LINES = 600
# The third-party plugin distribution the plugin-host tests install by path: data, not tests.
DATA = TESTS / "core" / "plugin_host" / "fixtures"
# Folders named for what they cover across packages, not for one package (tests/README.md).
CROSS_CUTTING = {
    "benchmarks",
    "cli",
    "contract",
    "deploy",
    "e2e",
    "fleet",
    "reliability",
    "support",
}


def _test_folders() -> list[Path]:
    return sorted(
        path
        for path in TESTS.rglob("*")
        if path.is_dir()
        and path.name != "__pycache__"
        and DATA not in (path, *path.parents)
        and any(path.glob("*.py"))
    )


def test_no_source_module_is_over_600_lines() -> None:
    too_long = {
        str(path.relative_to(ROOT)): lines
        for path in SRC.rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert too_long == {}, f"split these along a seam (over {MAX_MODULE_LINES} lines): {too_long}"


def test_every_test_folder_is_a_package() -> None:
    missing = [
        str(folder.relative_to(ROOT))
        for folder in [TESTS, *_test_folders()]
        if not (folder / "__init__.py").exists()
    ]
    assert missing == [], f"helpers are imported as packages; add __init__.py to {missing}"


def test_test_folders_mirror_the_source_packages() -> None:
    astray = []
    for folder in _test_folders():
        parts = folder.relative_to(TESTS).parts
        if parts[0] in CROSS_CUTTING:
            continue
        source = SRC.joinpath(*parts)
        if not (source.is_dir() or source.with_suffix(".py").is_file()):
            astray.append(str(folder.relative_to(ROOT)))
    assert astray == [], f"no source package or module of that name: {astray}"
