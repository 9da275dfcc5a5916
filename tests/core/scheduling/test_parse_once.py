"""core.scheduling reads Kubernetes JSON in one place only, the parser (issue 27; design decision
10, "The official client is the transport; raw JSON and narrow models are the data").

Every other module works on the typed values the parser makes (``PodSpec``, ``Toleration``,
``pod_terms``, requirements), so a pod's JSON is read once per version, not once per stage.
A module that starts taking or building raw mappings again is named here, with the line.
"""

from __future__ import annotations

import re
from pathlib import Path

SCHEDULING = Path(__file__).resolve().parents[3] / "src" / "karpenter_capi" / "core" / "scheduling"
PARSERS = frozenset({"podspec.py", "podspec_terms.py", "daemons.py"})
"""The modules allowed to read Kubernetes JSON, into ``PodSpec``: pods (``podspec``), and the pod
each DaemonSet would run (``daemons``, which hands it to ``podspec``), and the affinity terms and
spreads of a pod (``podspec_terms``, the part of ``podspec``'s parse that follows kube-scheduler's
selector rules)."""
RAW = re.compile(r"\b(Mapping|dict)\[str, Any\]")


def _offenders(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative in PARSERS:
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if RAW.search(line):
                found.append(f"{relative}:{number}: {line.strip()}")
    return found


def test_only_the_parser_reads_kubernetes_json() -> None:
    offenders = _offenders(SCHEDULING)
    assert offenders == [], (
        "core/scheduling reads JSON only in the parsers (podspec*.py, daemons.py); take a PodSpec "
        "or a typed "
        "value instead:\n" + "\n".join(offenders)
    )


def test_the_scan_finds_a_raw_mapping(tmp_path: Path) -> None:
    (tmp_path / "podspec.py").write_text("Pod = Mapping[str, Any]\n")
    (tmp_path / "topology").mkdir()
    (tmp_path / "topology" / "_x.py").write_text("def f(pod: dict[str, Any]) -> None: ...\n")
    assert _offenders(tmp_path) == ["topology/_x.py:1: def f(pod: dict[str, Any]) -> None: ..."]
