"""Reading manifest files (multi-document YAML or JSON) into objects for the in-memory API.

The simulator, the ``apiserver`` command and ``instance-types -f`` all load user files; one
loader gives them the same errors: a file that is not YAML, or a document that is not a
Kubernetes object, is a ``ManifestError`` naming the file and document number.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from karpenter_capi.core.errors import InvalidInputError


class ManifestError(InvalidInputError):
    """A manifest file that cannot be read as Kubernetes objects."""


def load_manifest_text(text: str, source: str = "<string>") -> list[dict[str, Any]]:
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise ManifestError(f"{source}: not valid YAML: {exc}") from None
    objects: list[dict[str, Any]] = []
    for index, document in enumerate(documents, start=1):
        if document is None:
            continue
        if not isinstance(document, dict) or "kind" not in document or "apiVersion" not in document:
            raise ManifestError(
                f"{source}: document {index} is not a Kubernetes object (needs apiVersion and kind)"
            )
        if document["kind"].endswith("List") and isinstance(document.get("items"), list):
            objects.extend(item for item in document["items"] if isinstance(item, dict))
        else:
            objects.append(document)
    return objects


def load_manifest_files(paths: Iterable[Path]) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ManifestError(f"{path}: {exc.strerror or exc}") from None
        objects.extend(load_manifest_text(text, str(path)))
    return objects
