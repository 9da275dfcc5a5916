"""``karpenter_capi.plugin_api`` (with ``.kube`` and ``.karpenter``) is the whole surface a plugin
may import: a third party's, and the built-in ones (import-linter holds those to it).

Its export lists are pinned here, as httpx pins its own, so that a name enters or leaves the
public API only on purpose (and docs/plugins.md is updated with it).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from types import ModuleType

import pytest

from karpenter_capi import plugin_api
from karpenter_capi.plugin_api import karpenter, kube

ROOT = Path(__file__).resolve().parents[3]
FIXTURE_PLUGIN = Path(__file__).resolve().parent / "fixtures" / "acme_plugin" / "src"
PLUGINS_DOC = ROOT / "docs" / "plugins.md"

# Grouped as docs/plugins.md describes them.
EXPORTS_BY_PURPOSE = {
    "the hook marker": ["hookimpl"],
    "the context and what it holds": ["PluginContext", "KubeClient", "Clock", "ClusterState"],
    "asking another plugin": ["DescribeMachineTemplate"],
    "hook arguments": ["NodeClaim", "NodePool", "NodeClass", "ClusterAPINodeClass"],
    "inventory": ["InstanceType", "Offering", "InstanceTypeOverhead"],
    "quantities": ["ResourceList", "Quantity", "parse_quantity"],
    "machines": ["LaunchResult", "Instance", "LaunchWatch", "Resource"],
    "templates": ["MachineTemplateDescription"],
    "interruptions": [
        "InterruptionNotice",
        "SPOT_INTERRUPTED",
        "REBALANCE_RECOMMENDATION",
        "SCHEDULED_CHANGE",
        "INSTANCE_STOPPED",
        "INSTANCE_TERMINATED",
    ],
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

KUBE_EXPORTS_BY_PURPOSE = {
    "the client port": ["KubeClient", "JsonObject", "Preconditions", "object_key"],
    "errors by kube's status codes": [
        "ApiError",
        "AlreadyExists",
        "Conflict",
        "Gone",
        "NotFound",
        "ServiceUnavailable",
        "Timeout",
        "error_from_status",
        "unreachable",
    ],
    "resources": [
        "Resource",
        "CONFIGMAPS",
        "SECRETS",
        "NODES",
        "NODECLAIMS",
        "CLUSTER_API_NODE_CLASSES",
        "CAPI_GROUP",
        "CAPI_INFRASTRUCTURE_GROUP",
        "CAPI_NODECLASS_GROUP",
        "CapiResources",
        "capi_resources",
    ],
    "Events": ["EventRecorder", "NORMAL", "WARNING"],
    "reading one's own writes": ["WriteLog", "Written"],
    "selectors and CAPI's labels": [
        "SelectorError",
        "selector_to_string",
        "CompiledSelector",
        "compile_selector",
        "EVERYTHING",
        "DEPLOYMENT_NAME_LABEL",
        "SET_NAME_LABEL",
        "POOL_NAME_LABEL",
    ],
}
KARPENTER_EXPORTS_BY_PURPOSE = {
    "labels": ["wellknown", "label_value_problems", "qualified_name_problems"],
    "the NodeClass": ["ClusterAPINodeClass", "LaunchMode", "LaunchSpec", "NodeClass"],
    "values and their errors": [
        "Taint",
        "TaintError",
        "QuantityError",
        "ResourceListError",
        "DurationError",
        "parse_duration",
        "format_timestamp",
        "parse_timestamp",
    ],
    "metrics": ["Metrics"],
}
PINNED = {
    plugin_api: EXPECTED,
    kube: sorted(n for names in KUBE_EXPORTS_BY_PURPOSE.values() for n in names),
    karpenter: sorted(n for names in KARPENTER_EXPORTS_BY_PURPOSE.values() for n in names),
}
PUBLIC_MODULES = pytest.mark.parametrize("module", list(PINNED), ids=lambda m: m.__name__)


@PUBLIC_MODULES
def test_the_exports_are_exactly_the_pinned_list(module: ModuleType) -> None:
    assert sorted(module.__all__) == PINNED[module]
    assert len(set(module.__all__)) == len(module.__all__)
    # Kept sorted (constants first, as ruff sorts) so that a diff shows what changed.
    assert module.__all__ == sorted(module.__all__, key=lambda n: (not n.isupper(), n))


@PUBLIC_MODULES
def test_every_export_resolves_and_says_what_it_is(module: ModuleType) -> None:
    for name in module.__all__:
        exported = getattr(module, name)
        if not (inspect.isclass(exported) or inspect.isroutine(exported)):
            continue  # constants and aliases: named and explained in docs/plugins.md
        doc = inspect.getdoc(exported)
        assert doc, f"{module.__name__}.{name} has no docstring"
        # A dataclass without one gets its own signature as its docstring: that explains nothing.
        assert not doc.startswith(f"{name}("), (
            f"{module.__name__}.{name} has only a generated docstring"
        )


@PUBLIC_MODULES
def test_nothing_public_is_left_out_of_all(module: ModuleType) -> None:
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public == {n for n in module.__all__ if not inspect.ismodule(getattr(module, n))}


def test_every_export_is_in_the_plugin_guide() -> None:
    guide = PLUGINS_DOC.read_text()
    missing = [
        f"{module.__name__}.{name}"
        for module, names in PINNED.items()
        for name in names
        if f"`{name}`" not in guide
    ]
    assert missing == []


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
    public = {module.__name__ for module in PINNED}
    assert imported <= public | {"karpenter_capi.sim.apiserver"}
    assert "karpenter_capi.plugin_api" in imported
