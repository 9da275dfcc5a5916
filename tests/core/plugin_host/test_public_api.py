"""``karpenter_capi.plugin_api`` is the whole surface a third-party plugin may import.

Its export list is pinned here, as httpx pins its own, so that a name enters or leaves the
public API only on purpose (and docs/plugins.md is updated with it).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from karpenter_capi import plugin_api

ROOT = Path(__file__).resolve().parents[3]
FIXTURE_PLUGIN = Path(__file__).resolve().parent / "fixtures" / "acme_plugin" / "src"
PLUGINS_DOC = ROOT / "docs" / "plugins.md"

# Grouped as docs/plugins.md describes them.
EXPORTS_BY_PURPOSE = {
    "the hook marker": ["hookimpl"],
    "the context and what it holds": ["PluginContext", "KubeClient", "Clock"],
    "asking another plugin": ["DescribeMachineTemplate"],
    "hook arguments": ["NodeClaim", "NodePool"],
    "inventory": ["InstanceType", "Offering", "InstanceTypeOverhead"],
    "quantities": ["ResourceList", "Quantity", "parse_quantity"],
    "machines": ["LaunchResult", "Instance", "LaunchWatch", "Resource"],
    "templates": ["MachineTemplateDescription"],
    "provider errors": [
        "ProviderError",
        "InsufficientCapacityError",
        "NodeClassNotReadyError",
        "InstanceNotFoundError",
        "RetryableCreateError",
    ],
    "a plugin's own tests": ["Plugins", "PluginEnvironment", "FakeClock"],
    "what the facade reports": ["PluginError", "PluginCallError", "PluginResultError"],
}
EXPECTED = sorted(name for names in EXPORTS_BY_PURPOSE.values() for name in names)


def test_the_exports_are_exactly_the_pinned_list() -> None:
    assert sorted(plugin_api.__all__) == EXPECTED
    assert len(set(plugin_api.__all__)) == len(plugin_api.__all__)
    # Kept sorted so that a diff of the list shows what changed, not where it moved.
    assert plugin_api.__all__ == sorted(plugin_api.__all__)


def test_every_export_resolves_and_says_what_it_is() -> None:
    for name in plugin_api.__all__:
        exported = getattr(plugin_api, name)
        doc = inspect.getdoc(exported)
        assert doc, f"plugin_api.{name} has no docstring"
        # A dataclass without one gets its own signature as its docstring: that explains nothing.
        assert not doc.startswith(f"{name}("), f"plugin_api.{name} has only a generated docstring"


def test_nothing_public_is_left_out_of_all() -> None:
    public = {
        name
        for name, value in vars(plugin_api).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public == set(plugin_api.__all__)


def _karpenter_imports(source: Path) -> set[str]:
    modules: set[str] = set()
    for path in source.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module:
                modules.add(node.module)
            elif isinstance(node, ast.Import):
                modules.update(alias.name for alias in node.names)
    return {module for module in modules if module.split(".")[0] == "karpenter_capi"}


def test_the_example_third_party_plugin_imports_only_the_public_api() -> None:
    assert _karpenter_imports(FIXTURE_PLUGIN) == {"karpenter_capi.plugin_api"}


def test_the_plugin_guide_imports_only_the_public_api_and_the_simulator() -> None:
    """The guide's examples are what authors copy; the simulator's API server is the one other
    import they need, to test a plugin against Kubernetes without a cluster."""
    imported = {
        line.split()[1]
        for line in PLUGINS_DOC.read_text().splitlines()
        if line.startswith(("from karpenter_capi", "import karpenter_capi"))
    }
    assert imported == {"karpenter_capi.plugin_api", "karpenter_capi.sim.apiserver"}
