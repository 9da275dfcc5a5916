"""docs/plugins.md documents every hook of hookspecs.py, with its exact signature."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from karpenter_capi.core import hookspecs

DOC = Path(__file__).resolve().parents[3] / "docs" / "plugins.md"

# A spec as documented: "@hookspec(...)" then the def, on one line or wrapped as ruff formats it.
_SPEC_BLOCK = re.compile(
    r"^@hookspec(?P<options>\([^\n]*\))?\n"
    r"def (?P<signature>karpenter_capi_\w+\(.*?\) -> [^\n]*?): \.\.\.$",
    re.M | re.S,
)
_PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _hookspec_functions() -> dict[str, Callable[..., Any]]:
    return {
        name: function
        for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
        if hasattr(function, f"{hookspecs.PROJECT_NAME}_spec")
    }


def _rendered(name: str, function: Callable[..., Any]) -> str:
    # Annotations are strings (postponed evaluation): render them as written in the source.
    signature = inspect.signature(function)
    parameters = ", ".join(f"{p.name}: {p.annotation}" for p in signature.parameters.values())
    return f"{name}({parameters}) -> {signature.return_annotation}"


def _normalized(signature: str) -> str:
    flat = re.sub(r"\s+", " ", signature)
    return flat.replace("( ", "(").replace(", )", ")").replace(" )", ")")


def _documented() -> dict[str, tuple[str, bool]]:
    specs: dict[str, tuple[str, bool]] = {}
    for match in _SPEC_BLOCK.finditer(DOC.read_text()):
        signature = _normalized(match["signature"])
        name = signature.split("(", 1)[0]
        assert name not in specs, f"{name} is documented twice in {DOC.name}"
        specs[name] = (signature, "firstresult=True" in (match["options"] or ""))
    return specs


def test_hook_names_constant_lists_every_hookspec() -> None:
    assert set(hookspecs.HOOK_NAMES) == set(_hookspec_functions())
    assert all(name.startswith("karpenter_capi_") for name in hookspecs.HOOK_NAMES)


def test_every_hookspec_is_documented_with_its_exact_signature() -> None:
    documented = _documented()
    specs = _hookspec_functions()
    missing = sorted(set(specs) - set(documented))
    assert not missing, f"hooks missing from {DOC.name}: {missing}"
    unknown = sorted(set(documented) - set(specs))
    assert not unknown, f"{DOC.name} documents hooks that do not exist: {unknown}"
    for name, function in specs.items():
        signature, firstresult = documented[name]
        assert signature == _rendered(name, function), f"{name}: signature differs from hookspecs"
        declared = getattr(function, f"{hookspecs.PROJECT_NAME}_spec")["firstresult"]
        assert firstresult == declared, f"{name}: firstresult documented as {firstresult}"


def test_every_hook_has_an_example_implementation() -> None:
    text = DOC.read_text()
    for name in _hookspec_functions():
        assert re.search(rf"@hookimpl(\(.*\))?\ndef {name}\(", text), f"no example for {name}"


def test_code_examples_are_valid_python() -> None:
    for number, block in enumerate(_PYTHON_BLOCK.findall(DOC.read_text()), start=1):
        compile(block, f"{DOC.name} python block {number}", "exec")
