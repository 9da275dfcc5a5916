"""``karpenter-capi apiserver``: a simulated cluster API that kubectl and the controller can use.

Builds an in-memory API server with the project's CRDs and Cluster API registered, loads the
given manifests, serves it over HTTP on loopback and writes a kubeconfig for it, then runs until
interrupted. This is how a person tries the controller (``karpenter-capi run --kubeconfig``)
or pokes at a scenario with ``kubectl`` without a real cluster.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import yaml

from karpenter_capi.core.errors import InvalidInputError
from karpenter_capi.core.kube.errors import ApiError
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig


class ServeError(InvalidInputError):
    """Bad input (``--listen``, a manifest that cannot be read, parsed or loaded): exit code 2.

    Reported in one line. A manifest the server rejects (unknown kind, invalid object) is bad
    input too; only a port that cannot be bound exits 1.
    """


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (port 0 picks a free one); the host must be given."""
    host, sep, port_text = listen.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ServeError(f"--listen {listen!r}: expected HOST:PORT, e.g. 127.0.0.1:0")
    return host.strip("[]"), int(port_text)


def load_manifest_documents(paths: list[Path]) -> list[dict[str, Any]]:
    """Every non-empty document of every (multi-document) YAML file, in order."""
    documents: list[dict[str, Any]] = []
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ServeError(f"cannot read manifest {path}: {exc.strerror}") from None
        try:
            loaded = [doc for doc in yaml.safe_load_all(text) if doc]
        except yaml.YAMLError as exc:
            raise ServeError(f"manifest {path} is not valid YAML: {exc}") from None
        for doc in loaded:
            if not isinstance(doc, dict):
                raise ServeError(f"manifest {path} holds a document that is not an object")
            documents.append(doc)
    return documents


def build_server(manifests: list[dict[str, Any]]) -> Any:
    """An in-memory API server with the project CRDs, Cluster API and ``manifests`` loaded.

    A manifest the server rejects raises ``ServeError`` with the server's message.
    """
    from karpenter_capi.sim.apiserver import InMemoryAPIServer

    server = InMemoryAPIServer()
    server.apply_manifests(_project_crds())
    server.register_cluster_api()
    if manifests:
        try:
            server.apply_manifests(manifests)
        except ApiError as exc:
            raise ServeError(f"manifest rejected: {exc.message}") from None
    return server


def _project_crds() -> list[dict[str, Any]]:
    """NodePool, NodeClaim, ClusterAPINodeClass CRDs, generated from the API models."""
    try:
        from karpenter_capi.core.api.crds import generate_crds
    except ImportError:  # the models package is optional while it is being built
        return []
    return [dict(crd) for crd in generate_crds()]


def run_apiserver(
    listen: str,
    kubeconfig_out: Path | None,
    manifests: list[Path],
    stop: threading.Event | None = None,
    out: TextIO = sys.stdout,
) -> int:
    """Serve until SIGINT/SIGTERM or ``stop`` is set; returns the process exit code."""
    try:
        host, port = parse_listen(listen)
        server = build_server(load_manifest_documents(manifests))
    except ServeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stop = stop or threading.Event()
    restore = _install_signal_handlers(stop)
    try:
        with HttpFront(server, host=host, port=port) as front:
            where = ""
            if kubeconfig_out is not None:
                where = f", kubeconfig {write_kubeconfig(front.url, kubeconfig_out)}"
            print(f"serving on {front.url}{where}", file=out, flush=True)
            while not stop.wait(0.5):
                pass
    except OSError as exc:
        print(f"error: cannot listen on {listen}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    finally:
        restore()
    return 0


def _install_signal_handlers(stop: threading.Event) -> Any:
    """Turn SIGINT/SIGTERM into ``stop``; a no-op off the main thread (e.g. under tests)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore
