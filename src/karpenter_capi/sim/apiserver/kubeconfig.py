"""A kubeconfig pointing at the simulated API server's HTTP front.

So that ``kubectl`` (and ``OfficialClient.from_kubeconfig``) can reach a simulated cluster with
no flags: one cluster, one user with a placeholder bearer token (the front accepts any), one
context named ``karpenter-capi-sim`` made current.
"""

from __future__ import annotations

from pathlib import Path

import yaml

CONTEXT_NAME = "karpenter-capi-sim"
# The front does not authenticate; a token is still set because some clients refuse to send
# requests without credentials of some kind.
PLACEHOLDER_TOKEN = "karpenter-capi-sim-token"


def kubeconfig_document(url: str, context: str = CONTEXT_NAME) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": context, "cluster": {"server": url}}],
        "users": [{"name": context, "user": {"token": PLACEHOLDER_TOKEN}}],
        "contexts": [
            {
                "name": context,
                "context": {"cluster": context, "user": context, "namespace": "default"},
            }
        ],
        "current-context": context,
    }


def write_kubeconfig(url: str, path: Path | str) -> Path:
    """Write (replace) a kubeconfig for ``url`` at ``path``, readable only by its owner."""
    target = Path(path).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(kubeconfig_document(url), sort_keys=False)
    target.write_text(text, encoding="utf-8")
    target.chmod(0o600)
    return target
